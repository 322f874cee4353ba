#!/usr/bin/env bash
# The README's first command, `bash jobs/demo.sh`, end to end at 100 steps
# (STEPS=100; the README's run takes 2000): exit 0, every file its closing
# "What to look at" list names exists and is not empty, the translation has
# one line per dev reference, the training log reached the last step, and
# the attention file holds maps.  Run into the directory of an earlier demo
# (its marker .demo-run and a file of its own), it starts afresh.  Refused in one line with exit 2, nothing touched: a
# RUN_DIR that holds files not from a demo (it would be emptied), STEPS
# under 10 or not a number, RANKS not a positive integer.
set -u
. "$(dirname "$0")/lib.sh"
cd "$TOP"
W=$(mktemp -d /tmp/test_demo.XXXXXX)
trap 'rm -rf "$W"' EXIT

# ---- refusals: one line, exit 2, nothing deleted ----------------------------
mkdir -p "$W/mine" && echo precious > "$W/mine/notes.txt"
expect_error 2 "^error: $W/mine: exists and is not an earlier demo's directory" bash jobs/demo.sh "$W/mine"
[ "$(cat "$W/mine/notes.txt" 2>/dev/null)" = precious ] || fail "the demo deleted a directory that was not a demo's"
expect_error 2 "^error: STEPS=5: the demo checkpoints every STEPS/10 steps" env STEPS=5 bash jobs/demo.sh "$W/d0"
expect_error 2 "^error: STEPS='2k': not a positive integer" env STEPS=2k bash jobs/demo.sh "$W/d0"
expect_error 2 "^error: RANKS='0': not a positive integer" env RANKS=0 bash jobs/demo.sh "$W/d0"
[ -e "$W/d0" ] && fail "a refused demo created its RUN_DIR"
ok "refused in one line, exit 2: a non-demo RUN_DIR (kept), STEPS=5, STEPS=2k, RANKS=0"

# ---- the demo, after an earlier one into the same directory ---------------------------------------
# (an earlier demo's directory as the demo leaves it for the check: its
# marker; a whole first demo, run here until 2026-12-07, cost ~20 CPU s)
RUN=$W/demo
mkdir -p "$RUN" && touch "$RUN/.demo-run" && echo stale > "$RUN/stale.txt"
STEPS=100 bash jobs/demo.sh "$RUN" > "$W/demo.log" 2>&1 || fail "demo (STEPS=100, again) failed: $(tail -n 3 "$W/demo.log")"
[ -e "$RUN/stale.txt" ] && fail "the second demo did not start afresh"
paths=$(sed -n '/^What to look at:/,$p' "$W/demo.log" | grep -o "$RUN/[^ ,]*")
[ "$(echo "$paths" | grep -c .)" -ge 8 ] || fail "the closing list names too few files: $(tail -n 9 "$W/demo.log")"
for f in $paths; do
    [ -s "$f" ] || fail "the closing list names $f, which is missing or empty"
    case $f in *.png) [ -s "${f%.png}.pdf" ] || fail "${f%.png}.pdf: missing beside $f" ;; esac
done
grep -q '^step 100 ' "$RUN/train.log" || fail "train.log has no step 100: $(tail -n 2 "$RUN/train.log")"
[ "$(wc -l < "$RUN/dev.beam4.txt")" -eq "$(wc -l < "$RUN/dev.ref.txt")" ] && [ -s "$RUN/dev.ref.txt" ] ||
    fail "dev.beam4.txt: $(wc -l < "$RUN/dev.beam4.txt") lines for $(wc -l < "$RUN/dev.ref.txt") references"
grep -q '^translate: exact match ' "$W/demo.log" || fail "translate printed no exact-match line"
h5ls -r "$RUN/attention.h5" | grep -q 'Dataset' || fail "attention.h5 holds no maps: $(h5ls -r "$RUN/attention.h5")"
ok "demo (STEPS=100, 2 ranks) into an earlier demo's directory, started afresh: $(echo "$paths" | grep -c .) listed files present, $(wc -l < "$RUN/dev.beam4.txt") translations"

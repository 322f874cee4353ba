#!/usr/bin/env bash
# The README's "Local quick start" commands, as a reader copies them, run in
# a scratch directory that sees this checkout's bin/, input/, analysis/ and
# .venv: each exits 0, and what its comment promises holds, i.e. a
# `params N` it names is the count printed, and the runs/ files it names
# (brace lists expanded) exist and are not empty.  Only the step counts are
# cut (train_steps=300 -> 30, ckpt_steps=50 -> 5: still the five
# checkpoints `average --last 5` needs) to keep the test short; the set-up
# lines (install-deps.sh, make) are what the suite itself has already run.
# A README edit that breaks a command, renames an option or an output, or
# changes a count fails here.
set -u
. "$(dirname "$0")/lib.sh"
W=$(mktemp -d /tmp/test_readme.XXXXXX)
trap 'rm -rf "$W"' EXIT
for d in bin input analysis .venv; do ln -s "$TOP/$d" "$W/$d"; done

# the block's commands, one a line (continuations joined), comments kept
block=$(awk '/^## Local quick start/ { q = 1 } q && /^```sh/ { n++; if (n == 2) { on = 1; next } }
             on && /^```/ { exit } on' "$TOP/README.md" | sed -e ':a' -e '/\\$/N; s/\\\n *//; ta')
[ "$(grep -c . <<< "$block")" -ge 6 ] || fail "README.md: no Local quick start command block found: $block"

n=0
while IFS= read -r line; do
    cmd=${line%%#*} note=""
    [[ $line == *"#"* ]] && note=${line#*#}
    case $cmd in *install-deps.sh* | make*) continue ;; esac
    cmd=$(sed -E 's/train_steps=300/train_steps=30/; s/ckpt_steps=50/ckpt_steps=5/' <<< "$cmd")
    (cd "$W" && bash -c "$cmd") < /dev/null > "$W/out.txt" 2>&1 || fail "README command failed: $cmd: $(tail -n 3 "$W/out.txt")"
    if [[ $note =~ params\ ([0-9]+) ]]; then
        grep -qx "params ${BASH_REMATCH[1]}" "$W/out.txt" ||
            fail "README says '$note' for '$cmd'; it printed: $(grep -m1 '^params' "$W/out.txt")"
    fi
    for p in $(grep -oE 'runs/[^ ;:)]*[^ ;:),.]' <<< "$note"); do
        for f in $(eval "echo $p"); do   # runs/x/curves_{steps,time}.png
            [ -s "$W/$f" ] || fail "README says '$cmd' writes $f: missing or empty"
        done
    done
    for f in $(grep -oE -- '--output [^ ]+' <<< "$cmd" | cut -d' ' -f2); do
        [ -s "$W/$f" ] || fail "'$cmd': its --output $f is missing or empty"
    done
    n=$((n + 1))
done <<< "$block"
[ "$n" -ge 6 ] || fail "only $n README commands ran"
ok "the README's $n Local quick start commands ran (steps cut to 30), each output and count its comments name there"

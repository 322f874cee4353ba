#!/usr/bin/env bash
# Reader hardening found while fuzzing (tests/fuzz/, docs/readers.md):
#   1. a dataset file that declares 2^40 ids in a few bytes (a chunked
#      dataset whose chunks were never written) is refused in one line,
#      without trying to allocate 4 TB (run under a 2 GB address-space limit);
#   2. an `attention --sentences` list with a trailing comma is refused;
#   3. the committed fuzz regression inputs (tests/fuzz/regressions/) and seeds
#      still load or are refused in one line by the real binary.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ckpt_lib.sh"   # PY
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
seed=$TOP/tests/fuzz/seeds/dataset/counting.h5
[ -f "$seed" ] || fail "$seed: missing"
cp "$seed" "$W/huge.h5"
$PY - "$W/huge.h5" <<'PY' || fail "could not craft the file"
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
g = f["splits/train"]
del g["src_ids"]
g.create_dataset("src_ids", shape=(2**40,), dtype="i4", chunks=(1024,))
PY
[ "$(stat -c %s "$W/huge.h5")" -lt 400000 ] || fail "the crafted file is not small"
( ulimit -v 2000000; "$BIN" eval --checkpoint "$TOP/tests/fuzz/seeds/checkpoint/counting.h5" --data "$W/huge.h5" \
    --split train ) > "$W/out" 2> "$W/err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c . "$W/err")" -eq 1 ] &&
    grep -q "^error: $W/huge.h5: split 'train': cannot read the split's ids/offsets" "$W/err" ||
    fail "2^40 declared ids: exit $rc: $(cat "$W/err")"
ok "a dataset declaring 2^40 ids in $(stat -c %s "$W/huge.h5") bytes: $(cat "$W/err")"

expect_error 2 "error: --sentences '1,': expected indices like 0,5,10-19" \
    "$BIN" attention --checkpoint "$TOP/tests/fuzz/seeds/checkpoint/synthetic.h5" --sentences 1, --output "$W/a.h5"
ok "--sentences with a trailing comma refused"
for list in '1,,2' '+1' ' 1' '1, 2' '1-+3' '3-1' '1-' '-1'; do
    expect_error 2 "error: --sentences '$list': expected indices like 0,5,10-19" \
        "$BIN" attention --checkpoint "$TOP/tests/fuzz/seeds/checkpoint/synthetic.h5" --sentences "$list" --output "$W/a.h5"
done
ok "--sentences with a sign, a blank, an empty item or a reversed range refused"

# every committed fuzz input through the real binary: exit 0 or 2, one error line
n=0
for f in "$TOP"/tests/fuzz/seeds/dataset/* "$TOP"/tests/fuzz/regressions/dataset/*; do
    [ -f "$f" ] || continue
    "$BIN" eval --checkpoint "$TOP/tests/fuzz/seeds/checkpoint/counting.h5" --data "$f" --split dev > /dev/null 2> "$W/err"
    rc=$?
    { [ "$rc" -eq 0 ] || { [ "$rc" -eq 2 ] && [ "$(grep -c '^error: ' "$W/err")" -eq 1 ]; }; } ||
        fail "$f: exit $rc: $(cat "$W/err")"
    n=$((n + 1))
done
for f in "$TOP"/tests/fuzz/seeds/checkpoint/* "$TOP"/tests/fuzz/regressions/checkpoint/*; do
    [ -f "$f" ] || continue
    "$BIN" average --output "$W/avg.h5" "$f" "$f" > /dev/null 2> "$W/err"
    rc=$?
    { [ "$rc" -eq 0 ] || { [ "$rc" -eq 2 ] && [ "$(grep -c '^error: ' "$W/err")" -eq 1 ]; }; } ||
        fail "$f: exit $rc: $(cat "$W/err")"
    n=$((n + 1))
done
ok "$n committed fuzz inputs: loaded, or refused in one line with exit 2"

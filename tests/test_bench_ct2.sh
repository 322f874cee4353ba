#!/usr/bin/env bash
# The plumbing of the CTranslate2 decoding benchmark (tests/bench/decode_ct2.sh,
# `make bench-ct2`), offline and at small scale: the tiny word-for-word model
# of test_ct2_export, 5 dev sentences, 2 repeats, 1 thread.  Asserts the CSV
# (header, one row per run, interleaved ours / CT2 fp32 / CT2 int8 within each
# repeat, numbers where numbers belong), the markdown table (one row per beam,
# threads and engine, a CT2/ours ratio on the CT2 rows, a sacreBLEU on every
# row), one output line per input sentence from every engine, greedy CT2 fp32
# equal to ours (same pieces in, same length rule), and one-line errors: no
# CKPT, a missing or corrupt checkpoint (exit 2), a Python without
# ctranslate2 (one line, exit 0).  No timings are asserted.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$TOP"
ct2_python
W=$(mktemp -d /tmp/test_bench_ct2.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
BENCH=tests/bench/decode_ct2.sh

word_model "$W"

export DATA=$W/d.h5 SPLIT=dev SENTENCES=5 REPEATS=2 THREADS=1 OUT=$W/out
CKPT=$CK bash "$BENCH" >"$W/bench.log" 2>&1 || { cat "$W/bench.log"; fail "decode_ct2.sh exited non-zero"; }
ok "decode_ct2.sh on 5 sentences, 2 repeats: $(grep -c '^| [0-9]' "$W/bench.log") table rows"

# the CSV: one row per run, in the order run (interleaved), numbers
CSV=$OUT/timings.csv
[ "$(head -1 "$CSV")" = "repeat,engine,beam,threads,sentences,target_tokens,decode_s,load_s,wall_s" ] \
    || fail "CSV header: $(head -1 "$CSV")"
want=$(for r in 1 2; do for K in 4 1; do for e in ours ct2-fp32 ct2-int8; do echo "$r,$e,$K,1,5"; done; done; done)
got=$(tail -n +2 "$CSV" | cut -d, -f1-5)
[ "$got" = "$want" ] || fail "CSV rows (repeat,engine,beam,threads,sentences) are not the interleaved order: $got"
bad=$(tail -n +2 "$CSV" | awk -F, 'NF != 9 || $6 !~ /^[0-9]+$/ || $7 !~ /^[0-9.]+$/ || $7 <= 0 ||
                                    $8 !~ /^-?[0-9.]+$/ || $9 !~ /^[0-9.]+$/ || $9 < $7' | head -1)
[ -z "$bad" ] || fail "CSV row with a bad field: $bad"
ok "timings.csv: 12 rows, interleaved ours, CT2 fp32, CT2 int8 per setting and repeat"

# the table: a row per beam x threads x engine; ratios on CT2 rows; sacreBLEU on all
rows=$(grep '^| [0-9]' "$OUT/table.md")
[ "$(wc -l <<<"$rows")" -eq 6 ] || fail "table: $(wc -l <<<"$rows") rows, expected 6: $rows"
cmp -s <(grep '^|' "$W/bench.log") <(grep '^|' "$OUT/table.md") || fail "the printed table is not table.md's"
bad=$(awk -F' *[|] *' '($7 == "-") != ($4 == "ours") || NF != 10 || $8 !~ /^[0-9.]+$/ ||
    ($7 != "-" && $7 !~ /^[0-9.]+ \([0-9.]+-[0-9.]+\)$/)' <<<"$rows" | head -1)
[ -z "$bad" ] || fail "table row with a bad cell: $bad"
ok "table.md: 6 rows (beam 4 and 1 x ours, CT2 fp32, CT2 int8), CT2/ours and sacreBLEU filled"

for f in ours ct2-fp32 ct2-int8; do
    for K in 4 1; do
        o=$OUT/outputs/$f-b$K-t1.txt
        [ "$(wc -l <"$o")" -eq 5 ] || fail "$o: $(wc -l <"$o") lines for 5 sentences"
    done
done
cmp -s "$OUT/outputs/ours-b1-t1.txt" "$OUT/outputs/ct2-fp32-b1-t1.txt" \
    || fail "greedy: CT2 fp32 differs from ours: $(diff "$OUT/outputs/ours-b1-t1.txt" "$OUT/outputs/ct2-fp32-b1-t1.txt" | head -3)"
grep -q '| 1 | 1 | ct2-fp32 | .* | 5 of 5 |$' <<<"$rows" || fail "the table does not count 5 of 5 greedy outputs equal"
ok "every engine wrote 5 lines; greedy CT2 fp32 = ours"

# no CKPT, a missing or corrupt checkpoint: one stderr line, exit 2
one_line_error 2 "^error: $W/nope.h5: no such checkpoint file" env CKPT="$W/nope.h5" bash "$BENCH"
one_line_error 2 "^error: CKPT=FILE is required" env CKPT= bash "$BENCH"
printf 'not hdf5\n' >"$W/junk.h5"
one_line_error 2 "^error: $W/junk.h5: not an HDF5 file" env CKPT="$W/junk.h5" bash "$BENCH"
printf '#!/bin/sh\nexit 1\n' >"$W/no-ct2-python" && chmod +x "$W/no-ct2-python"
CKPT=$CK CT2_PY=$W/no-ct2-python bash "$BENCH" >"$W/skip.log" 2>&1 || fail "without ctranslate2: exit $?"
[ "$(wc -l <"$W/skip.log")" -eq 1 ] && grep -q "^skipped: no ctranslate2" "$W/skip.log" \
    || fail "without ctranslate2: not one 'skipped:' line: $(cat "$W/skip.log")"
ok "without ctranslate2: $(cat "$W/skip.log")"
echo "ok: test_bench_ct2"

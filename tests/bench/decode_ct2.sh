#!/usr/bin/env bash
# Decoding speed, ours against CTranslate2 (issue 45; docs/performance.md,
# "Decoding speed against CTranslate2"): `make bench-ct2 CKPT=FILE`.
# The checkpoint is exported with analysis/ct2_export.py twice (float32, and
# int8: another model, reported apart), and the same sentences (the split's
# stored pieces, longest first, batches of BATCH, at most source + MAX_LEN_A
# output tokens) are translated by `bin/transformer translate` and by
# ctranslate2.Translator.translate_batch (tests/bench/ct2_decode.py) for each
# beam of BEAMS and thread count of THREADS (ours threads=N, CTranslate2
# intra_threads=N inter_threads=1), REPEATS times, interleaved (ours, CT2
# fp32, CT2 int8, then the next setting) so that the machine's load falls on
# both alike.  Timed: ours, the decode time translate prints (model and
# data loaded, before detokenisation); CT2, the translate_batch calls with
# the model loaded (pieces in, pieces out).  Load times are in the CSV.
# Prints a markdown table (medians, the spread over the repeats, CT2/ours
# as the median of per-repeat ratios, sacreBLEU of every output, how many
# outputs equal ours) and writes OUT/{timings.csv,table.md,outputs/}.
#   CKPT       checkpoint (required)
#   DATA       its dataset (default data/multi30k-v2000.h5), SPLIT (test2016)
#   SENTENCES  the split's first N sentences only (default 0: all)
#   REPEATS (3), THREADS ("1 2"), BEAMS ("4 1"), BATCH (64), MAX_LEN_A (50)
#   OUT        results folder (default runs/bench-ct2)
#   CT2_PY     Python with ctranslate2 (.venv-hf); without it one line, exit 0
#   BLEU_PY    Python with sacrebleu (.venv) for analysis/bleu.py
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
cd "$TOP"
DATA=${DATA:-data/multi30k-v2000.h5}
SPLIT=${SPLIT:-test2016}
SENTENCES=${SENTENCES:-0}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-1 2}
BEAMS=${BEAMS:-4 1}
BATCH=${BATCH:-64}
MAX_LEN_A=${MAX_LEN_A:-50}
OUT=${OUT:-runs/bench-ct2}
PY=${CT2_PY:-$TOP/.venv-hf/bin/python}
BLEU_PY=${BLEU_PY:-$TOP/.venv/bin/python}
die() { echo "error: $*" >&2; exit 2; }

[ -n "${CKPT:-}" ] || die "CKPT=FILE is required: the checkpoint to measure (trained on DATA=$DATA)"
[ -f "$CKPT" ] || die "$CKPT: no such checkpoint file"
[ -f "$DATA" ] || die "$DATA: no such dataset file"
for v in SENTENCES REPEATS BATCH MAX_LEN_A; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v}: not a non-negative integer"
done
[ "$REPEATS" -gt 0 ] && [ "$BATCH" -gt 0 ] || die "REPEATS and BATCH must be positive"
if ! "$PY" -c "import ctranslate2" 2>/dev/null; then
    echo "skipped: no ctranslate2 for $PY (bash tests/install-deps.sh installs it in .venv-hf)"
    exit 0
fi
W=$(mktemp -d /tmp/decode_ct2.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT/outputs"
rm -f "$OUT"/outputs/*.txt

# step LOG CMD...: runs a setup command; on failure its last line, exit 2
step() {
    local log=$1; shift
    "$@" >"$W/$log" 2>&1 || { tail -1 "$W/$log" >&2; exit 2; }
}
step prep.log "$PY" tests/bench/ct2_decode.py prep "$CKPT" "$DATA" "$SPLIT" "$SENTENCES" "$W"
D=$DATA
[ -f "$W/data.h5" ] && D=$W/data.h5
N=$(wc -l <"$W/src.jsonl")
[ "$N" -gt 0 ] || die "$DATA: split $SPLIT has no sentences"
step export-fp32.log "$PY" analysis/ct2_export.py "$CKPT" "$D" "$W/ct2-fp32"
step export-int8.log "$PY" analysis/ct2_export.py "$CKPT" "$D" "$W/ct2-int8" --quantization int8
LP=$(grep -o 'length_penalty [0-9.]*' "$W/export-fp32.log" | cut -d' ' -f2)
ALPHA=$(grep -o 'GNMT alpha [0-9.]*' "$W/export-fp32.log" | cut -d' ' -f3)
[ -n "$LP" ] && [ -n "$ALPHA" ] || die "the export printed no length_penalty: $(cat "$W/export-fp32.log")"

CSV=$OUT/timings.csv
echo "repeat,engine,beam,threads,sentences,target_tokens,decode_s,load_s,wall_s" >"$CSV"
now() { date +%s.%N; }
# ours REPEAT BEAM THREADS: decode_s = sentences / the sentences/s translate
# prints (its time, unrounded); load_s = the rest of the command's wall time
# (model, data, detokenisation)
ours() {
    local r=$1 K=$2 th=$3 t0 t1 n tok sps
    t0=$(now)
    "$BIN" translate --checkpoint "$CKPT" --data "$D" --split "$SPLIT" --output "$OUT/outputs/ours-b$K-t$th.txt" \
        --reference "$W/ref.txt" --batch-size "$BATCH" device=cpu threads="$th" beam="$K" len_alpha="$ALPHA" \
        max_len_a="$MAX_LEN_A" >"$W/ours.log" 2>&1 || die "translate: $(tail -1 "$W/ours.log")"
    t1=$(now)
    read -r n tok sps < <(sed -nE 's/^translate: ([0-9]+) sentences, ([0-9]+) target tokens in [0-9.]+s: '\
'([0-9.]+) sentences\/s.*/\1 \2 \3/p' "$W/ours.log")
    [ -n "${sps:-}" ] || die "translate printed no timing line: $(tail -1 "$W/ours.log")"
    awk -v r="$r" -v K="$K" -v th="$th" -v n="$n" -v tok="$tok" -v sps="$sps" -v w="$(echo "$t1 - $t0" | bc)" \
        'BEGIN { d = n / sps; printf "%s,ours,%s,%s,%s,%s,%.4f,%.4f,%.4f\n", r, K, th, n, tok, d, w - d, w }' >>"$CSV"
}
# ct2 REPEAT MODEL BEAM THREADS (MODEL: fp32 or int8)
ct2() {
    local r=$1 q=$2 K=$3 th=$4 t0 t1 load dec n tok ct
    t0=$(now)
    "$PY" tests/bench/ct2_decode.py run "$W/ct2-$q" "$W" "$K" "$LP" "$th" "$BATCH" "$MAX_LEN_A" \
        "$OUT/outputs/ct2-$q-b$K-t$th.txt" >"$W/ct2.log" 2>&1 || die "ct2 $q: $(tail -1 "$W/ct2.log")"
    t1=$(now)
    read -r load dec n tok ct < <(awk '/^ct2:/ { print $3, $5, $7, $9, $11 }' "$W/ct2.log")
    printf '%s,ct2-%s,%s,%s,%s,%s,%s,%s,%.4f\n' "$r" "$q" "$K" "$th" "$n" "$tok" "$dec" "$load" \
        "$(echo "$t1 - $t0" | bc)" >>"$CSV"
    echo "$ct" >"$W/compute-$q"
}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$REPEATS"); do
    for th in $THREADS; do
        for K in $BEAMS; do
            ours "$r" "$K" "$th"
            ct2 "$r" fp32 "$K" "$th"
            ct2 "$r" int8 "$K" "$th"
        done
    done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
for f in "$OUT"/outputs/*.txt; do
    [ "$(wc -l <"$f")" -eq "$N" ] || die "$f: $(wc -l <"$f") lines for $N sentences"
done

# sacreBLEU of every output against the split's references (translate --reference)
: >"$W/bleu.tsv"
sig="- (no sacrebleu for $BLEU_PY: make venv)"
if "$BLEU_PY" -c "import sacrebleu, sacremoses" 2>/dev/null; then
    for f in "$OUT"/outputs/*.txt; do
        step bleu.json "$BLEU_PY" analysis/bleu.py --json "$f" "$W/ref.txt"
        printf '%s\t%s\n' "$(basename "$f" .txt)" "$(grep -o '"sacrebleu": [0-9.]*' "$W/bleu.json" | cut -d' ' -f2)" >>"$W/bleu.tsv"
        sig=$(grep -o '"signature": "[^"]*"' "$W/bleu.json" | cut -d'"' -f4)
    done
fi
{
    echo "## Decoding speed, ours vs CTranslate2 $("$PY" -c 'import ctranslate2; print(ctranslate2.__version__)') ($(date -u +%F))"
    echo
    echo "checkpoint $CKPT, data $DATA, split $SPLIT: $N sentences, batches of $BATCH longest first,"
    echo "at most source + $MAX_LEN_A output tokens (CT2: a batch's longest source sets its limit);"
    echo "beam 4: ours GNMT alpha $ALPHA, CT2 length_penalty $LP (ct2_export.py's mapping)."
    echo "Threads: ours threads=N, CT2 intra_threads=N inter_threads=1; $REPEATS repeat(s), interleaved"
    echo "(ours, CT2 fp32, CT2 int8 for each setting); figures are medians (min-max over the repeats);"
    echo "CT2 / ours is the median of the per-repeat speed ratios. CT2 int8 ($(cat "$W/compute-int8"))"
    echo "is another model: compare its speed and BLEU apart. CT2 fp32 computes in $(cat "$W/compute-fp32")."
    echo "Timed: ours, the decode time translate prints (model and data loaded, before detokenisation);"
    echo "CT2, the translate_batch calls with the model loaded (pieces in, pieces out). Load times"
    echo "(ours: wall time less decode time) and wall times are in $CSV."
    echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//');"
    echo "load average $load0 before, $load1 after."
    echo
    "$PY" tests/bench/ct2_decode.py table "$CSV" "$W/bleu.tsv" "$OUT/outputs"
    echo
    echo "sacreBLEU signature: $sig"
    echo "command: CKPT=$CKPT DATA=$DATA SPLIT=$SPLIT SENTENCES=$SENTENCES REPEATS=$REPEATS THREADS=\"$THREADS\" BEAMS=\"$BEAMS\" BATCH=$BATCH MAX_LEN_A=$MAX_LEN_A make bench-ct2"
} | tee "$OUT/table.md"

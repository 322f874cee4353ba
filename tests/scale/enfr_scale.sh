#!/usr/bin/env bash
# WMT14 En-Fr at scale without the download: a generated corpus of that
# shape (tests/scale/gen_corpus.c: log-normal lengths, median ~26 pieces a
# side, target ~1.1 x source, Zipf lexicon, vocabulary 32000) measures
#  1. prepare's throughput: pairs/s of the whole run and of the encoding
#     stage at --jobs 1 and 2 (and that both write the same arrays), the
#     rest (validation, parsing the ids, writing), and prepare's peak RSS
#     (GNU time %M: prepare or its largest child);
#  2. the training data's memory per rank and per node with 1, 2 and 4
#     ranks on one node (tests/lib.sh node_memory: per node the sum over
#     ranks of anonymous memory + Pss of the mapped dataset; per rank the
#     peak VmHWM, shared pages counted in full), minus the same model on a
#     tiny dataset: the data per node must stay flat as ranks are added.
# It prints a markdown table for docs/performance.md (and writes it to
# OUT/enfr_scale.md).  Timings need quiet cores: run it alone.
#
#   tests/scale/enfr_scale.sh [PAIRS [OUT]]     (PAIRS default 3000000)
#   env: VOCAB (32000), SENTENCES (spm_train sample, 1000000), JOBS_LIST
#        ("1 2"), RANKS_LIST ("1 2 4"), KEEP=1 keeps the work folder
#   tiny functional run: VOCAB=1000 tests/scale/enfr_scale.sh 3000
# Needs: make, make tests (bin/tests/gen_corpus), spm_train, mpirun, h5dump,
# /usr/bin/time; disk about 400 bytes a pair (3M pairs: ~1.2 GB).
set -u
. "$(dirname "$0")/../lib.sh"
GEN=$TOP/bin/tests/gen_corpus
[ -x "$GEN" ] || fail "$GEN: not built (make tests)"
[ -x /usr/bin/time ] || fail "/usr/bin/time: missing (apt-get install time)"
PAIRS=${1:-3000000}
OUT=${2:-$TOP/build/enfr-scale}
VOCAB=${VOCAB:-32000}
mkdir -p "$OUT"
W=$(mktemp -d "$OUT/work.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$W"' EXIT
REPORT=$OUT/enfr_scale.md
now() { date +%s.%N; }
say() { echo "$*" | tee -a "$REPORT"; }
: >"$REPORT"
say "### WMT14 En-Fr shape, $PAIRS generated pairs, vocabulary $VOCAB ($(date -u +%Y-%m-%d), $(nproc) cores, $(hostname))"
say ""

# ---- 1. prepare
t0=$(now)
"$GEN" text "$PAIRS" 1 "$W/train.en" "$W/train.fr" || fail "gen_corpus text"
"$GEN" text 3000 2 "$W/dev.en" "$W/dev.fr" || fail "gen_corpus text dev"
echo "generated $(du -sh "$W" | cut -f1) of text in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')s" >&2
say "| prepare --jobs | total s | pairs/s | spm_train s | spm_encode s | encode pairs/s | rest s | peak RSS MB |"
say "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
first=
for j in ${JOBS_LIST:-1 2}; do
    /usr/bin/time -f "%e %M" -o "$W/time.$j" "$BIN" prepare --out "$W/p$j.h5" --jobs "$j" threads="$j" \
        --sentences "${SENTENCES:-1000000}" vocab_size="$VOCAB" max_len=256 \
        --split train "$W/train.en" "$W/train.fr" --split dev "$W/dev.en" "$W/dev.fr" >"$W/prep.$j.log" 2>&1 ||
        fail "prepare --jobs $j: $(tail -3 "$W/prep.$j.log")"
    read -r el rss <"$W/time.$j"
    tr=$(sed -n 's/.*spm_train: .* in \([0-9.]*\)s.*/\1/p' "$W/prep.$j.log")
    te=$(sed -n 's/.*spm_encode: .* in \([0-9.]*\)s.*/\1/p' "$W/prep.$j.log")
    say "$(awk -v j="$j" -v e="$el" -v r="$rss" -v tr="$tr" -v te="$te" -v n="$PAIRS" 'BEGIN {
        printf "| %d | %.1f | %.0f | %.1f | %.1f | %.0f | %.1f | %.0f |", j, e, n / e, tr, te, n / te, e - tr - te, r / 1024 }')"
    if [ -z "$first" ]; then first=$j; else
        for a in src_ids tgt_ids src_offsets tgt_offsets; do
            h5dump -d /splits/train/$a -b LE -o "$W/a.bin" "$W/p$first.h5" >/dev/null
            h5dump -d /splits/train/$a -b LE -o "$W/b.bin" "$W/p$j.h5" >/dev/null
            cmp -s "$W/a.bin" "$W/b.bin" || fail "train $a differs between --jobs $first and --jobs $j"
        done
    fi
done
rm -f "$W"/p*.h5 "$W"/*.bin   # spm_train threads = jobs: the vocabularies may differ; the arrays of
say ""                         # one run must not depend on the encoding workers (test_data_parallel)

# ---- 2. memory per rank and per node
"$GEN" ids "$W/big.h5" "$PAIRS" "$VOCAB" 1 || fail "gen_corpus ids"
"$GEN" ids "$W/tiny.h5" 2000 "$VOCAB" 2 || fail "gen_corpus ids tiny"
file_mb=$(awk -v b="$(stat -c %s "$W/big.h5")" 'BEGIN { printf "%.0f", b / 1048576 }')
A=(train vocab_size="$VOCAB" max_len=256 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 n_layers=1 max_tokens=1000
   train_steps=3 log_steps=1 eval_steps=0 threads=1)
say "Dataset file $file_mb MB (16-bit ids, $PAIRS pairs). Memory in MB; data = the run minus the same run on a 2000-pair file."
say ""
say "| ranks | node | node, data | rank peak VmHWM | largest rank | data per node / 1 rank |"
say "| ---: | ---: | ---: | ---: | ---: | ---: |"
d1=
for np in ${RANKS_LIST:-1 2 4}; do
    read -r nb hb rb < <(node_memory "$np" "$W/m$np.log" "$W/big.h5" "${A[@]}" data="$W/big.h5") ||
        fail "$np ranks: $(tail -3 "$W/m$np.log")"
    read -r nt _ _ < <(node_memory "$np" "$W/t$np.log" "$W/tiny.h5" "${A[@]}" data="$W/tiny.h5") ||
        fail "$np ranks (tiny): $(tail -3 "$W/t$np.log")"
    d=$((nb - nt)); [ -n "$d1" ] || d1=$d
    say "$(awk -v np="$np" -v nb="$nb" -v d="$d" -v hb="$hb" -v rb="$rb" -v d1="$d1" 'BEGIN {
        printf "| %d | %.0f | %.0f | %.0f | %.0f | %.2f |", np, nb / 1024, d / 1024, hb / 1024, rb / 1024, d / d1 }')"
done
say ""
say "(tests/scale/enfr_scale.sh $PAIRS; VOCAB=$VOCAB SENTENCES=${SENTENCES:-1000000})"
echo "report: $REPORT" >&2

#!/usr/bin/env bash
# One copy of the training data per node (docs/dataset.md, dataset_map):
# the node's memory of a 4-rank training run on one node is the 1-rank
# run's plus what every extra rank needs anyway, not plus 3 copies of the
# data.  Measured (tests/lib.sh node_memory) as the peak over the run of
# the SUM over the ranks of their anonymous memory and their proportional
# share (Pss) of the mapped dataset file: pages shared by k ranks count 1/k
# in each, so the sum is what the node holds (RSS/VmHWM count shared pages
# in every rank; they are printed too).  The per-rank memory that does not
# come from the data (MPI, BLAS, the model) is measured on a tiny dataset
# with the same model and subtracted:
#     data(k) = node(k ranks, big) - node(k ranks, tiny)
#     pass:  data(4) - data(1) <= 3 x (24 bytes x pairs + 8 MiB)
# i.e. each extra rank may add its own batch plan (src/batcher.c: a 4-byte
# index per pair, and 16-byte sort keys per pair while it is built, which
# the 20 ms samples can catch) and 8 MiB (noise), but no data: a copy per
# rank would add about 3 x the file (the check fails if the data is read
# privately: planted in the commit).  With 600000 pairs (MEM_PAIRS; ~74 MB
# of 16-bit ids, an 83 MB file) the allowance is 66 MB, a copy 250 MB.
set -u
. "$(dirname "$0")/lib.sh"
GEN=$TOP/bin/tests/gen_corpus
[ -x "$GEN" ] || fail "$GEN: not built (make tests)"
[ -r /proc/self/smaps_rollup ] || skip "no /proc/self/smaps_rollup (Linux >= 4.14)"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$GEN" ids "$W/big.h5" "${MEM_PAIRS:-600000}" 1000 1 || fail "gen_corpus big"
"$GEN" ids "$W/tiny.h5" 2000 1000 2 || fail "gen_corpus tiny"
A=(train vocab_size=1000 max_len=256 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 n_layers=1 max_tokens=600
   train_steps=3 log_steps=1 eval_steps=0 threads=1)

measure() {
    node_memory "$1" "$3" "$2" "${A[@]}" data="$2" || fail "$1-rank run on $2: $(tail -3 "$3")"
    grep -q '^dev final' "$3" || fail "$1-rank run on $2 did not finish"
}
read -r b1 h1 _ < <(measure 1 "$W/big.h5" "$W/b1.log")
read -r b4 h4 _ < <(measure 4 "$W/big.h5" "$W/b4.log")
read -r t1 _ _ < <(measure 1 "$W/tiny.h5" "$W/t1.log")
read -r t4 _ _ < <(measure 4 "$W/tiny.h5" "$W/t4.log")
file_kb=$(( $(stat -c %s "$W/big.h5") / 1024 ))
d1=$((b1 - t1)) d4=$((b4 - t4))
echo "file ${file_kb} kB; node (anonymous + Pss of the file): 1 rank ${b1} kB (tiny data ${t1}), 4 ranks ${b4} kB (tiny data ${t4})"
echo "data per node: 1 rank ${d1} kB, 4 ranks ${d4} kB; peak VmHWM of a rank: ${h1} kB (1 rank), ${h4} kB (4 ranks)"
pairs=${MEM_PAIRS:-600000}
slack=$((3 * (24 * pairs / 1024 + 8192)))
[ "$d1" -gt $((file_kb / 2)) ] || fail "the 1-rank run holds only ${d1} kB for a ${file_kb} kB file: not measuring the data"
[ $((d4 - d1)) -le "$slack" ] ||
    fail "4 ranks hold $((d4 - d1)) kB more data than 1 rank (allowed ${slack} kB; a copy per rank: ~$((3 * file_kb)) kB)"
ok "4 ranks on one node hold $((d4 - d1)) kB more data than 1 rank (allowed ${slack} kB: 3 batch plans of $pairs pairs; a copy per rank would add ~$((3 * file_kb)) kB)"

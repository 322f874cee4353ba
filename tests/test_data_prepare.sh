#!/usr/bin/env bash
# `transformer prepare` on real Multi30k text:
#  - round trip: the dev split (Multi30k val) decoded with spm_decode from the
#    ids and the SentencePiece model stored IN the dataset equals the text,
#    up to SentencePiece's normalisation (NFKC + whitespace collapsing): we
#    compare with spm_normalize of the raw text, and report how many raw lines
#    the normalisation changes;
#  - provenance: sha256/bytes/lines attributes equal sha256sum/wc of the inputs;
#  - bad inputs: one-line errors naming the file (line count mismatch with the
#    line, empty, missing, invalid UTF-8 with the line, truncated dataset,
#    foreign HDF5 file, impossible vocabulary size) and no output file;
#  - the output appears only when complete (SIGKILL mid-run leaves nothing);
#  - the workers (and spm_train threads) follow the allocation: taskset, SLURM_CPUS_PER_TASK;
#  - input/prepare.sh passes SENTENCES on for every dataset and refuses a
#    value that is no number in one line, before fetching anything.
set -u
. "$(dirname "$0")/lib.sh"
need_multi30k   # sets M (tests/lib.sh): shared data, a download, or a skip
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# ---- a real dataset: train on val+test2016 (small, so that this test is fast)
"$BIN" prepare --out "$W/d.h5" --split train "$M/test2016.en" "$M/test2016.de" --split train "$M/test2017.en" "$M/test2017.de" \
    --split dev "$M/val.en" "$M/val.de" vocab_size=2000 max_len=40 >"$W/log" 2>&1 || { cat "$W/log"; fail "prepare failed"; }
cat "$W/log"
grep -q "dropped (longer than max_len=40)" "$W/log" || fail "no dropped-pairs report"
ls -a "$W" | grep -q -e '\.tmp' -e '\.work' && fail "temporary files left behind"
ok "prepare wrote $W/d.h5"

# ---- round trip of the dev split with the model bytes from the file
dump() { h5dump -d "$2" -b LE -o "$W/$3" "$1" >/dev/null || fail "h5dump $2"; }
dump "$W/d.h5" /vocab/spm_model spm.model
dump "$W/d.h5" /splits/dev/src_offsets off.bin
ids "$W/d.h5" /splits/dev/src_ids >"$W/ids.txt" || fail "h5dump /splits/dev/src_ids"
od -An -v -t d8 -w8 "$W/off.bin" | tr -d ' ' >"$W/off.txt"
# offsets -> one line of ids per sentence
awk 'NR==FNR { id[NR-1]=$1; next } FNR>1 { line=""; for (k=prev; k<$1; k++) line = line (k>prev?" ":"") id[k]; print line } { prev=$1 }' \
    "$W/ids.txt" "$W/off.txt" >"$W/dev.ids"
[ "$(wc -l <"$W/dev.ids")" -eq "$(wc -l <"$M/val.en")" ] || fail "dev split has $(wc -l <"$W/dev.ids") pairs, val.en $(wc -l <"$M/val.en")"
spm_decode --model="$W/spm.model" --input_format=id <"$W/dev.ids" >"$W/dev.dec"
spm_normalize --model="$W/spm.model" <"$M/val.en" >"$W/val.norm"
cmp -s "$W/dev.dec" "$W/val.norm" || { diff "$W/dev.dec" "$W/val.norm" | head; fail "round trip differs from the normalised text"; }
changed=$(paste -d'\n' "$M/val.en" "$W/val.norm" | paste - - | awk -F'\t' '$1 != $2' | wc -l)
ok "round trip: $(wc -l <"$W/dev.dec") dev sentences decode to the (normalised) text exactly; normalisation changes $changed raw lines"
grep -c '<unk>\| ⁇ ' "$W/dev.dec" | grep -qx 0 || fail "decoded dev text has unknown pieces"

# ---- provenance
for side in src tgt; do
    f=$M/val.en; [ $side = tgt ] && f=$M/val.de
    h5dump -a /splits/dev/${side}_sha256 "$W/d.h5" | grep -q "$(sha256sum "$f" | cut -d' ' -f1)" || fail "dev $side sha256"
    h5dump -a /splits/dev/${side}_bytes "$W/d.h5" | grep -q "(0): $(stat -c %s "$f")" || fail "dev $side bytes"
done
h5dump -a /splits/train/src_files "$W/d.h5" | grep -q "test2017.en" || fail "train provenance lacks test2017.en"
ok "provenance attributes match sha256sum and stat"

# ---- bad inputs
head -n 500 "$M/val.de" >"$W/short.de"
: >"$W/empty.en"
{ head -n 6 "$M/val.en"; printf 'bad \xff\xfe byte\n'; tail -n +8 "$M/val.en"; } >"$W/badutf8.en"
P=("$BIN" prepare --out "$W/bad.h5" vocab_size=500)
expect_error 2 "short.de: has 500 lines but .*val.en has 1014: it ends before line 501" \
    "${P[@]}" --split train "$M/val.en" "$W/short.de"
expect_error 2 "empty.en: empty file" "${P[@]}" --split train "$W/empty.en" "$M/val.de"
expect_error 2 "nothere.de: cannot open" "${P[@]}" --split train "$M/val.en" "$W/nothere.de"
expect_error 2 "badutf8.en: line 7: invalid UTF-8" "${P[@]}" --split train "$W/badutf8.en" "$M/val.de"
expect_error 2 "val.en (train split): vocab_size=100000 cannot be supported by this corpus: Vocabulary size too high" \
    "$BIN" prepare --out "$W/bad.h5" --split train "$M/val.en" "$M/val.de" vocab_size=100000
expect_error 2 "val.en (train split): vocab_size=30 cannot be supported by this corpus: Vocabulary size is smaller than required_chars" \
    "$BIN" prepare --out "$W/bad.h5" --split train "$M/val.en" "$M/val.de" vocab_size=30
[ -e "$W/bad.h5" ] && fail "an output file was written for bad input"
ls -a "$W" | grep -q -e '\.tmp' -e '\.work' && fail "temporary files left behind after errors"
n_err=$("${P[@]}" --split train "$M/val.en" "$W/short.de" 2>&1 >/dev/null | wc -l)
[ "$n_err" -eq 1 ] || fail "expected exactly one error line, got $n_err"

# ---- bad dataset files, read by train
T=("$BIN" train vocab_size=2000 max_len=40 train_steps=1 d_model=16 d_ff=16 n_heads=2 d_k=8 d_v=8 n_layers=1)
head -c $(( $(stat -c %s "$W/d.h5") / 2 )) "$W/d.h5" >"$W/trunc.h5"
expect_error 2 "trunc.h5: truncated or corrupt HDF5 file" "${T[@]}" data="$W/trunc.h5"
h5copy -i "$W/d.h5" -o "$W/foreign.h5" -s /vocab -d /vocab || fail "h5copy"
expect_error 2 "foreign.h5: HDF5 file is not a transformer dataset" "${T[@]}" data="$W/foreign.h5"
cp "$M/val.en" "$W/text.h5"
expect_error 2 "text.h5: not an HDF5 file" "${T[@]}" data="$W/text.h5"
expect_error 2 "d.h5: dataset vocabulary has 2000 pieces but vocab_size = 3000" "${T[@]}" data="$W/d.h5" vocab_size=3000
n_err=$("${T[@]}" data="$W/trunc.h5" 2>&1 >/dev/null | wc -l)
[ "$n_err" -eq 1 ] || fail "expected exactly one error line for a truncated dataset, got $n_err"

# ---- all or nothing: kill prepare while it runs; the output never appears
# (in its own process group, so that its spm_train child goes too)
setsid "$BIN" prepare --out "$W/killed.h5" --split train "$M/train.en" "$M/train.de" vocab_size=4000 >/dev/null 2>&1 &
pid=$!
# killed while its spm_train child runs (seen in its process group), not
# after a fixed sleep: a fast machine could finish first, a loaded one not
# have started
seen=0
for i in $(seq 1 6000); do
    [ -e "$W/killed.h5" ] && fail "output exists while prepare is still running"
    ls "$W" | grep -q 'killed.h5.work' && pgrep -g $pid -x spm_train >/dev/null && { seen=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
done
[ $seen = 1 ] || { kill -9 -- -$pid 2>/dev/null; fail "prepare's spm_train was never seen running: nothing was tested"; }
kill -9 -- -$pid 2>/dev/null; wait $pid 2>/dev/null; rc=$?
[ $rc -eq 137 ] || fail "prepare was not killed mid-run (exit $rc): nothing was tested"
[ -e "$W/killed.h5" ] && fail "a killed prepare left its output file"
ok "killed prepare left no output file"
# ---- the allocation's CPUs: the affinity mask, else SLURM_CPUS_PER_TASK first
# (taskset -c 0: one CPU allowed, whatever the node has), for its own workers
# and for spm_train's --num_threads (recorded in spm_options)
head -n 300 "$M/val.en" > "$W/a.en"; head -n 300 "$M/val.de" > "$W/a.de"
spm_opts() { h5dump -a /spm_options "$1" | grep -o -- '--num_threads=[0-9]*'; }
taskset -c 0 env -u SLURM_CPUS_PER_TASK "$BIN" prepare --out "$W/one.h5" --split train "$W/a.en" "$W/a.de" vocab_size=500 \
    > "$W/one.log" 2>&1 || { cat "$W/one.log"; fail "prepare under taskset -c 0 failed"; }
grep -qx 'prepare: 1 worker (the CPUs this process may run on; --jobs N to change)' "$W/one.log" ||
    fail "prepare under taskset -c 0 did not take 1 worker: $(head -3 "$W/one.log")"
[ "$(spm_opts "$W/one.h5")" = --num_threads=1 ] || fail "spm_train under taskset -c 0: $(spm_opts "$W/one.h5")"
taskset -c 0 env SLURM_CPUS_PER_TASK=2 "$BIN" prepare --out "$W/two.h5" --split train "$W/a.en" "$W/a.de" vocab_size=500 \
    > "$W/two.log" 2>&1 || { cat "$W/two.log"; fail "prepare with SLURM_CPUS_PER_TASK=2 failed"; }
grep -qx 'prepare: 2 workers (SLURM_CPUS_PER_TASK; --jobs N to change)' "$W/two.log" && [ "$(spm_opts "$W/two.h5")" = --num_threads=2 ] ||
    fail "SLURM_CPUS_PER_TASK=2 not taken: $(head -3 "$W/two.log"), $(spm_opts "$W/two.h5")"
ok "prepare: 1 worker and spm_train --num_threads=1 under taskset -c 0; 2 with SLURM_CPUS_PER_TASK=2"
# ---- input/prepare.sh's SENTENCES (spm_train's sample) is passed on for
# every dataset, multi30k included (was: only wmt14, wmt14-enfr), and a
# value that is no number of lines is refused in one line before anything
# is fetched (a stub binary records prepare's command line)
printf '#!/bin/sh\necho "$@" > "%s/args"\n' "$W" > "$W/stub"; chmod +x "$W/stub"
SENTENCES=1234 TRANSFORMER=$W/stub "$TOP/input/prepare.sh" multi30k "$(dirname "$M")" "$W/s.h5" ||
    fail "input/prepare.sh multi30k with SENTENCES=1234 failed"
grep -q -- '--sentences 1234 ' "$W/args" || fail "multi30k: SENTENCES=1234 not passed on: $(cat "$W/args")"
TRANSFORMER=$W/stub "$TOP/input/prepare.sh" multi30k "$(dirname "$M")" "$W/s.h5" || fail "input/prepare.sh multi30k failed"
grep -q -- '--sentences' "$W/args" && fail "multi30k without SENTENCES: $(cat "$W/args")"
rm -f "$W/args"
for bad in x -5 1e6; do
    expect_error 2 "^error: SENTENCES='$bad': not a number of lines" env SENTENCES="$bad" TRANSFORMER="$W/stub" \
        "$TOP/input/prepare.sh" multi30k "$(dirname "$M")" "$W/s.h5"
    [ "$(SENTENCES=$bad TRANSFORMER=$W/stub "$TOP/input/prepare.sh" wmt14 "$W/noroot" "$W/s.h5" 2>&1 | grep -c .)" -eq 1 ] ||
        fail "SENTENCES=$bad wmt14: not one line (fetched first?)"
done
[ ! -e "$W/args" ] && [ ! -e "$W/noroot" ] || fail "a refused SENTENCES ran prepare or fetched"
ok "input/prepare.sh: SENTENCES passed on for multi30k; x, -5, 1e6 refused in one line before any fetch"
echo "test_data_prepare: all checks passed"

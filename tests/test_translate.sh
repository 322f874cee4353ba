#!/usr/bin/env bash
# `transformer translate` end to end on real files: a small dataset prepared
# from Multi30k lines, a checkpoint of a briefly trained model.  Checks: split
# and raw-text input give one detokenised line per input line in order; an
# empty line gives an empty line; an over-long line is truncated with one
# warning; a pipe as --input (read once) gives the file's output; 2 MPI
# ranks give the same output as 1; text that is not UTF-8 is a one-line
# error naming its line; a dataset with another vocabulary is a
# one-line error (size differs; same size, other pieces); missing options
# are one-line errors.
set -u
. "$(dirname "$0")/lib.sh"
cd "$TOP"
need_multi30k   # sets M (tests/lib.sh): shared data, a download, or a skip
W=$(mktemp -d /tmp/test_translate.XXXXXX)
trap 'rm -rf "$W"' EXIT
# English side: real Multi30k sentences; German side: one fixed sentence, which a
# tiny model learns in a few dozen steps, so that every non-empty input must
# come out as exactly that sentence (checks decoding, detokenisation, order)
FIXED="Ein Hund läuft über die Wiese."
head -n 400 "$M/train.en" >"$W/tr.en"; for i in $(seq 400); do echo "$FIXED"; done >"$W/tr.de"
head -n 20 "$M/val.en" >"$W/dev.en"; head -n 20 "$W/tr.de" >"$W/dev.de"
head -n 12 "$M/test2016.en" >"$W/te.en"; head -n 12 "$W/tr.de" >"$W/te.de"
"$BIN" prepare --out "$W/a.h5" --split train "$W/tr.en" "$W/tr.de" --split dev "$W/dev.en" "$W/dev.de" \
    --split test "$W/te.en" "$W/te.de" vocab_size=300 max_len=24 --jobs 1 --byte-fallback 0 >"$W/prep.log" 2>&1 \
    || fail "prepare: $(tail -2 "$W/prep.log")"
"$BIN" train data="$W/a.h5" vocab_size=300 max_len=24 n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 \
    max_tokens=512 train_steps=200 warmup=50 lr_factor=1 dropout=0 threads=1 run_dir="$W/run" >"$W/train.log" 2>&1 \
    || fail "train: $(tail -2 "$W/train.log")"
CK=$(ls "$W"/run/ckpt_*.h5 | tail -1)

# a split: one line per test pair
"$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --split test --output "$W/out.txt" beam=4 max_len_a=5 threads=1 \
    >"$W/tr1.log" 2>&1 || fail "translate --split: $(cat "$W/tr1.log")"
[ "$(wc -l <"$W/out.txt")" -eq 12 ] || fail "split: $(wc -l <"$W/out.txt") output lines, expected 12"
[ "$(grep -cxF "$FIXED" "$W/out.txt")" -eq 12 ] || fail "split: outputs are not the learned sentence: $(head -3 "$W/out.txt")"
grep -q "sentences/s" "$W/tr1.log" || fail "no throughput line"
ok "translate --split test: 12 lines ($(grep -o '[0-9.]* sentences/s' "$W/tr1.log"))"

# raw text: empty line, normal lines, an over-long line (> 24 positions)
{ echo "A man rides a bike."; echo ""; printf 'a dog %.0s' $(seq 40); echo; echo "Two children play."; } >"$W/raw.en"
"$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --input "$W/raw.en" --output "$W/raw.de" max_len_a=5 threads=1 \
    >"$W/tr2.log" 2>"$W/tr2.err" || fail "translate --input: $(cat "$W/tr2.err")"
[ "$(wc -l <"$W/raw.de")" -eq 4 ] || fail "raw: $(wc -l <"$W/raw.de") lines for 4 inputs"
[ -z "$(sed -n 2p "$W/raw.de")" ] || fail "empty input line gave '$(sed -n 2p "$W/raw.de")'"
for l in 1 3 4; do [ "$(sed -n ${l}p "$W/raw.de")" = "$FIXED" ] || fail "raw line $l: '$(sed -n ${l}p "$W/raw.de")'"; done
[ "$(grep -c '^warning: .*truncated' "$W/tr2.err")" -eq 1 ] || fail "expected one truncation warning: $(cat "$W/tr2.err")"
grep -q "first: line 3" "$W/tr2.err" || fail "warning does not name line 3: $(cat "$W/tr2.err")"
ok "raw input: empty line -> empty line, long line truncated: $(cat "$W/tr2.err")"
# a pipe is read once: --input /dev/stdin and <(...) give the file's lines
cat "$W/raw.en" | "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --input /dev/stdin --output "$W/pipe.de" \
    max_len_a=5 threads=1 >/dev/null 2>"$W/pipe.err" || fail "translate --input /dev/stdin: $(cat "$W/pipe.err")"
cmp -s "$W/raw.de" "$W/pipe.de" || fail "--input /dev/stdin: $(wc -l <"$W/pipe.de") lines unlike the file's"
"$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --input <(cat "$W/raw.en") --output "$W/pipe.de" \
    max_len_a=5 threads=1 >/dev/null 2>"$W/pipe.err" || fail "translate --input <(...): $(cat "$W/pipe.err")"
cmp -s "$W/raw.de" "$W/pipe.de" || fail "--input <(...): $(wc -l <"$W/pipe.de") lines unlike the file's"
ok "raw input from a pipe (/dev/stdin, <(...)): the file's translations"

# 2 ranks: same output, in order
mpirun -np 2 "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --split test --output "$W/out2.txt" beam=4 \
    max_len_a=5 threads=1 >"$W/tr3.log" 2>&1 || fail "mpirun translate: $(tail -3 "$W/tr3.log")"
cmp -s "$W/out.txt" "$W/out2.txt" || fail "2 ranks differ from 1 rank"
ok "2 ranks == 1 rank"

# vocabulary mismatches
"$BIN" prepare --out "$W/b.h5" --split train "$W/tr.en" "$W/tr.de" --split test "$W/te.en" "$W/te.de" \
    vocab_size=250 max_len=24 --jobs 1 --byte-fallback 0 >"$W/prep2.log" 2>&1 || fail "prepare b"
expect_error 2 "error: .*b.h5: dataset vocabulary has 250 pieces but the model in .* has vocab_size" \
    "$BIN" translate --checkpoint "$CK" --data "$W/b.h5" --split test --output "$W/x.txt"
tail -n 200 "$M/train.en" >"$W/tr2.en"; tail -n 200 "$M/train.de" >"$W/tr2.de"
"$BIN" prepare --out "$W/c.h5" --split train "$W/tr2.en" "$W/tr2.de" --split test "$W/te.en" "$W/te.de" \
    vocab_size=300 max_len=24 --jobs 1 --byte-fallback 0 >"$W/prep3.log" 2>&1 || fail "prepare c"
expect_error 2 "error: .*c.h5: its vocabulary is not the one .* was trained with" \
    "$BIN" translate --checkpoint "$CK" --data "$W/c.h5" --split test --output "$W/x.txt"
[ ! -e "$W/x.txt" ] || fail "an output file was written despite the error"
expect_error 2 "error: translate: --checkpoint CKPT is required" "$BIN" translate --data "$W/a.h5" --split test --output "$W/x.txt"
expect_error 2 "error: translate: give exactly one of --split" \
    "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --output "$W/x.txt"
expect_error 2 "error: .*: unknown split\|error: .*nosuch" \
    "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --split nosuch --output "$W/x.txt"
expect_error 2 "key 'd_model' is an architecture key; it comes from .*ckpt_" \
    "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --split test --output "$W/x.txt" d_model=64
# --input text that is not UTF-8 (Latin-1 "ü", a NUL byte): one line naming
# the file and line, no output (spm_encode made U+FFFD of it, translated)
printf 'a dog runs\nover the gr\374n meadow\n' >"$W/latin1.txt"
expect_error 2 "^error: $W/latin1.txt: line 2: invalid UTF-8 at byte 12 of the line" \
    "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --input "$W/latin1.txt" --output "$W/l1.txt"
printf 'a dog\000 runs\n' >"$W/nul.txt"
expect_error 2 "^error: $W/nul.txt: line 1: NUL byte at byte 6 of the line" \
    "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --input "$W/nul.txt" --output "$W/l1.txt"
[ ! -e "$W/l1.txt" ] || fail "a refused --input left an output"
# --input of token ids (synthetic task): anything else on a line is an error
"$BIN" train threads=1 train_steps=2 run_dir="$W/syn" >/dev/null 2>&1 || fail "synthetic train"
printf '5 6 7\n5 x 7\n' >"$W/ids.txt"
expect_error 2 "error: $W/ids.txt:2: expected token ids in \[0, " \
    "$BIN" translate --checkpoint "$W/syn/ckpt_00000002.h5" --data synthetic --input "$W/ids.txt" --output "$W/x.txt"
printf '5 6 7\n\n8 9\n' | "$BIN" translate --checkpoint "$W/syn/ckpt_00000002.h5" --data synthetic --input /dev/stdin \
    --output "$W/ids.out" >/dev/null 2>"$W/ids.err" || fail "synthetic --input /dev/stdin: $(cat "$W/ids.err")"
[ "$(wc -l <"$W/ids.out")" -eq 3 ] && [ -z "$(sed -n 2p "$W/ids.out")" ] || fail "synthetic ids from a pipe: $(cat "$W/ids.out")"
printf '5 6 99999999999999999999\n' >"$W/ids.txt"
expect_error 2 "error: $W/ids.txt:1: expected token ids" \
    "$BIN" translate --checkpoint "$W/syn/ckpt_00000002.h5" --data synthetic --input "$W/ids.txt" --output "$W/x.txt"
expect_error 2 "error: $W: cannot read: Is a directory" \
    "$BIN" translate --checkpoint "$W/syn/ckpt_00000002.h5" --data synthetic --input "$W" --output "$W/x.txt"
# under mpirun an argument or file error is rank 0's one line, not one per rank
for bad in "--bogus" "--checkpoint $W/nockpt.h5 --data synthetic --split dev --output $W/x.txt" \
           "--checkpoint $CK --data $W/a.h5 --split nosuch --output $W/x.txt" \
           "--checkpoint $W/syn/ckpt_00000002.h5 --data synthetic --split dev --output $W/x.txt d_model=8"; do
    err=$(mpirun -np 2 "$BIN" translate $bad threads=1 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(echo "$err" | grep -c '^error:')" -eq 1 ] || fail "mpirun -np 2 translate $bad: exit $rc, stderr: $err"
done
ok "mpirun -np 2: argument, checkpoint, key and split errors are one line each"
# translate's temporary files go to TMPDIR, and are removed also when rank 0
# dies under mpirun (MPI_Abort skips atexit; they stayed in /tmp)
mkdir -p "$W/tmpd"
TMPDIR=$W/tmpd mpirun -x TMPDIR -np 2 "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --input "$W/nofile" \
    --output "$W/x.txt" threads=1 >/dev/null 2>&1 && fail "translate of a missing --input succeeded"
TMPDIR=$W/tmpd "$BIN" translate --checkpoint "$CK" --data "$W/a.h5" --input "$W/dev.en" --output "$W/td.txt" \
    >/dev/null 2>&1 || fail "translate with TMPDIR set failed"
left=$(ls "$W/tmpd" | grep '^transformer-translate-')   # (Open MPI keeps its own session there)
[ -z "$left" ] || fail "translate left temporary files: $left"
ok "temporary files in TMPDIR, removed after a success and after rank 0's error under mpirun"
echo "all translate checks passed"

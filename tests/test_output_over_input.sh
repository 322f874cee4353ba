#!/usr/bin/env bash
# No command writes its output over one of its inputs (src/cli.c
# cli_check_output): `translate --input in.txt --output in.txt` replaced
# the user's text with translations and `prepare --out train.en` the corpus
# with a dataset.  For every command that writes a file, its output option
# given the path of each of its inputs, also spelt another way (./NAME, a
# hard link, a symbolic link): exit 2, one line naming the output, the option
# and the input, and every input byte for byte as before.  An output that is
# a new file still works (the command's own tests cover it; here one run of
# translate and prepare each).  train --dump-params, and average,
# translate, attention and heads, also refuse a file of a run directory they
# read (a checkpoint a run resumes from, its metrics), existing or not.
# An output that is a directory, or in a missing directory, is refused
# before the command's work, not at its final rename, and so is an existing
# output that is not a regular file (a FIFO, a device node) or is a
# symbolic link.  translate's --output and --reference are two files.
set -u
. "$(dirname "$0")/lib.sh"
cd "$TOP"
W=$(mktemp -d /tmp/test_output_over_input.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
text_corpus 300 7 tr.en tr.de
text_corpus 40 8 dev.en dev.de
head -n 5 dev.en > in.txt
"$BIN" prepare --out data.h5 --split train tr.en tr.de --split dev dev.en dev.de vocab_size=400 --jobs 1 \
    > prep.log 2>&1 || fail "prepare: $(tail -n 2 prep.log)"
"$BIN" train data=data.h5 vocab_size=400 n_layers=1 d_model=16 d_ff=32 n_heads=2 d_k=8 d_v=8 train_steps=2 \
    threads=1 run_dir=run > train.log 2>&1 || fail "train: $(tail -n 2 train.log)"
CK=run/ckpt_00000002.h5
[ -f "$CK" ] || fail "no checkpoint: $(ls run)"
cp "$CK" ck2.h5
ln in.txt in.hard
ln -s "$W/data.h5" data.link
sums() { sha256sum tr.en tr.de dev.en dev.de in.txt data.h5 "$CK" ck2.h5; }
before=$(sums)

# refused OUT INPUT CMD...: exit 2, the one line, nothing changed
refused() {
    local out=$1 input=$2; shift 2
    expect_error 2 "^error: $out: --[a-z-]* is also an input of [a-z]* ($input): choose another name$" "$@"
    [ "$(sums)" = "$before" ] || fail "'$*' changed an input"
}
refused tr.en tr.en "$BIN" prepare --out tr.en --split train tr.en tr.de vocab_size=400
refused ./dev.de dev.de "$BIN" prepare --out ./dev.de --split train tr.en tr.de --split dev dev.en dev.de vocab_size=400
refused in.txt in.txt "$BIN" translate --checkpoint "$CK" --data data.h5 --input in.txt --output in.txt
refused in.hard in.txt "$BIN" translate --checkpoint "$CK" --data data.h5 --input in.txt --output in.hard
refused data.link data.h5 "$BIN" translate --checkpoint "$CK" --data data.h5 --split dev --output data.link
refused "$CK" "$CK" "$BIN" translate --checkpoint "$CK" --data data.h5 --split dev --output out.txt --reference "$CK"
refused "$CK" "$CK" "$BIN" attention --checkpoint "$CK" --data data.h5 --split dev --sentences 0-1 --output "$CK"
refused data.h5 data.h5 "$BIN" heads --checkpoint "$CK" --data data.h5 --split dev --output data.h5
refused ck2.h5 ck2.h5 "$BIN" average --output ck2.h5 "$CK" ck2.h5
# translate's two outputs are two files, new or existing, however spelt:
# --reference over --output replaced the translations with the references
# (a BLEU of 100)
for pair in "tr.txt ./tr.txt" "$W/tr.txt tr.txt"; do
    set -- $pair
    expect_error 2 "^error: $2: --reference is also the --output of translate ($1): choose another name$" \
        "$BIN" translate --checkpoint "$CK" --data data.h5 --split dev --output "$1" --reference "$2"
done
[ ! -e tr.txt ] || fail "translate wrote tr.txt despite the error"
echo kept > tr.txt && ln -s tr.txt tr.link
expect_error 2 "^error: tr.link: --reference is also the --output of translate (tr.txt): choose another name$" \
    "$BIN" translate --checkpoint "$CK" --data data.h5 --split dev --output tr.txt --reference tr.link
[ "$(cat tr.txt)" = kept ] || fail "translate changed tr.txt despite the error"
ok "translate --output and --reference one file: refused in one line, nothing written"
# train --dump-params: its raw floats replaced the dataset or the config
TA=(vocab_size=400 n_layers=1 d_model=16 d_ff=32 n_heads=2 d_k=8 d_v=8 train_steps=2 threads=1)
printf 'data = data.h5\n' > tiny.cfg
sums() { sha256sum tr.en tr.de dev.en dev.de in.txt data.h5 "$CK" ck2.h5 tiny.cfg; }
before=$(sums)
refused data.link data.h5 "$BIN" train data=data.h5 "${TA[@]}" --dump-params data.link
refused ./tiny.cfg tiny.cfg "$BIN" train --config tiny.cfg "${TA[@]}" --dump-params ./tiny.cfg
expect_error 2 "^error: $CK: --dump-params is a file of the run directory run: choose another name$" \
    "$BIN" train data=data.h5 "${TA[@]}" run_dir=run --dump-params "$CK"
expect_error 2 "^error: run/ckpt_00000009.h5: --dump-params is a file of the run directory run: choose another name$" \
    "$BIN" train data=data.h5 "${TA[@]}" run_dir=run --dump-params run/ckpt_00000009.h5
[ ! -e run/ckpt_00000009.h5 ] || fail "train --dump-params wrote a checkpoint name"
# nor any other existing file there (the Slurm log submit-train.sh writes
# into the run directory), as before 36f23dd
echo "job log" > run/slurm-123.out
expect_error 2 "^error: run/slurm-123.out: --dump-params is a file of the run directory run: choose another name$" \
    "$BIN" train data=data.h5 "${TA[@]}" run_dir=run --dump-params run/slurm-123.out
grep -qx "job log" run/slurm-123.out || fail "train --dump-params replaced the run directory's slurm-123.out"
rm run/slurm-123.out
[ "$(sums)" = "$before" ] || fail "train --dump-params over a checkpoint changed an input"
# average --output over a file of a run directory it reads (--last's, or
# its checkpoints' own), existing or a name training would take for its
# own: it replaced a checkpoint the run resumes from (an average has no
# Adam moments) or the run's metrics log, exit 0.  Other files there are
# the user's: the jobs write RUN/avg5.h5, again on a rerun.
cp -r run runA && cp runA/ckpt_00000002.h5 runA/ckpt_00000001.h5
runsum() { sha256sum runA/*; }
run_before=$(runsum)
for o in runA/ckpt_00000001.h5 runA/metrics.h5 runA/ckpt_00000003.h5 runA/best.h5 runA/metrics.h5.bad runA/ckpt_00000002.h5.bad.1; do
    expect_error 2 "^error: $o: --output is a file of the run directory runA: choose another name$" \
        "$BIN" average --output $o --last 1 runA
done
expect_error 2 "^error: runA/metrics.h5: --output is a file of the run directory runA: choose another name$" \
    "$BIN" average --output runA/metrics.h5 runA/ckpt_00000002.h5
# the commands that read a checkpoint write no file of its run directory
# either: `attention --output RUN/metrics.h5` replaced the training log,
# which the next resume then moved aside as foreign
for o in runA/metrics.h5 runA/best.h5 runA/ckpt_00000009.h5; do
    expect_error 2 "^error: $o: --output is a file of the run directory runA: choose another name$" \
        "$BIN" attention --checkpoint runA/ckpt_00000002.h5 --data data.h5 --split dev --sentences 0-1 --output $o
    expect_error 2 "^error: $o: --output is a file of the run directory runA: choose another name$" \
        "$BIN" heads --checkpoint runA/ckpt_00000002.h5 --data data.h5 --split dev --output $o
    expect_error 2 "^error: $o: --output is a file of the run directory runA: choose another name$" \
        "$BIN" translate --checkpoint runA/ckpt_00000002.h5 --data data.h5 --input in.txt --output $o
    expect_error 2 "^error: $o: --reference is a file of the run directory runA: choose another name$" \
        "$BIN" translate --checkpoint runA/ckpt_00000002.h5 --data data.h5 --split dev --output out.txt --reference $o
done
[ "$(runsum)" = "$run_before" ] || fail "a refused average, attention, heads or translate changed the run directory: $(ls runA)"
for k in 1 2; do
    "$BIN" average --output runA/avg.h5 --last 1 runA > avg.log 2>&1 || fail "average into the run directory ($k): $(cat avg.log)"
done
# names that only look like a moved-aside file are the user's
for o in runA/metrics.h5.bad. runA/metrics.h5.bad.1x runA/best.h5.badge; do
    "$BIN" average --output $o --last 1 runA > avg.log 2>&1 || fail "average --output $o refused: $(cat avg.log)"
    rm -f $o
done
ok "average --output over a checkpoint, metrics.h5, best.h5, a new ckpt_*.h5 or a .bad(.N) of the run directory it reads refused; RUN/avg.h5 written and rewritten"
ok "prepare, translate (--output, --reference), attention, heads, average, train --dump-params: an output over an input refused, inputs unchanged"

# an output that is a directory, or in a directory that does not exist:
# refused before any work (they failed only at the rename, after it)
mkdir outdir
misplaced() {
    local out=$1; shift
    local why=" is a directory: give a file name"
    [ -d "$out" ] || why=": no such directory ${out%/*}"
    one_line_error 2 "^error: $out: --[a-z-]* of [a-z]*$why$" "$@"
}
# every_output CHECK O: CHECK O COMMAND... for each output option of every
# command, with O as that output
every_output() {
    local check=$1 o=$2
    $check $o "$BIN" translate --checkpoint "$CK" --data data.h5 --input in.txt --output $o
    $check $o "$BIN" translate --checkpoint "$CK" --data data.h5 --split dev --output out.txt --reference $o
    $check $o "$BIN" attention --checkpoint "$CK" --data data.h5 --split dev --sentences 0-1 --output $o
    $check $o "$BIN" heads --checkpoint "$CK" --data data.h5 --split dev --output $o
    $check $o "$BIN" average --output $o "$CK" ck2.h5
    $check $o "$BIN" prepare --out $o --split train tr.en tr.de vocab_size=400
    $check $o "$BIN" train data=data.h5 "${TA[@]}" --dump-params $o
}
for o in outdir nodir/out.x; do every_output misplaced $o; done
[ "$(sums)" = "$before" ] || fail "a misplaced output changed an input"
[ ! -e nodir ] && [ -z "$(ls outdir)" ] || fail "a misplaced output left files: $(ls -d nodir outdir/* 2>/dev/null)"
ok "every output option: a directory, or a file in a missing directory, refused in one line before any work"

# an existing output that is not a regular file (a FIFO; as root also a
# device node such as /dev/null) or is a symbolic link (to a file, or
# dangling): refused in one line before any work.  The temporary + rename
# replaced it with a regular file (as root a system device node), and a
# link with a file while its target stayed as it was.
mkfifo fifo
echo kept > target.txt && ln -s target.txt out.link && ln -s nowhere dangling.link
odd=(fifo out.link dangling.link)
[ "$(id -u)" -eq 0 ] && mknod null c 1 3 && odd+=(null)
listing=$(ls -A)
notreg() {
    local out=$1 why; shift
    case $out in
        fifo) why="is not a regular file (a FIFO): give a file name" ;;
        null) why="is not a regular file (a character device): give a file name" ;;
        out.link) why="is a symbolic link (to target.txt): give the file it names, or another name" ;;
        dangling.link) why="is a symbolic link (to nowhere): give the file it names, or another name" ;;
    esac
    one_line_error 2 "^error: $out: --[a-z-]* of [a-z]* $why$" "$@"
}
for o in "${odd[@]}"; do every_output notreg $o; done
[ -p fifo ] && [ -L out.link ] && [ -L dangling.link ] && [ "$(cat target.txt)" = kept ] ||
    fail "a refused output was replaced: $(ls -l fifo out.link dangling.link target.txt)"
[ ! -e null ] || [ -c null ] || fail "the device node null was replaced: $(ls -l null)"
[ "$(ls -A)" = "$listing" ] || fail "a refused output left files: $(diff <(echo "$listing") <(ls -A))"
[ "$(sums)" = "$before" ] || fail "a refused output changed an input"
ok "every output option: a FIFO$([ -c null ] && echo ', a device node'), a symbolic link refused in one line before any work, each left as it was"

# a new output is written as before
"$BIN" translate --checkpoint "$CK" --data data.h5 --input in.txt --output out.txt > tr.log 2>&1 ||
    fail "translate to a new file: $(tail -n 2 tr.log)"
[ "$(wc -l < out.txt)" -eq 5 ] || fail "translate to a new file: $(wc -l < out.txt) lines for 5"
"$BIN" prepare --out data2.h5 --split train tr.en tr.de vocab_size=400 --jobs 1 > prep2.log 2>&1 ||
    fail "prepare to a new file: $(tail -n 2 prep2.log)"
ok "translate and prepare to new files: written"

#!/usr/bin/env bash
# Bad configuration input: each case is exactly one line on stderr,
# "error: <file>:<line>: ... key ..." (or the file alone when there is no
# line), and exit code 2, with no output written.  A missing dataset file
# names the command that makes it.  A max_len below the dataset's is one
# warning line with the pairs it leaves out.  Also: `--help` of every
# command exits 0.
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cfg() { printf '%b' "$2" > "$tmp/$1"; echo "$tmp/$1"; }

for cmd in params train; do
    one_line_error 2 "^error: $tmp/missing.cfg: cannot open config file" "$BIN" $cmd --config "$tmp/missing.cfg"
    f=$(cfg malformed.cfg '# comment\nn_layers = 2\nthis line has no equals sign\n')
    one_line_error 2 "^error: $f:3: malformed line" "$BIN" $cmd --config "$f"
    f=$(cfg unknown.cfg 'n_layers = 2\n\nd_modle = 512\n')
    one_line_error 2 "^error: $f:3: unknown key 'd_modle' (did you mean 'd_model'?)$" "$BIN" $cmd --config "$f"
    # a suggestion only when a key is near: none for a key far from all
    f=$(cfg far.cfg 'zzzzzz = 1\n')
    one_line_error 2 "^error: $f:1: unknown key 'zzzzzz'$" "$BIN" $cmd --config "$f"
    f=$(cfg negative.cfg 'd_model = 512\nd_ff = -2048   # negative size\n')
    one_line_error 2 "^error: $f:2: key 'd_ff': -2048 is out of range" "$BIN" $cmd --config "$f"
    f=$(cfg nonnum.cfg 'n_heads = eight\n')
    one_line_error 2 "^error: $f:1: key 'n_heads': 'eight' is not a number" "$BIN" $cmd --config "$f"
    f=$(cfg nonint.cfg 'n_layers = 2.5\n')
    one_line_error 2 "^error: $f:1: key 'n_layers': '2.5' is not an integer" "$BIN" $cmd --config "$f"
    f=$(cfg empty.cfg 'd_k =\n')
    one_line_error 2 "^error: $f:1: key 'd_k': empty value" "$BIN" $cmd --config "$f"
    f=$(cfg seed.cfg 'seed = -1\n')
    one_line_error 2 "^error: $f:1: key 'seed': '-1' is negative" "$BIN" $cmd --config "$f"
    # inconsistent settings: the line of the offending key
    f=$(cfg odd.cfg 'n_layers = 2\nd_model = 511\n')
    one_line_error 2 "^error: $f:2: key 'd_model': 511 must be even" "$BIN" $cmd --config "$f"
    f=$(cfg budget.cfg 'max_len = 128\nmax_tokens = 100\n')
    one_line_error 2 "^error: $f:2: key 'max_tokens': 100 is smaller than max_len 128" "$BIN" $cmd --config "$f"
    f=$(cfg autotok.cfg 'device = cpu\nmax_tokens = 0\n')
    one_line_error 2 "^error: $f:2: key 'max_tokens': 0 (from free device memory) needs device=cuda" "$BIN" $cmd --config "$f"
    f=$(cfg pos.cfg 'positional = rotary\n')
    one_line_error 2 "^error: $f:1: key 'positional': 'rotary' is not" "$BIN" $cmd --config "$f"
    f=$(cfg allreduce.cfg 'allreduce = gloo\n')
    one_line_error 2 "^error: $f:1: key 'allreduce': 'gloo' is not 'auto', 'nccl' or 'mpi'" "$BIN" $cmd --config "$f"
    f=$(cfg fp16.cfg 'device = cpu\nprecision = fp16\n')
    one_line_error 2 "^error: $f:2: key 'precision': fp16 needs device=cuda" "$BIN" $cmd --config "$f"
    # tf32 too: the CPU backend computes fp32 only (README), so a tf32 run
    # on it would silently be an fp32 run
    one_line_error 2 "^error: command line: key 'precision': tf32 needs device=cuda (the CPU backend is fp32)$" \
        "$BIN" $cmd precision=tf32 device=cpu
    one_line_error 2 "^error: command line: key 'cuda_graphs': 2 is out of range" "$BIN" $cmd cuda_graphs=2
    one_line_error 2 "^error: command line: key 'cuda_graph_cache': 0 is out of range" "$BIN" $cmd cuda_graph_cache=0
    # a rate factor of 0 trained every step at rate 0, exit 0
    one_line_error 2 "^error: command line: key 'lr_factor': 0 scales eq. 3's rate to 0 (every step): give lr_factor > 0, or lr_peak$" \
        "$BIN" $cmd lr_factor=0
    # with lr_peak set, lr_factor is not used: 0 is harmless (and a
    # checkpoint that stores it stays readable)
    [ $cmd = train ] || "$BIN" $cmd lr_factor=0 lr_peak=1e-3 > /dev/null 2>&1 || fail "$cmd lr_factor=0 lr_peak=1e-3 refused"
    f=$(cfg dev.cfg 'device = gpu\n')
    one_line_error 2 "^error: $f:1: key 'device': 'gpu' is not 'cpu' or 'cuda'$" "$BIN" $cmd --config "$f"
    f=$(cfg ls.cfg 'loss_scale = static\n')
    one_line_error 2 "^error: $f:1: key 'loss_scale': 'static' is not 'auto', 'dynamic' or 'off'" "$BIN" $cmd --config "$f"
    f=$(cfg lsmin.cfg 'loss_scale_init = 8\nloss_scale_min = 16\n')
    one_line_error 2 "^error: $f:2: key 'loss_scale_min': 16 is above loss_scale_init 8" "$BIN" $cmd --config "$f"
    # early stopping and the schedule's decay (docs/training.md)
    f=$(cfg patience.cfg 'eval_steps = 100\npatience = -1\n')
    one_line_error 2 "^error: $f:2: key 'patience': -1 is out of range" "$BIN" $cmd --config "$f"
    f=$(cfg patience0.cfg 'eval_steps = 0\npatience = 10\n')
    one_line_error 2 "^error: $f:2: key 'patience': 10 counts dev evaluations: it needs eval_steps > 0$" "$BIN" $cmd --config "$f"
    f=$(cfg delta.cfg 'patience_delta = -0.01\n')
    one_line_error 2 "^error: $f:1: key 'patience_delta': -0.01 is out of range" "$BIN" $cmd --config "$f"
    f=$(cfg best.cfg 'keep_best = 1\n')
    one_line_error 2 "^error: $f:1: key 'keep_best': the best dev evaluation needs eval_steps > 0$" "$BIN" $cmd --config "$f"
    f=$(cfg final.cfg 'lr_decay = cosine\nlr_final = -1e-5\n')
    one_line_error 2 "^error: $f:2: key 'lr_final': -1e-5 is out of range" "$BIN" $cmd --config "$f"
    # the same mistakes as command-line overrides
    one_line_error 2 "^error: command line: unknown key 'd_modle' (did you mean 'd_model'?)$" "$BIN" $cmd d_modle=512
    one_line_error 2 "^error: command line: unknown key 'n_haeds' (did you mean 'n_heads'?)$" "$BIN" $cmd n_haeds=8
    one_line_error 2 "^error: command line: unknown key 'bogus_key'$" "$BIN" $cmd bogus_key=1
    one_line_error 2 "^error: command line: key 'd_model': -512 is out of range" "$BIN" $cmd d_model=-512
    one_line_error 2 "^error: command line: key 'warmup': 'soon' is not a number" "$BIN" $cmd warmup=soon
    one_line_error 2 "^error: command line: key 'd_model': 9 must be even" "$BIN" $cmd --config "$tmp/odd.cfg" d_model=9
    one_line_error 2 "^error: $cmd: unknown argument 'bogus'" "$BIN" $cmd bogus
    one_line_error 2 "^error: $tmp: is a directory, not a config file" "$BIN" $cmd --config "$tmp"
    f=$(cfg dup.cfg 'd_model = 512\nn_layers = 2\nd_model = 256\n')
    one_line_error 2 "^error: $f:3: key 'd_model' set twice (first on line 1)" "$BIN" $cmd --config "$f"
    one_line_error 2 "^error: $cmd: --config given twice ('$f', '$tmp/odd.cfg')" "$BIN" $cmd --config "$f" --config "$tmp/odd.cfg"
done
# an option whose value is missing or is itself an option, an option given
# twice, a numeric option out of its range: one line each, nothing written
# (`translate --output --recompute` wrote a file named "--recompute";
# `--output a --output b` wrote b only)
CK=$TOP/tests/fuzz/seeds/checkpoint/synthetic.h5
mkdir -p "$tmp/opts"
(
cd "$tmp/opts" || exit 1
one_line_error 2 "^error: translate: --output needs a value, not the option '--recompute'$" \
    "$BIN" translate --checkpoint "$CK" --data synthetic --split dev --output --recompute
one_line_error 2 "^error: eval: --checkpoint needs a value, not the option '--data'$" "$BIN" eval --checkpoint --data x.h5
one_line_error 2 "^error: attention: --output given twice ('a.h5', 'b.h5')$" \
    "$BIN" attention --checkpoint "$CK" --sentences 0 --output a.h5 --output b.h5
one_line_error 2 "^error: heads: --split given twice ('dev', 'train')$" \
    "$BIN" heads --checkpoint "$CK" --data synthetic --split dev --split train --output a.h5
one_line_error 2 "^error: average: --output given twice ('a.h5', 'b.h5')$" "$BIN" average --output a.h5 --output b.h5 "$CK" "$CK"
one_line_error 2 "^error: train: --dump-params needs a value, not the option '--resume'$" "$BIN" train --dump-params --resume
one_line_error 2 "^error: prepare: --byte-fallback '99' must be an integer from 0 to 1$" \
    "$BIN" prepare --out d.h5 --split train a b --byte-fallback 99
one_line_error 2 "^error: prepare: --jobs '4294967298' must be an integer from 0 to 4096$" \
    "$BIN" prepare --out d.h5 --split train a b --jobs 4294967298
one_line_error 2 "^error: prepare: --split needs 3 arguments" "$BIN" prepare --split train a --out d.h5
one_line_error 2 "^error: translate: --batch-size '99999999999' must be an integer from 1 to 1000000$" \
    "$BIN" translate --checkpoint "$CK" --data synthetic --split dev --output o.txt --batch-size 99999999999
one_line_error 2 "^error: command line: key 'data': empty" "$BIN" params data=
printf 'd_model = 6\0004\n' > "$tmp/nul.cfg"
one_line_error 2 "^error: $tmp/nul.cfg:1: a NUL byte in the line" "$BIN" params --config "$tmp/nul.cfg"
[ -z "$(ls -A)" ] || fail "files written by refused commands: $(ls -A)"
) || exit 1
# prepare's settings describe the dataset it writes, not the synthetic task:
# max_len=10 (below synth_max_len + 1) is no reason to refuse it
"$BIN" prepare --out "$tmp/opts/d.h5" --split train "$tmp/none.en" "$tmp/none.de" max_len=10 --jobs 1 2> "$tmp/p.err"
grep -q "^error: $tmp/none.en: cannot open" "$tmp/p.err" || fail "prepare max_len=10: $(cat "$tmp/p.err")"
ok "prepare max_len=10 is checked against its own data, not the synthetic task's limits"
# TMPDIR that is no directory: one line before MPI starts (Open MPI's own
# report of it is some fifty lines)
touch "$tmp/file"
one_line_error 2 "^error: TMPDIR=$tmp/file: not a directory" env TMPDIR="$tmp/file" "$BIN" eval --checkpoint "$CK" --data synthetic

# a missing dataset file says how to make it: input/prepare.sh NAME for a
# dataset of input/prepare.sh (its file name), else where the datasets are.
# The relative default path is tried from an empty directory (a checkout may
# have prepared data/wmt14.h5), with a small model (no 63M-parameter init)
small="n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 threads=1"
mkdir -p "$tmp/empty"
(cd "$tmp/empty" && one_line_error 2 "^error: data/wmt14.h5: no such file (make it with: input/prepare.sh wmt14)$" \
    "$BIN" train data=data/wmt14.h5 $small) || exit 1
one_line_error 2 "^error: $tmp/multi30k.h5: no such file (make it with: input/prepare.sh multi30k '' $tmp/multi30k.h5)$" \
    "$BIN" train data="$tmp/multi30k.h5" $small
one_line_error 2 "^error: $tmp/mine.h5: no such file (make a dataset with input/prepare.sh NAME or transformer prepare: see docs/dataset.md)$" \
    "$BIN" train data="$tmp/mine.h5" $small
# a max_len below the dataset's: pairs longer than it (source or target + 1)
# are left out of training and of the dev evaluation, which dropped most of
# a corpus without a word.  One warning line with both counts (counted here
# from the dataset's offsets), in eval's words; none when nothing is left out.
. "$(dirname "$0")/ckpt_lib.sh"   # PY
text_corpus 300 7 "$tmp/tr.en" "$tmp/tr.de"
text_corpus 40 8 "$tmp/dv.en" "$tmp/dv.de"
"$BIN" prepare --out "$tmp/ml.h5" --split train "$tmp/tr.en" "$tmp/tr.de" --split dev "$tmp/dv.en" "$tmp/dv.de" \
    vocab_size=400 max_len=64 --jobs 1 > "$tmp/ml.log" 2>&1 || fail "prepare: $(tail -n 2 "$tmp/ml.log")"
over() {   # over MAX_LEN SPLIT: pairs of SPLIT with a side of MAX_LEN tokens or more
    $PY -c "import h5py, numpy as np, sys
g = h5py.File(sys.argv[1], 'r')['splits/' + sys.argv[3]]
n = lambda s: np.diff(g[s + '_offsets'][:])
print(int(np.sum((n('src') + 1 > int(sys.argv[2])) | (n('tgt') + 1 > int(sys.argv[2])))), len(n('src')))" "$tmp/ml.h5" "$1" "$2"
}
for ml in 12 64; do
    "$BIN" train data="$tmp/ml.h5" vocab_size=400 max_len=$ml train_steps=1 $small > /dev/null 2> "$tmp/ml.err" ||
        fail "train max_len=$ml: $(cat "$tmp/ml.err")"
    read -r tk tn < <(over $ml train); read -r dk dn < <(over $ml dev)
    if [ $((tk + dk)) -eq 0 ]; then
        ! grep -q '^warning' "$tmp/ml.err" || fail "max_len=$ml leaves no pair out, yet: $(cat "$tmp/ml.err")"
    else
        [ "$(grep -c . "$tmp/ml.err")" -eq 1 ] &&
        grep -qx "warning: $tmp/ml.h5: skipped $tk of $tn train pairs and $dk of $dn dev pairs longer than max_len=$ml" "$tmp/ml.err" ||
            fail "max_len=$ml leaves $tk of $tn train and $dk of $dn dev pairs out; stderr: $(cat "$tmp/ml.err")"
    fi
    ok "train max_len=$ml: $tk of $tn train and $dk of $dn dev pairs left out: $(cat "$tmp/ml.err")"
done
[ "$(over 12 train)" != "0 300" ] && [ "$(over 64 train | cut -d' ' -f1)" = 0 ] || fail "the corpus tests nothing"

# a byte order mark before the first key is not part of it
printf '\xef\xbb\xbfn_layers = 1\n' > "$tmp/bom.cfg"
"$BIN" params --config "$tmp/bom.cfg" n_layers=1 > /dev/null || fail "a config with a UTF-8 BOM is refused"
ok "a UTF-8 byte order mark is skipped"

# --help of every command in the command table exits 0 and prints a usage line
"$BIN" --help > "$tmp/help" || fail "transformer --help exited $?"
cmds=$(awk '/^commands:/ { on = 1; next } on && NF >= 2 { print $1 } on && NF == 0 { on = 0 }' "$tmp/help")
[ -n "$cmds" ] || fail "no commands listed by --help"
for c in $cmds; do
    "$BIN" "$c" --help > "$tmp/h" 2>&1 || fail "transformer $c --help exited $?"
    grep -q "usage: transformer $c" "$tmp/h" || fail "transformer $c --help prints no usage line"
    ok "transformer $c --help"
done
one_line_error 2 "^error: unknown command 'trian'" "$BIN" trian

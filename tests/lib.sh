# Shared environment and helpers for the shell tests (sourced).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$TOP/bin/transformer}
SHARED_DATA=${SHARED_DATA:-$TOP/../shared/data}

fail() { echo "FAIL: $*" >&2; exit 1; }
# ok WHAT: a passed check, with the seconds since the test started (which of
# its parts is slow is then in its log: build/test-logs/NAME.log)
ok() { echo "ok: $* [${SECONDS} s]"; }
# skip REASON: the test cannot run here (exit 77, counted as skipped by run_all.sh)
skip() { echo "skipped: $*"; exit 77; }
# need_emulator BINARY...: the CUDA emulator's tests need the CUDA headers
# (a machine without them skips, with one line, counted as skipped) and the
# emulator binaries that make tests builds from them (missing: a failure)
need_emulator() {
    [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cublas_v2.h" ] ||
        skip "no CUDA headers under ${CUDA_HOME:-/usr/local/cuda} (the emulator needs them; see README)"
    local b
    for b in "$@"; do
        [ -x "$b" ] || fail "emulator binary $b missing (make tests; needs the CUDA headers)"
    done
}
# need_multi30k: sets M to a folder holding Multi30k's text files: the shared
# data beside the checkout, else data/raw/multi30k, fetched there once through
# input/prepare.sh's download path (sha256-checked).  A clone without
# ../shared and without network skips the test with one line saying so; the
# download is tried once per run_all.sh run and for at most 90 s (a firewall
# that drops packets would otherwise outlast the test's time limit).
need_multi30k() {
    M=$SHARED_DATA/multi30k
    [ -f "$M/train.en" ] && return 0
    M=$TOP/data/raw/multi30k
    [ -f "$M/train.en" ] && return 0
    local failed=$TOP/build/test-logs/.no-multi30k
    if [ ! -f "$failed" ]; then
        timeout 90 "$TOP/input/prepare.sh" fetch multi30k "$TOP/data/raw" >/dev/null 2>&1 && [ -f "$M/train.en" ] && return 0
        mkdir -p "${failed%/*}" && touch "$failed"
    fi
    skip "no Multi30k: $SHARED_DATA/multi30k is missing and 'input/prepare.sh fetch multi30k data/raw' could not download it (or set SHARED_DATA to a folder holding multi30k/)"
}
# field LINE_REGEX NAME [FILE]: the value after the word NAME on the last line
# matching LINE_REGEX (train's and eval's lines are "name value" pairs:
# "dev final loss_ls L nll N ppl P tokens T")
field() {
    awk -v re="$1" -v k="$2" '$0 ~ re { for (i = 1; i < NF; i++) if ($i == k) v = $(i + 1) } END { print v }' "${3:--}"
}
# wait_until PID CMD...: poll CMD until it succeeds (0) or process PID has
# exited (CMD's last answer), for at most 600 s: the cap only bounds a hang,
# since a failed process ends the wait when it exits
wait_until() {
    local pid=$1 i; shift
    for i in $(seq 1 30000); do
        "$@" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { "$@" 2>/dev/null; return; }
        sleep 0.02
    done
    return 1
}
# step_losses LOG: the per-step lines of a train output without their timing
# (loss, learning rate, and with loss scaling the scale and the steps
# skipped: what two runs meant to be equal must share)
step_losses() { grep -E '^step [0-9]+ ' "$1" | sed -E 's/ tok\/s [0-9]+ elapsed [0-9.]+s//'; }
# expect_error CODE PATTERN cmd...: the command exits CODE and its stderr has
# a line matching PATTERN (with several ranks, each may print it)
expect_error() {
    local code=$1 pat=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null) && rc=0 || rc=$?   # also under set -e
    [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code (stderr: $err)"
    grep -q -- "$pat" <<<"$err" || fail "'$*': stderr lacks '$pat': $err"
    ok "'$*' -> exit $rc: $(echo "$err" | head -1)"
}
# one_line_error CODE PATTERN cmd...: the command exits CODE and its stderr
# is exactly one line, matching PATTERN (expect_error and the line count in
# one run: `train` starts MPI, which is slow on loaded machines)
one_line_error() {
    local code=$1 pat=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null) && rc=0 || rc=$?   # also under set -e
    [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code (stderr: $err)"
    [ -n "$err" ] && [ "$err" = "${err%%$'\n'*}" ] || fail "'$*': stderr is not exactly one line: $err"
    grep -q -- "$pat" <<<"$err" || fail "'$*': stderr lacks '$pat': $err"
    ok "'$*' -> exit $rc: $err"
}
# ids FILE DSET: the ids of an id array of a dataset file, one a line,
# whatever their stored width (uint16 or int32, docs/dataset.md)
ids() {
    local bin t
    bin=$(mktemp)
    h5dump -d "$2" -b LE -o "$bin" "$1" >/dev/null || { rm -f "$bin"; return 1; }
    t=d4; grep -q H5T_STD_U16LE < <(h5dump -H -d "$2" "$1") && t=u2
    od -An -v -t $t -w${t#?} "$bin" | tr -d ' '
    rm -f "$bin"
}
# text_corpus N SEED OUT_SRC OUT_TGT: N generated sentence pairs (words of a
# few hundred kinds, 3-20 words a side) for tests that need a corpus without
# downloads; the target is the source reversed with its words renamed
text_corpus() {
    awk -v n="$1" -v seed="$2" -v src="$3" -v tgt="$4" 'BEGIN {
        srand(seed)
        for (i = 0; i < n; i++) {
            k = 3 + int(rand() * 18); s = ""; t = ""
            for (j = 0; j < k; j++) {
                w = int(300 * rand() * rand())
                s = s (j ? " " : "") "w" w
                t = "v" (w * 7 % 300) (j ? " " : "") t
            }
            print s > src; print t > tgt
        }
    }'
}
# node_memory NP LOG FILE ARGS...: runs `mpirun -np NP $BIN ARGS...`
# (output to LOG) and prints "NODE RANK_HWM RANK" in kB, sampled every
# 20 ms: NODE is the peak over the run of the sum over its ranks of their
# anonymous memory (heap, private copies) and their proportional share
# (Pss) of the pages of FILE they map: pages of FILE shared by k ranks
# count 1/k in each, so the sum is what the node holds for the data.
# Shared libraries are left out: their Pss depends on every other process
# of the machine that maps them.  RANK_HWM is the largest VmHWM of a rank
# (shared pages count in full there), RANK the largest single-rank term.
# Exit status: the run's.
node_memory() {
    local np=$1 log=$2 file=$3 node=0 hwm=0 rmax=0 s h p v mp tag rc
    shift 3
    file=$(readlink -f "$file")
    tag="node_memory.$$.$RANDOM"
    mpirun -np "$np" -x "NODE_MEMORY_TAG=$tag" "$BIN" "$@" >"$log" 2>&1 &
    mp=$!
    while kill -0 "$mp" 2>/dev/null; do
        s=0
        for p in $(pgrep -x transformer); do
            grep -qz "^NODE_MEMORY_TAG=$tag\$" /proc/"$p"/environ 2>/dev/null || continue
            v=$(awk -v f="$file" '/^[0-9a-f]+-[0-9a-f]+ / { path = $6 }
                                  /^Anonymous:/ { a += $2 } /^Pss:/ && path == f { m += $2 }
                                  END { print a + m }' /proc/"$p"/smaps 2>/dev/null)
            h=$(awk '/^VmHWM:/ { print $2 }' /proc/"$p"/status 2>/dev/null)
            s=$((s + ${v:-0}))
            [ "${h:-0}" -gt "$hwm" ] && hwm=$h
            [ "${v:-0}" -gt "$rmax" ] && rmax=$v
        done
        [ "$s" -gt "$node" ] && node=$s
        sleep 0.02
    done
    wait "$mp"; rc=$?
    echo "$node $hwm $rmax"
    return $rc
}

# word_corpus DIR: a word-for-word "translation" with a 16-word vocabulary,
# DIR/{train,dev}.{en,de} (1500 and 16 pairs, seeded): learnt well enough in
# 300 steps that the decoder ends its outputs with EOS (the export tests)
word_corpus() {
    python3 - "$1" <<'PY'
import random, sys
w, r = sys.argv[1], random.Random(7)
en = "a the man woman dog cat sees eats big small red blue house tree runs sleeps".split()
de = "ein der Mann Frau Hund Katze sieht isst gross klein rot blau Haus Baum rennt schlaeft".split()
def write(name, n):
    with open(f"{w}/{name}.en", "w") as s, open(f"{w}/{name}.de", "w") as t:
        for _ in range(n):
            idx = [r.randrange(len(en)) for _ in range(r.randint(3, 7))]
            s.write(" ".join(en[i] for i in idx) + ".\n"); t.write(" ".join(de[i] for i in idx) + ".\n")
write("train", 1500); write("dev", 16)
PY
}

# ct2_python: PY = .venv-hf's Python with ctranslate2, or skip the test
# with one line (tests/install-deps.sh creates the venv)
ct2_python() {
    PY=$TOP/.venv-hf/bin/python
    [ -x "$PY" ] || skip "no .venv-hf (bash tests/install-deps.sh creates it)"
    "$PY" -c "import ctranslate2" 2>/dev/null || skip "no ctranslate2 in .venv-hf (bash tests/install-deps.sh)"
}

# word_model DIR [KEY=VALUE...]: word_corpus's task prepared into DIR/d.h5
# and a tiny model (N=2, d_model 32, 4 heads of 8) trained on it for 300
# steps in DIR/run, KEY=VALUE added to train's; sets CK to its last
# checkpoint and WORD_ARCH to the architecture keys (the export tests)
WORD_ARCH="vocab_size=330 max_len=24 n_layers=2 d_model=32 d_ff=64 n_heads=4 max_tokens=512 warmup=60 lr_factor=1"
word_model() {
    local w=$1
    shift
    word_corpus "$w"
    "$BIN" prepare --out "$w/d.h5" --split train "$w/train.en" "$w/train.de" --split dev "$w/dev.en" "$w/dev.de" \
        vocab_size=330 max_len=24 --jobs 1 >"$w/prep.log" 2>&1 || fail "prepare: $(tail -2 "$w/prep.log")"
    # shellcheck disable=SC2086
    "$BIN" train data="$w/d.h5" $WORD_ARCH d_k=8 d_v=8 train_steps=300 dropout=0 threads=1 "$@" \
        run_dir="$w/run" >"$w/train.log" 2>&1 || fail "train: $(tail -2 "$w/train.log")"
    CK=$(ls "$w"/run/ckpt_*.h5 | tail -1)
}

# train_masked_model DIR DATA ARG...: a 100-step model of DATA with three
# heads masked (config mask_heads) in run directory DIR, its last checkpoint
# in CKM and eval's dev NLL of it in MASKED_NLL: what an export of a pruned
# model must reproduce (test_hf_export, test_ct2_export)
train_masked_model() {
    local dir=$1 data=$2; shift 2
    "$BIN" train data="$data" "$@" d_k=8 d_v=8 train_steps=100 dropout=0 threads=1 \
        mask_heads=enc:0:1+2,dec_self:1:3,cross:1:0 run_dir="$dir" >"$dir.log" 2>&1 \
        || fail "train masked: $(tail -2 "$dir.log")"
    CKM=$(ls "$dir"/ckpt_*.h5 | tail -1)
    "$BIN" eval --checkpoint "$CKM" --data "$data" --split dev threads=1 >"$dir.eval" 2>&1 \
        || fail "eval masked: $(cat "$dir.eval")"
    MASKED_NLL=$(field '^eval' nll "$dir.eval")
}

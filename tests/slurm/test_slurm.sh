#!/usr/bin/env bash
# `make test-slurm`: the job scripts (jobs/) on a real single-node Slurm
# started for this test (tests/slurm/start.sh; two fake GPUs through
# gres.conf, so --gpus-per-node and --gpus-per-task=1 are exercised) and
# stopped at the end.
#   0. The submit scripts refuse in one line, submitting nothing, when they
#      cannot run `transformer params`; submit-table3.sh refuses a MAX_TOKENS
#      that would change the global batch.
#   1. Table 3: submit-table3.sh prints the layout and the GPU-hours; the
#      sweep array over every row config, scaled down (SHRINK, a few steps,
#      Multi30k subset), completes for every row, each row has its result
#      file, and the dependent analysis job writes the table.
#   2. submit-table3.sh refuses a row config with a bad key in one line; a
#      failing element (its frozen config given a bad key after the
#      submission) is FAILED with a clear
#      message in its log and result file; the other element of its array
#      completes; that sweep's analysis job still runs (afterany) and marks
#      the failed row in its table.
#   5. prepare in a 1-CPU step (srun -c 1) of this 2-CPU node: 1 worker.
#   3. Preemption: a 2-rank training job is interrupted four ways (SIGUSR1 to
#      the batch shell only, as --signal=B:USR1 does; SIGUSR1 to the tasks, as
#      --signal=USR1@T does; `scontrol requeue`, i.e. SIGTERM; first of all the
#      time limit, lowered so that Slurm's own --signal=USR1@115 becomes due), requeues
#      and resumes each time, and its final parameters equal those of an
#      uninterrupted run of jobs/run-local.sh (mpirun, 2 ranks), bit for bit.
#   4. jobs/run-local.sh table3 (no Slurm) on two rows, synthetic data, and a
#      bad row, which fails with a clear message.
# KEEP=1 keeps the temporary directory (logs) for inspection.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
SLURM_ON=()
. tests/slurm/lib.sh    # state, wait_job, wait_restart
# make test-slurm has no skip status: without Multi30k (no ../shared and no
# network) the test says so in one line and succeeds
skip() { echo "skipped: $*"; exit 0; }
need_multi30k   # sets M (tests/lib.sh): shared data, a download, or a skip
T0=$SECONDS
make -s all >/dev/null || fail "make failed"
T=$(mktemp -d /tmp/transformer-slurm.XXXXXX)
chmod 755 "$T"     # munged runs as user munge
C=$T/cluster
cleanup() {
    tests/slurm/stop.sh "$C"
    if [ -n "${KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
tests/slurm/start.sh "$C" || fail "could not start the test Slurm"
. "$C/env.sh"

# cluster.env values for this 2-CPU node (environment overrides the file)
export PARTITION="" ACCOUNT="" MODULES="" GPUS_PER_NODE=1 CPUS_PER_TASK=1 DEVICE=cpu
# (GPU_REQUEST: cluster.env's default, --gpus-per-node, for the sweeps of 1
# and 2; --gpus-per-task=1 for the training job of 3)
export TIME_LIMIT=20 SIGNAL_LEAD=60 ANALYSIS_TIME=10

# array_states ARRAYID: "<task id> <state>" per element
array_states() {
    scontrol -o show job "$1" 2>/dev/null | sed -n 's/.*ArrayTaskId=\([^ ]*\) .*JobState=\([A-Z_]*\).*/\1 \2/p' | sort -n
}
pyexe=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo /usr/bin/python3 )}
export PYTHON=$pyexe
h5attr() { "$pyexe" -c 'import h5py,sys; v=h5py.File(sys.argv[1],"r").attrs[sys.argv[2]]; print(v.decode() if isinstance(v,bytes) else v)' "$1" "$2"; }

# ---- 1 and 2: the Table 3 sweep, scaled down, and a sweep with a bad row ----
# the row configs alone: input/table3/seeds.txt's 2-3 seeds a row would
# make 50 elements of what is a test of the job scripts
mkdir -p "$T/rows"; cp "${TABLE3_SRC:-input/table3}"/*.cfg "$T/rows/" || fail "${TABLE3_SRC:-input/table3}: no row configs"
TABLE3_SRC=$T/rows
nrows=$(ls $TABLE3_SRC/*.cfg | wc -l)
# real data, scaled down: the first 3000 Multi30k training pairs and 40 dev
# pairs, a 500-piece BPE vocabulary; translations at most 10 tokens longer
# than the source (max_len_a) keep the untrained models' beam search short
head -n 3000 "$M/train.en" > "$T/train.en"; head -n 3000 "$M/train.de" > "$T/train.de"
head -n 40 "$M/val.en" > "$T/dev.en"; head -n 40 "$M/val.de" > "$T/dev.de"
"$BIN" prepare --out "$T/m30k.h5" --split train "$T/train.en" "$T/train.de" --split dev "$T/dev.en" "$T/dev.de" \
    vocab_size=500 max_len=64 > "$T/prepare.log" 2>&1 || { cat "$T/prepare.log"; fail "prepare failed"; }
export STEPS=3 BATCH_TOKENS=400 DATA=$T/m30k.h5 SHRINK=16
export EXTRA="vocab_size=500 max_len=64 max_len_a=10 log_steps=1 eval_steps=0 threads=1"
# a MAX_TOKENS that would change the global batch: refused in one line, nothing submitted
njobs=$(squeue -h | wc -l)
printf '#!/bin/sh\necho "transformer: error while loading shared libraries: libhdf5.so.310: cannot open shared object file" >&2\nexit 127\n' > "$T/broken"
chmod +x "$T/broken"
out=$(BIN=$T/broken jobs/submit-train.sh "$T/run-broken" input/synthetic-test.cfg 2>&1) && fail "submit-train.sh with a binary that cannot run succeeded: $out"
[ "$(grep -c . <<< "$out")" -eq 1 ] && grep -q "^error: $T/broken params: cannot run in this shell (transformer: error while loading shared libraries" <<< "$out" ||
    fail "submit-train.sh: not this one-line refusal: $out"
ok "submit-train.sh refuses in one line when 'params' cannot run: $out"
out=$(GPUS_PER_ROW=8 MAX_TOKENS=6250 BATCH_TOKENS= TABLE3_DIR=$TABLE3_SRC jobs/submit-table3.sh "$T/refused2" 2>&1) &&
    fail "submit-table3.sh accepted 8 GPUs x MAX_TOKENS=6250 (50000 tokens a step): $out"
[ "$(grep -c . <<< "$out")" -eq 1 ] && grep -q '^error: row A1: 8 GPU(s) x max_tokens 6250 x update_freq 1 = 50000 tokens a step, not the global batch 25000' <<< "$out" ||
    fail "the refusal of a silent batch change is not this one line: $out"
[ "$(squeue -h | wc -l)" -eq "$njobs" ] || fail "a refused submission submitted jobs"
ok "submit-table3.sh: 8 GPUs x MAX_TOKENS=6250 (a 50000-token step) refused in one line, nothing submitted"
TABLE3_DIR=$TABLE3_SRC jobs/submit-table3.sh "$T/sweep" > "$T/submit.out" 2>&1 || { cat "$T/submit.out"; fail "submit-table3.sh failed"; }
read -r A1 AN1 < <(tail -n 1 "$T/submit.out")
grep -qx "layout: 1 rank a row, micro-batch 400 tokens x update_freq 1 = 400 tokens a step (the paper: ~25000): rows $(cd $TABLE3_SRC && ls *.cfg | sed 's/\.cfg$//' | tr '\n' ' ' | sed 's/ $//')" "$T/submit.out" ||
    { cat "$T/submit.out"; fail "submit-table3.sh did not print the layout before submitting"; }
grep -qE '^estimate: [0-9.]+ lane-hours of training on the CPU' "$T/submit.out" || fail "submit-table3.sh (DEVICE=cpu) printed no lane-hour estimate"
ok "submit-table3.sh printed the layout (1 rank a row, 400 tokens a step) and the CPU lane-hours before submitting"
mkdir -p "$T/bad-configs"
cp $TABLE3_SRC/A1.cfg "$T/bad-configs/"
printf 'row = bad\nn_layers = 2\nd_modle = 64\n' > "$T/bad.cfg"
cp "$T/bad.cfg" "$T/bad-configs/bad.cfg"
# a row config that train refuses is refused before sbatch (`transformer
# params`), nothing frozen; so the failing element is a row whose frozen
# config breaks after its submission (held until then)
out=$(TABLE3_DIR=$T/bad-configs jobs/submit-table3.sh "$T/badsweep" 2>&1) && fail "submit-table3.sh submitted a config with an unknown key: $out"
grep -q "^error: table3 row bad: $T/bad-configs/bad.cfg:3: unknown key 'd_modle'" <<< "$out" || fail "submit-table3.sh: not the one-line refusal: $out"
# (the running sweep's elements come and go in squeue: jobs.txt says whether it submitted)
[ ! -e "$T/badsweep/jobs.txt" ] && [ ! -e "$T/badsweep/rows.txt" ] || fail "a refused submission submitted jobs or froze the sweep"
ok "submit-table3.sh refused a row config with an unknown key in one line: $out"
sed 's/^row = .*/row = bad/' "$TABLE3_SRC/A1.cfg" > "$T/bad-configs/bad.cfg"
read -r A2 AN2 < <(SBATCH_EXTRA=--hold TABLE3_DIR=$T/bad-configs jobs/submit-table3.sh "$T/badsweep" | tail -n 1) || fail "submit-table3.sh (bad sweep) failed"
cp "$T/bad.cfg" "$T/badsweep/configs/bad.cfg" && scontrol release "$A2" "$AN2" || fail "cannot break and release the bad sweep"
cp "$T/bad.cfg" "$T/bad-configs/bad.cfg"   # the bad row of part 4
echo "submitted: sweep $A1 (+analysis $AN1), bad sweep $A2 (+analysis $AN2)"

wait_job "$A1" 900 || fail "sweep array $A1 did not finish"
wait_job "$AN1" 300 || fail "analysis job $AN1 did not finish"
bad_el=$(array_states "$A1" | awk '$2 != "COMPLETED"')
[ -z "$bad_el" ] || { tail -n 30 "$T"/sweep/logs/*.out >&2; fail "sweep elements not COMPLETED: $bad_el"; }
[ "$(array_states "$A1" | wc -l)" -eq "$nrows" ] || fail "sweep: expected $nrows elements, got $(array_states "$A1" | wc -l)"
has_translate=0; "$BIN" --help | grep -q '^  translate ' && has_translate=1
# every row: result file with status done, 3 steps, finite dev PPL equal to
# eval's output on the newest checkpoint; dev BLEU when translate exists
# shellcheck disable=SC2046
"$pyexe" - "$T/sweep" "$has_translate" $(for c in "$TABLE3_SRC"/*.cfg; do basename "$c" .cfg; done) <<'PY' || fail "sweep results (above)"
import math, re, sys, h5py
sweep, has_translate, rows = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
bad = []
for row in rows:
    try:
        a = h5py.File(f"{sweep}/results/{row}.h5", "r").attrs
    except OSError as e:
        bad.append(f"{row}: no result file ({e})"); continue
    s = lambda k: a[k].decode() if isinstance(a[k], bytes) else a[k]
    if s("status") != "done": bad.append(f"{row}: status {s('status')}")
    if int(a["train_steps"]) != 3: bad.append(f"{row}: train_steps {a['train_steps']}")
    ppl = float(a["dev_ppl"])
    ev = open(f"{sweep}/runs/{row}/eval.out").read()
    m = re.search(r"^eval dev .* ppl ([0-9.]+) ", ev, re.M)
    if not (math.isfinite(ppl) and ppl > 1 and m and abs(float(m.group(1)) - ppl) <= 1e-3 * ppl):
        bad.append(f"{row}: dev_ppl {ppl} vs eval output {ev.strip()!r}")
    if has_translate:
        bleu = float(a["dev_bleu"])
        if not (math.isfinite(bleu) and bleu >= 0): bad.append(f"{row}: dev_bleu {bleu}")
        if sum(1 for _ in open(f"{sweep}/runs/{row}/dev.final.hyp")) != 40: bad.append(f"{row}: dev.final.hyp is not 40 lines")
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY
ok "Table 3 sweep: $nrows rows COMPLETED, each with a result file (status done, eval's dev PPL, 3 steps)"
[ "$(state "$AN1")" = COMPLETED ] || { cat "$T"/sweep/logs/analysis-*.out >&2; fail "analysis job $AN1: $(state "$AN1")"; }
[ -s "$T/sweep/table3.md" ] || fail "$T/sweep/table3.md: not written"
for c in $TABLE3_SRC/*.cfg; do
    grep -qw "$(basename "$c" .cfg)" "$T/sweep/table3.md" || fail "table3.md lacks row $(basename "$c" .cfg)"
done
ok "analysis job after the array (afterany) wrote table3.md with every row"

wait_job "$A2" 300 || fail "bad sweep $A2 did not finish"
sts=$(array_states "$A2" | awk '{ print $2 }' | tr '\n' ' ')
[ "$sts" = "COMPLETED FAILED " ] || fail "bad sweep: element states '$sts', expected 'COMPLETED FAILED' (rows A1, bad)"
log=$(ls "$T"/badsweep/logs/*_1.out)
grep -q "^error: table3 row bad: params: error: .*bad.cfg:3: unknown key 'd_modle'" "$log" ||
    { cat "$log" >&2; fail "$log: no clear error message for the bad row"; }
[ "$(h5attr "$T/badsweep/results/bad.h5" status)" = failed ] || fail "bad.h5: status is not 'failed'"
h5attr "$T/badsweep/results/bad.h5" message | grep -q "unknown key 'd_modle'" || fail "bad.h5: message lacks the reason"
[ "$(h5attr "$T/badsweep/results/A1.h5" status)" = "done" ] || fail "badsweep A1.h5: status is not 'done'"
ok "bad row: element FAILED with '$(grep -m1 '^error:' "$log")'; the other element COMPLETED"
# the analysis job runs after every element ended (afterany), on no GPU
# partition, and tables what finished with the failed row marked
wait_job "$AN2" 300 || fail "analysis job $AN2 of the sweep with a failed row did not finish"
[ "$(state "$AN2")" = COMPLETED ] || { cat "$T"/badsweep/logs/analysis-*.out >&2; fail "analysis job $AN2 after a failed row: $(state "$AN2"), expected COMPLETED (afterany)"; }
grep -qE '^\| *A1 ' "$T/badsweep/table3.md" || fail "badsweep table3.md lacks the finished row A1: $(cat "$T/badsweep/table3.md")"
grep -q "bad: .*unknown key 'd_modle'" "$T/badsweep/table3.md" || fail "badsweep table3.md does not mark the failed row: $(cat "$T/badsweep/table3.md")"
ok "analysis job after one failed row: COMPLETED (afterany); table3.md has A1 and marks 'bad' failed with its reason"
echo "sweeps took $((SECONDS - T0)) s"

# ---- 5: prepare takes the step's CPUs (srun -c 1 on a 2-CPU node) -------------
srun -n 1 -c 1 --mpi=pmix "$BIN" prepare --out "$T/prep1.h5" --split train "$T/train.en" "$T/train.de" vocab_size=500 \
    > "$T/prep1.log" 2>&1 || { cat "$T/prep1.log"; fail "prepare under srun -c 1 failed"; }
grep -qx 'prepare: 1 worker (SLURM_CPUS_PER_TASK; --jobs N to change)' "$T/prep1.log" ||
    fail "prepare under srun -c 1 did not take 1 worker: $(head -3 "$T/prep1.log")"
ok "prepare in a 1-CPU step of a 2-CPU node: 1 worker (SLURM_CPUS_PER_TASK)"

# ---- 3: preemption and requeue of a training job -----------------------------
export GPU_REQUEST="--gpus-per-task=1"
unset STEPS MAX_TOKENS BATCH_TOKENS DATA SHRINK EXTRA
export GPUS_PER_NODE=2
cfg=$T/preempt.cfg
printf 'train_steps = 300\nlog_steps = 1\nsynth_train = 3000\nmax_tokens = 1000\nseed = 7\nckpt_minutes = 0\nthreads = 1\n' > "$cfg"
# --signal=USR1@115: never due within the 20-minute limit, until case (a)
# lowers the limit to 2 minutes; slurmctld checks such signals every 30 s, so
# the run is long enough for it to arrive: 300 steps of at least 200 ms
# (TRANSFORMER_STEP_SLEEP_MS only slows the steps; results are unchanged)
J=$(TRANSFORMER_STEP_SLEEP_MS=200 SIGNAL_LEAD=115 jobs/submit-train.sh "$T/run-slurm" "$cfg") || fail "submit-train.sh failed"
jlog=$T/run-slurm/slurm-$J.out
# wait_log PATTERN TIMEOUT: until the job log has a line matching PATTERN
wait_log() {
    local t=$((SECONDS + $2))
    while [ $SECONDS -lt $t ]; do grep -qE "$1" "$jlog" 2>/dev/null && return 0; sleep 0.2; done
    cat "$jlog" >&2; fail "job $J: no '$1' in its log within $2 s"
}
# wait_steps N: until N more step lines than now are in the log
wait_steps() {
    local n0 t=$((SECONDS + 60))
    n0=$(grep -c '^step ' "$jlog")
    while [ "$(grep -c '^step ' "$jlog")" -lt $((n0 + $1)) ] && [ $SECONDS -lt $t ]; do sleep 0.2; done
}

wait_log '^step 5 ' 120
scontrol update JobId="$J" TimeLimit=2       # (a) the time limit: Slurm's timer sends USR1 (<= 30 s)
wait_restart 1
wait_steps 3
scancel --batch --signal=USR1 "$J"           # (b) batch shell only (B:USR1): it must forward
wait_restart 2
wait_steps 3
scancel --signal=USR1 "$J"                   # (c) the tasks, as --signal=USR1@T does
wait_restart 3
wait_steps 3
scontrol requeue "$J"                        # (d) SIGTERM: Slurm requeues
wait_restart 4
wait_job "$J" 300 || fail "job $J did not finish"
[ "$(state "$J")" = COMPLETED ] || { cat "$jlog" >&2; fail "job $J: $(state "$J")"; }
restarts=$(scontrol -o show job "$J" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
[ "$restarts" -ge 4 ] || fail "job $J: Restarts=$restarts, expected 4"
grep -q 'passing SIGUSR1 to the running stage' "$jlog" || fail "job $J: the batch shell did not forward SIGUSR1"
[ "$(grep -c 'requeueing job' "$jlog")" -ge 3 ] || fail "job $J: did not requeue itself 3 times"
[ "$(grep -cE '^resume: .*\(step ([0-9]|[1-9][0-9]|[12][0-9][0-9]),' "$jlog")" -ge 4 ] || fail "job $J: not resumed 4 times from a mid-run checkpoint"

# the uninterrupted reference: same config, 2 ranks, plain mpirun
LOCAL_RANKS=2 jobs/run-local.sh train "$T/run-local" "$cfg" > "$T/run-local.log" 2>&1 ||
    { cat "$T/run-local.log" >&2; fail "run-local.sh train failed"; }
a=$(ls "$T"/run-slurm/ckpt_*.h5 | sort -V | tail -n 1)
b=$(ls "$T"/run-local/ckpt_*.h5 | sort -V | tail -n 1)
[ "$(basename "$a")" = ckpt_00000300.h5 ] && [ "$(basename "$b")" = ckpt_00000300.h5 ] || fail "final checkpoints $a $b are not of step 300"
h5diff -q "$a" "$b" /params /params || fail "preempted run's parameters differ from the uninterrupted run's ($a vs $b)"
ok "interrupted 4 times (time limit with --signal=USR1@115, B:USR1 forwarded, USR1 to tasks, scontrol requeue), Restarts=$restarts: final parameters equal the uninterrupted run's"

# ---- 4: the same sweep without Slurm (jobs/run-local.sh), synthetic data ----
export STEPS=2 BATCH_TOKENS=300 DATA=synthetic SHRINK=16 GPUS_PER_NODE=1
export EXTRA="vocab_size=24 max_len=64 synth_train=200 synth_dev=16 log_steps=1 eval_steps=0 threads=1"
cp $TABLE3_SRC/base.cfg $TABLE3_SRC/C1.cfg "$T/bad-configs/"
TABLE3_DIR=$T/bad-configs LOCAL_RANKS=1 jobs/run-local.sh table3 "$T/local" base C1 > "$T/local.log" 2>&1 ||
    { cat "$T/local.log"; fail "run-local.sh table3 failed"; }
for row in base C1; do
    [ "$(h5attr "$T/local/results/$row.h5" status)" = "done" ] || fail "local $row: status is not 'done'"
done
grep -qw C1 "$T/local/table3.md" || fail "run-local.sh: table3.md lacks C1"
TABLE3_DIR=$T/bad-configs LOCAL_RANKS=1 jobs/run-local.sh table3 "$T/local" bad > "$T/local-bad.log" 2>&1 &&
    fail "run-local.sh table3 with a bad row succeeded"
grep -q "^error: table3 row bad: failed (exit 1): .*unknown key 'd_modle'" "$T/local-bad.log" ||
    { cat "$T/local-bad.log"; fail "run-local.sh: no clear message for the bad row"; }
ok "run-local.sh table3 (mpirun, synthetic data): rows done and the table written; a bad row fails with '$(grep -m1 '^error:' "$T/local-bad.log")'"
echo "test_slurm: all cases passed in $((SECONDS - T0)) s"

#!/usr/bin/env bash
# The Table 3 sweep scripts without Slurm, in seconds (no training):
#   1. a resubmission that sets an override to another value than the sweep's
#      (SWEEP/sweep.env) is refused with one line naming the row and the
#      override; unset or equal overrides are accepted;
#      a sweep directory with configs/ but no rows.txt keeps its configs;
#      a row (or submit-train.sh's job) whose dataset file is missing is
#      refused before it runs or is submitted (also one EXTRA's data= names,
#      which the eval and translate stages read too), and so is a missing ATTN_ALIGN;
#      a refused first start (DATA, a row name, seeds.txt, a layout) freezes
#      nothing, and the corrected command starts the sweep;
#      a first start stopped during its checks (SIGINT, SIGTERM) leaves
#      nothing, not even its stage SWEEP/.freeze.*, and the next one starts;
#      a config or override that `transformer params` refuses is refused in
#      one line before sbatch is called or the sweep is frozen;
#   2. jobs/run-local.sh table3 reports the error of the latest run of a row,
#      not the first one of its appended log, even after a partial last line;
#      and the text of a launcher's boxed message, not its row of dashes;
#   3. PARALLEL=2 runs rows side by side and still reports a failed one;
#      PARALLEL, LOCAL_RANKS, GPUS_PER_NODE, NODES, SIGNAL_LEAD, MAX_PARALLEL that are not positive
#      integers and a CLUSTER_ENV that is not a file: one line each;
#   3b. a PYTHON that cannot import what a row's result needs fails the row
#      in one line before it trains (the GPU image lacked sacremoses);
#   4. the batch layout of the real row configs is printed (1 GPU a row,
#      25000 tokens a step, GPU-hours; DEVICE=cpu: lane-hours); MAX_TOKENS recomputes update_freq and
#      says so; a layout that changes the global batch is refused in one line;
#      so is a GPUS_PER_ROW that does not fill whole nodes.
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$BIN" ] || fail "$BIN: not built (make)"
cd "$TOP" || fail "$TOP"
unset STEPS WARMUP MAX_TOKENS UPDATE_FREQ DATA SHRINK SEEDS EXTRA BATCH_TOKENS
export TRANSFORMER_HOME=$TOP LOCAL_RANKS=1

# ---- 1: changed overrides are refused --------------------------------------
mkdir -p "$tmp/configs"
printf 'row = r1\nn_layers = 1\nd_model = 16\nd_ff = 32\nn_heads = 2\nd_k = 8\nd_v = 8\ndata = synthetic\n' > "$tmp/configs/r1.cfg"
printf 'row = r2\nn_layers = 2\nd_model = 16\nd_ff = 32\nn_heads = 2\nd_k = 8\nd_v = 8\ndata = synthetic\n' > "$tmp/configs/r2.cfg"
PREP=(bash -c '. jobs/table3-stages.sh; table3_prepare "$@"' -)
prepare() { "${PREP[@]}" "$@"; }
TABLE3_DIR=$tmp/configs STEPS=2 EXTRA="threads=1 log_steps=1" prepare "$tmp/sw" ||
    fail "table3_prepare: first submission failed"
grep -qx 'STEPS=2' "$tmp/sw/sweep.env" || fail "sweep.env lacks STEPS=2: $(cat "$tmp/sw/sweep.env")"
mkdir -p "$tmp/sw/runs/r2" && : > "$tmp/sw/runs/r2/train.out"     # r2 has started
expect_error 2 "^error: $tmp/sw: row r2: STEPS='3' differs from this sweep's STEPS='2'" \
    env STEPS=3 jobs/run-local.sh table3 "$tmp/sw"
expect_error 2 "^error: $tmp/sw: row r1: EXTRA='threads=2' differs from this sweep's EXTRA='threads=1 log_steps=1'" \
    env EXTRA=threads=2 jobs/run-local.sh table3 "$tmp/sw" r1
expect_error 2 "row r1: SHRINK='2' differs from this sweep's SHRINK=''" env SHRINK=2 jobs/run-local.sh table3 "$tmp/sw" r1
[ "$(env STEPS=3 jobs/run-local.sh table3 "$tmp/sw" 2>&1 | grep -c .)" -eq 1 ] || fail "the refusal is not one line"
[ -z "$(ls -A "$tmp/sw/logs")" ] || fail "a refused submission ran rows: $(ls "$tmp/sw/logs")"
prepare "$tmp/sw" r1 || fail "a resubmission without overrides was refused"
STEPS=2 EXTRA="threads=1 log_steps=1" prepare "$tmp/sw" r2 || fail "a resubmission with the same overrides was refused"
ok "a resubmission with a changed override is refused naming the row and the override; unset or equal ones pass"

# a numeric override that is not a positive integer: one line, nothing written
for bad in STEPS=3k SEEDS=0 WARMUP=-5 SHRINK=1.5; do
    expect_error 2 "^error: ${bad%%=*}='${bad#*=}': not a positive integer" \
        env TABLE3_DIR="$tmp/configs" "$bad" jobs/run-local.sh table3 "$tmp/sw-bad"
    [ ! -e "$tmp/sw-bad/rows.txt" ] || fail "$bad: a refused sweep wrote rows.txt"
done
expect_error 2 "^error: SEEDS=2: no base.cfg among the row configs ($tmp/configs)" \
    env TABLE3_DIR="$tmp/configs" SEEDS=2 jobs/run-local.sh table3 "$tmp/sw-noseed"
ok "bad STEPS/SEEDS/WARMUP/SHRINK and SEEDS without a base row are refused in one line"

# a sweep directory whose rows.txt is gone: its frozen configs are kept, not
# copied over from TABLE3_DIR
mkdir -p "$tmp/sw-lost/configs" && printf 'row = r1\nseed = 7\n' > "$tmp/sw-lost/configs/r1.cfg"
expect_error 2 "^error: $tmp/sw-lost: configs/ without rows.txt" \
    env TABLE3_DIR="$tmp/configs" jobs/run-local.sh table3 "$tmp/sw-lost"
grep -q 'seed = 7' "$tmp/sw-lost/configs/r1.cfg" || fail "a sweep without rows.txt had its configs replaced"
ok "a sweep directory with configs/ but no rows.txt is refused, its configs untouched"

# a row whose dataset is missing: refused in one line before any row runs
# (run-local.sh: relative to here) or is submitted (submit-table3.sh, with an
# sbatch that only records a call: relative to TRANSFORMER_HOME)
mkdir -p "$tmp/cdata" "$tmp/fakesb"
sed 's/^data = .*/data = no-such-dir\/m30k.h5/' "$tmp/configs/r1.cfg" > "$tmp/cdata/r1.cfg"
expect_error 2 "^error: $TOP/no-such-dir/m30k.h5: no such dataset file (from row r1's config; input/prepare.sh makes one)$" \
    env TABLE3_DIR="$tmp/cdata" jobs/run-local.sh table3 "$tmp/sw-nodata"
expect_error 2 "^error: /nowhere/d.h5: no such dataset file (from DATA; " \
    env TABLE3_DIR="$tmp/configs" DATA=/nowhere/d.h5 jobs/run-local.sh table3 "$tmp/sw-nodata2"
[ -z "$(find "$tmp/sw-nodata" "$tmp/sw-nodata2" -type f)" ] || fail "a sweep without its data ran rows or froze"
printf '#!/bin/sh\necho "$*" >> %s/sbatch.calls; echo 1\n' "$tmp" > "$tmp/fakesb/sbatch"
chmod +x "$tmp/fakesb/sbatch"
expect_error 2 "^error: $TOP/no-such-dir/m30k.h5: no such dataset file (from row r1's config; " \
    env PATH="$tmp/fakesb:$PATH" TABLE3_DIR="$tmp/cdata" jobs/submit-table3.sh "$tmp/sw-nodata3"
expect_error 2 "^error: $TOP/no-such-dir/m30k.h5: no such dataset file (data of $tmp/cdata/r1.cfg or the command line; " \
    env PATH="$tmp/fakesb:$PATH" jobs/submit-train.sh "$tmp/run-nodata" "$tmp/cdata/r1.cfg"
expect_error 2 "^error: /nowhere/d.h5: no such dataset file " \
    env PATH="$tmp/fakesb:$PATH" jobs/submit-train.sh "$tmp/run-nodata" "$tmp/configs/r1.cfg" data=/nowhere/d.h5
# so is one an EXTRA data= names: train reads it, and so do the eval and
# translate stages (not the config's, whose dev split the model never saw)
expect_error 2 "^error: $TOP/no-such-dir/x.h5: no such dataset file (from EXTRA; " \
    env TABLE3_DIR="$tmp/configs" EXTRA=data=no-such-dir/x.h5 jobs/run-local.sh table3 "$tmp/sw-nodata4"
(CFG=$tmp/configs/r1.cfg OVR=(data=/d1.h5 threads=1 data=/d2.h5); . jobs/table3-stages.sh; [ "$(row_data)" = /d2.h5 ]) ||
    fail "the stages' dataset is not the row's last data= override"
# so is a missing ATTN_ALIGN (the attention stage runs after the training:
# every row would fail there, and the corrected value differ from the frozen)
expect_error 2 "^error: $TOP/no-such-dir/silver.h5: no such file (ATTN_ALIGN, " \
    env TABLE3_DIR="$tmp/configs" ATTN_ALIGN=no-such-dir/silver.h5 jobs/run-local.sh table3 "$tmp/sw-noalign"
expect_error 2 "^error: $TOP/no-such-dir/silver.h5: no such file (ATTN_ALIGN, " \
    env PATH="$tmp/fakesb:$PATH" TABLE3_DIR="$tmp/configs" ATTN_ALIGN=no-such-dir/silver.h5 jobs/submit-table3.sh "$tmp/sw-noalign2"
[ -z "$(find "$tmp/sw-noalign" "$tmp/sw-noalign2" -type f)" ] || fail "a sweep without its ATTN_ALIGN ran rows or froze"
[ ! -e "$tmp/sbatch.calls" ] || fail "a job without its data was submitted: $(cat "$tmp/sbatch.calls")"
ok "a missing dataset (a row config's, DATA, a config's or data=) or ATTN_ALIGN is refused in one line before any row runs or job is submitted"

# a config or override that train refuses: one line from `transformer
# params` naming the file (or the overrides), before sbatch is called and
# before a sweep freezes it
mkdir -p "$tmp/ctypo"
sed 's/^d_model = /d_modle = /' "$tmp/configs/r1.cfg" > "$tmp/typo.cfg"
expect_error 2 "^error: $tmp/typo.cfg:3: unknown key 'd_modle' (did you mean 'd_model'?) (transformer params; nothing submitted)$" \
    env PATH="$tmp/fakesb:$PATH" jobs/submit-train.sh "$tmp/run-typo" "$tmp/typo.cfg"
expect_error 2 "^error: command line: unknown key 'bogus_key' (transformer params; nothing submitted)$" \
    env PATH="$tmp/fakesb:$PATH" jobs/submit-train.sh "$tmp/run-typo" "$tmp/configs/r1.cfg" bogus_key=1
expect_error 2 "^error: table3 row r1: the sweep's overrides (EXTRA, .*): unknown key 'bogus_key' (transformer params; " \
    env PATH="$tmp/fakesb:$PATH" TABLE3_DIR="$tmp/configs" EXTRA=bogus_key=1 jobs/submit-table3.sh "$tmp/sw-extra"
cp "$tmp/configs/r1.cfg" "$tmp/typo.cfg" "$tmp/ctypo/"
expect_error 2 "^error: table3 row typo: $tmp/ctypo/typo.cfg:3: unknown key 'd_modle'" \
    env PATH="$tmp/fakesb:$PATH" TABLE3_DIR="$tmp/ctypo" jobs/submit-table3.sh "$tmp/sw-typo"
[ ! -e "$tmp/sbatch.calls" ] || fail "a job train refuses was submitted: $(cat "$tmp/sbatch.calls")"
expect_error 2 "^error: table3 row r1: the sweep's overrides (EXTRA, .*): unknown key 'bogus_key'" \
    env TABLE3_DIR="$tmp/configs" EXTRA=bogus_key=1 jobs/run-local.sh table3 "$tmp/sw-extra"
[ -z "$(find "$tmp/sw-extra" "$tmp/sw-typo" -mindepth 1)" ] || fail "a refused config froze: $(find "$tmp/sw-extra" "$tmp/sw-typo" -mindepth 1)"
TABLE3_DIR=$tmp/configs EXTRA=threads=1 TABLE3_CHECK_PARAMS=all BIN=$BIN \
    bash -c '. jobs/lib.sh; . jobs/table3-stages.sh; table3_prepare "$@"' - "$tmp/sw-extra" ||
    fail "the corrected start (EXTRA=threads=1) after a refused EXTRA was refused"
PATH="$tmp/fakesb:$PATH" jobs/submit-train.sh "$tmp/run-synth" "$tmp/configs/r1.cfg" > /dev/null ||
    fail "submit-train.sh refused a synthetic-data config"
grep -q 'train.sbatch' "$tmp/sbatch.calls" || fail "submit-train.sh with synthetic data did not submit"
ok "a config or override train refuses (submit-train.sh, submit-table3.sh, run-local.sh's EXTRA) is refused in one line before sbatch or a freeze"

# a refused first start freezes nothing (no configs/, rows.txt, sweep.env):
# the corrected command, with other overrides, starts the sweep.  Refused
# for its dataset (here DATA), a row name that is no row, a bad seeds.txt
# line, a layout that changes the global batch
frozen() { ls -A "$1" 2>/dev/null | grep -v '^logs$' | tr '\n' ' '; }
[ -z "$(frozen "$tmp/sw-nodata2")" ] || fail "a start refused for its DATA froze: $(frozen "$tmp/sw-nodata2")"
TABLE3_DIR=$tmp/configs DATA=synthetic STEPS=2 TABLE3_DATA_FROM=$PWD prepare "$tmp/sw-nodata2" ||
    fail "the corrected start (DATA=synthetic STEPS=2) after a refused DATA was refused"
grep -qx 'STEPS=2' "$tmp/sw-nodata2/sweep.env" || fail "the corrected start did not record STEPS=2"
expect_error 2 "^error: $tmp/configs: no row 'r1x' (rows: r1 r2)" env TABLE3_DIR="$tmp/configs" STEPS=100 "${PREP[@]}" "$tmp/sw-norow" r1x
[ -z "$(frozen "$tmp/sw-norow")" ] || fail "a start refused for a row name froze: $(frozen "$tmp/sw-norow")"
TABLE3_DIR=$tmp/configs STEPS=200 prepare "$tmp/sw-norow" r1 || fail "the corrected start after a bad row name was refused"
grep -qx 'STEPS=200' "$tmp/sw-norow/sweep.env" || fail "the corrected start did not record STEPS=200"
mkdir -p "$tmp/cseeds" && cp "$tmp/configs/r1.cfg" "$tmp/configs/r2.cfg" "$tmp/cseeds/"
printf 'r1 x\n' > "$tmp/cseeds/seeds.txt"
expect_error 2 "^error: $tmp/cseeds/seeds.txt:1: expected 'ROW N' with N from 1 to 10, got 'r1 x'" \
    env TABLE3_DIR="$tmp/cseeds" "${PREP[@]}" "$tmp/sw-seeds" r1
[ -z "$(frozen "$tmp/sw-seeds")" ] || fail "a start refused for seeds.txt froze: $(frozen "$tmp/sw-seeds")"
printf 'r1 2\n' > "$tmp/cseeds/seeds.txt"
TABLE3_DIR=$tmp/cseeds prepare "$tmp/sw-seeds" r1 || fail "the corrected start after a bad seeds.txt was refused"
[ "$(LC_ALL=C sort "$tmp/sw-seeds/rows.txt" | tr '\n' ' ')" = "r1 r1-seed2 r2 " ] || fail "rows.txt: $(cat "$tmp/sw-seeds/rows.txt")"
ok "a refused first start (DATA, row name, seeds.txt) freezes nothing; the corrected command starts the sweep"

# a first start interrupted during its checks (here in its `transformer
# params --config` of a row) leaves nothing behind: no configs/, rows.txt, sweep.env,
# nor its hidden stage SWEEP/.freeze.*; the next start works.  The start
# runs in its own process group (setsid; its shell's pid is the group's):
# Ctrl-C (SIGINT to the group; perl undoes a SIGINT ignored by a background
# caller) at run-local.sh, SIGTERM to the group (scancel, kill -- -PGID) at
# submit-table3.sh, SIGTERM to the start's shell alone, whose checks go on
mkdir -p "$tmp/stopbin"
cat > "$tmp/stopbin/transformer" <<'STOP'
#!/bin/sh
if [ "$1 $2" = "params --config" ] && [ -n "${T3_STOP:-}" ]; then
    read -r _ _ _ _ pg _ < /proc/$$/stat
    case $T3_STOP in
        *-shell) kill -s "${T3_STOP%-shell}" "$pg" ;;
        *) kill -s "$T3_STOP" -- "-$pg"; sleep 5; exit 1 ;;
    esac
fi
exec "$REAL_BIN" "$@"
STOP
chmod +x "$tmp/stopbin/transformer"
stopped() {   # stopped SIG SWEEP cmd...: the start in its own group, stopped by SIG
    local sig=$1 sw=$2 rc; shift 2
    # (the braces: without bash's "Terminated" for it)
    { setsid -w perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV or die "$ARGV[0]: $!\n"' \
        env PATH="$tmp/fakesb:$PATH" REAL_BIN="$BIN" BIN="$tmp/stopbin/transformer" T3_STOP="$sig" \
        TABLE3_DIR="$tmp/configs" "$@" > "$tmp/stopped.log" 2>&1; } 2>/dev/null && rc=0 || rc=$?
    [ "$rc" -ne 0 ] || fail "T3_STOP=$sig: the start was not stopped: $(cat "$tmp/stopped.log")"
    [ -z "$(find "$sw" -mindepth 1 -maxdepth 1 ! -name logs)" ] || fail "T3_STOP=$sig: a stopped start left: $(ls -A "$sw")"
    TABLE3_DIR=$tmp/configs STEPS=2 prepare "$sw" || fail "T3_STOP=$sig: the next start was refused"
    [ -f "$sw/rows.txt" ] && ! compgen -G "$sw/.freeze.*" > /dev/null || fail "T3_STOP=$sig: the next start: $(ls -A "$sw")"
    ok "T3_STOP=$sig: stopped (exit $rc), nothing left in $sw; the next start froze it"
}
stopped INT "$tmp/sw-int" jobs/run-local.sh table3 "$tmp/sw-int"
stopped TERM "$tmp/sw-term" jobs/submit-table3.sh "$tmp/sw-term"
stopped TERM-shell "$tmp/sw-term1" TABLE3_CHECK_PARAMS=all \
    bash -c '. jobs/lib.sh; . jobs/table3-stages.sh; table3_prepare "$@"' - "$tmp/sw-term1"
! grep -q sw-term "$tmp/sbatch.calls" || fail "a stopped start submitted: $(grep sw-term "$tmp/sbatch.calls")"
# a signal while the freeze is moved in place (here from mv itself, to
# the group) waits for the move: the sweep is frozen whole, then the start
# ends by it
mkdir -p "$tmp/stopmv"
printf '#!/bin/sh\nread -r _ _ _ _ pg _ < /proc/$$/stat\nkill -s TERM -- "-$pg"\nexec %s "$@"\n' "$(command -v mv)" > "$tmp/stopmv/mv"
chmod +x "$tmp/stopmv/mv"
{ setsid -w env PATH="$tmp/stopmv:$PATH" TABLE3_DIR="$tmp/configs" "${PREP[@]}" "$tmp/sw-mv" > "$tmp/stopped.log" 2>&1; } 2>/dev/null && rc=0 || rc=$?
[ "$rc" -eq 143 ] || fail "a start stopped during its move: exit $rc, expected 143 (SIGTERM): $(cat "$tmp/stopped.log")"
[ -f "$tmp/sw-mv/rows.txt" ] && [ -f "$tmp/sw-mv/sweep.env" ] && [ -f "$tmp/sw-mv/configs/r2.cfg" ] &&
    ! compgen -G "$tmp/sw-mv/.freeze.*" > /dev/null || fail "a start stopped during its move: $(ls -AR "$tmp/sw-mv")"
prepare "$tmp/sw-mv" || fail "the sweep frozen by a start stopped during its move was refused"
# the caller's traps are its own again after a start (run-local.sh's TERM)
TABLE3_DIR=$tmp/configs bash -c '. jobs/table3-stages.sh; trap "echo caller" TERM; t=$(trap -p)
    table3_prepare "$@"; [ "$(trap -p)" = "$t" ] || { echo "traps after the start: $(trap -p)"; exit 1; }' - "$tmp/sw-traps" ||
    fail "table3_prepare did not put the caller's traps back"
# a move stopped before rows.txt (SIGKILL): the refusal names the stage
# that holds it, and the move finished by hand starts the sweep
st=$tmp/sw-half/.freeze.AbC123
mkdir -p "$tmp/sw-half/configs" "$st"
cp "$tmp/configs/r1.cfg" "$tmp/configs/r2.cfg" "$tmp/sw-half/configs/"
printf 'r1\nr2\n' > "$st/rows.txt"
cp "$tmp/sw-traps/sweep.env" "$st/"
one_line_error 2 "^error: $tmp/sw-half: configs/ without rows.txt, which is in $st (.*): move what $st holds into $tmp/sw-half, rows.txt last, remove it and start again$" \
    env TABLE3_DIR="$tmp/configs" "${PREP[@]}" "$tmp/sw-half"
mv "$st/sweep.env" "$st/rows.txt" "$tmp/sw-half/" && rmdir "$st"
prepare "$tmp/sw-half" || fail "the sweep whose move was finished by hand was refused"
ok "a first start stopped during its checks (Ctrl-C, SIGTERM to its group or its shell) leaves nothing, during its move freezes whole; traps put back; a half-moved freeze is named"

# ---- 2: run-local.sh reports the latest run's error ------------------------
printf 'row = bad\nn_layers = 1\nd_modle = 16\n' > "$tmp/configs/bad.cfg"
rm -f "$tmp/configs/r1.cfg" "$tmp/configs/r2.cfg"
TABLE3_DIR=$tmp/configs DATA=synthetic jobs/run-local.sh table3 "$tmp/sw2" > "$tmp/run1.log" 2>&1 &&
    fail "a bad row succeeded"
grep -q "^error: table3 row bad: failed (exit 1): params: .*unknown key 'd_modle'" "$tmp/run1.log" ||
    fail "first run: no clear message: $(cat "$tmp/run1.log")"
# the row fixed one way and broken another; the log ends in a partial line
printf 'row = bad\nn_layers = 1\nn_haeds = 2\n' > "$tmp/sw2/configs/bad.cfg"
printf 'error: a partial line of a killed run' >> "$tmp/sw2/logs/local_0.out"
jobs/run-local.sh table3 "$tmp/sw2" > "$tmp/run2.log" 2>&1 && fail "the bad row succeeded the second time"
msg=$(grep '^error: table3 row bad: failed' "$tmp/run2.log")
echo "$msg" | grep -q "unknown key 'n_haeds'" || fail "second run: not the latest error: $msg"
echo "$msg" | grep -q "d_modle\|partial line" && fail "second run: reports an earlier run's error: $msg"
grep -qx 'error: a partial line of a killed run' "$tmp/sw2/logs/local_0.out" ||
    fail "the new run's output was appended to the partial line"
ok "run-local.sh table3: the latest run's error ($msg)"

# a launcher that fails in Open MPI's boxed messages (a rank killed by a
# signal; also too few slots, mpirun as root): the row's reason is the last
# box's text, not its closing row of dashes
mkdir -p "$tmp/fakempi" "$tmp/c2b"
dashes=--------------------------------------------------------------------------
cat > "$tmp/fakempi/mpirun" <<EOF
#!/bin/sh
cat >&2 <<'BOX'
$dashes
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
$dashes
$dashes
mpirun noticed that process rank 0 with PID 0 on node vm exited on signal 11 (Segmentation fault).
$dashes
BOX
exit 1
EOF
chmod +x "$tmp/fakempi/mpirun"
printf 'row = r1\nn_layers = 1\nd_model = 16\nd_ff = 32\nn_heads = 2\nd_k = 8\nd_v = 8\ndata = synthetic\n' > "$tmp/c2b/r1.cfg"
PATH=$tmp/fakempi:$PATH TABLE3_DIR=$tmp/c2b DEVICE=cpu jobs/run-local.sh table3 "$tmp/sw2b" > "$tmp/run2b.log" 2>&1 &&
    fail "a row whose launcher failed succeeded"
want="error: table3 row r1: failed (exit 1): train: mpirun noticed that process rank 0 with PID 0 on node vm exited on signal 11 (Segmentation fault). (log "
grep -qF "$want" "$tmp/run2b.log" || fail "a launcher's boxed message: not its text: $(grep '^error: table3 row' "$tmp/run2b.log")"
ok "a launcher's boxed failure: the row's reason is the message's text, not a row of dashes"

# ---- 3: PARALLEL=2 runs rows side by side; a failure is still reported -----
mkdir -p "$tmp/c3"
for r in r1 r2; do
    printf 'row = %s\nn_layers = 1\nd_model = 16\nd_ff = 32\nn_heads = 2\nd_k = 8\nd_v = 8\ndata = synthetic\nsynth_train = 64\nsynth_dev = 8\n' "$r" > "$tmp/c3/$r.cfg"
done
cp "$tmp/configs/bad.cfg" "$tmp/c3/"
expect_error 2 "^error: PARALLEL='two': not a positive integer" env PARALLEL=two jobs/run-local.sh table3 "$tmp/sw3"
# the cluster settings the scripts count with, and CLUSTER_ENV: one line
# each (not mpirun -n 0's one rank a slot, Open MPI's banner, bash's
# "unbound variable" or "No such file"), nothing started or submitted
one_line_error 2 "^error: LOCAL_RANKS='0': not a positive integer (the environment or $TOP/jobs/cluster.env)$" \
    env LOCAL_RANKS=0 jobs/run-local.sh train "$tmp/lr0" "$tmp/c3/r1.cfg"
one_line_error 2 "^error: LOCAL_RANKS='abc': not a positive integer" env LOCAL_RANKS=abc jobs/run-local.sh train "$tmp/lr0" "$tmp/c3/r1.cfg"
one_line_error 2 "^error: LOCAL_RANKS='2x': not a positive integer" env LOCAL_RANKS=2x TABLE3_DIR="$tmp/c3" jobs/run-local.sh table3 "$tmp/sw-lr"
[ ! -e "$tmp/lr0" ] && [ ! -e "$tmp/sw-lr/rows.txt" ] || fail "a refused LOCAL_RANKS started a run"
one_line_error 2 "^error: GPUS_PER_NODE='abc': not a positive integer (the environment or $TOP/jobs/cluster.env)$" \
    env PATH="$tmp/fakesb:$PATH" GPUS_PER_NODE=abc jobs/submit-train.sh "$tmp/run-g" "$tmp/c3/r1.cfg"
one_line_error 2 "^error: NODES='0': not a positive integer" env PATH="$tmp/fakesb:$PATH" NODES=0 jobs/submit-train.sh "$tmp/run-g" "$tmp/c3/r1.cfg"
one_line_error 2 "^error: $tmp/none.env: cannot read the cluster settings: no such file (CLUSTER_ENV)$" \
    env CLUSTER_ENV="$tmp/none.env" jobs/run-local.sh train "$tmp/lr0" "$tmp/c3/r1.cfg"
one_line_error 2 "^error: $tmp: cannot read the cluster settings: not a regular file (CLUSTER_ENV)$" \
    env PATH="$tmp/fakesb:$PATH" CLUSTER_ENV="$tmp" jobs/submit-train.sh "$tmp/run-g" "$tmp/c3/r1.cfg"
one_line_error 2 "^error: SIGNAL_LEAD='5m': not a positive integer (the environment or $TOP/jobs/cluster.env)$" \
    env PATH="$tmp/fakesb:$PATH" SIGNAL_LEAD=5m jobs/submit-train.sh "$tmp/run-g" "$tmp/c3/r1.cfg"
one_line_error 2 "^error: MAX_PARALLEL='0': not a positive integer" \
    env PATH="$tmp/fakesb:$PATH" MAX_PARALLEL=0 TABLE3_DIR="$tmp/c3" jobs/submit-table3.sh "$tmp/sw-mp"
[ ! -e "$tmp/lr0" ] && [ ! -e "$tmp/run-g" ] && [ ! -e "$tmp/sw-mp/rows.txt" ] || fail "a refused setting started or submitted a run"
ok "LOCAL_RANKS, GPUS_PER_NODE, NODES, SIGNAL_LEAD, MAX_PARALLEL that are no positive integer and a missing CLUSTER_ENV: one line each, nothing run"
PARALLEL=2 TABLE3_DIR=$tmp/c3 STEPS=2 EXTRA="threads=1" DEVICE=cpu jobs/run-local.sh table3 "$tmp/sw3" \
    > "$tmp/run3.log" 2>&1 && fail "PARALLEL=2: a bad row succeeded"
grep -q "^error: table3 row bad: failed (exit 1): params: .*unknown key 'd_modle'" "$tmp/run3.log" ||
    fail "PARALLEL=2: no clear message: $(cat "$tmp/run3.log")"
grep -q "^error: $tmp/sw3: rows failed: bad " "$tmp/run3.log" || fail "PARALLEL=2: no summary: $(cat "$tmp/run3.log")"
# the estimate counts the rows whose parameters it can read (only bad's fail)
grep -q "unbound variable" "$tmp/run3.log" && fail "run-local.sh table3: $(grep -m1 'unbound variable' "$tmp/run3.log")"
grep -qx "estimate: .*; no estimate for bad (params failed)" "$tmp/run3.log" ||
    fail "PARALLEL=2: the estimate should leave out only bad: $(grep '^estimate:' "$tmp/run3.log")"
for r in r1 r2; do
    grep -q "table3: row $r done" "$tmp/sw3/logs/"local_*.out || fail "PARALLEL=2: row $r not done: $(cat "$tmp/run3.log")"
done
ok "PARALLEL=2: rows r1, r2 done side by side, the bad row reported"

# ---- 3b: a PYTHON without the analysis packages: refused before training ---
printf '#!/bin/sh\necho "ModuleNotFoundError: No module named '"'"'sacremoses'"'"'" >&2\nexit 1\n' > "$tmp/nopy"
chmod +x "$tmp/nopy"
rm -f "$tmp/c3/bad.cfg"
PYTHON=$tmp/nopy TABLE3_DIR=$tmp/c3 STEPS=2 EXTRA="threads=1" DEVICE=cpu jobs/run-local.sh table3 "$tmp/sw3b" r1 \
    > "$tmp/run3b.log" 2>&1 && fail "PYTHON without sacremoses: the row succeeded"
want="error: table3: PYTHON=$tmp/nopy cannot import what a row's result needs (ModuleNotFoundError: No module named 'sacremoses')"
grep -qF "$want" "$tmp/sw3b/logs/local_0.out" || fail "no one-line reason: $(cat "$tmp/sw3b/logs/local_0.out")"
if [ -e "$tmp/sw3b/runs/r1/metrics.h5" ] || ls "$tmp/sw3b/runs/r1/"ckpt_* >/dev/null 2>&1; then
    fail "the row trained before the check: $(ls "$tmp/sw3b/runs/r1")"
fi
grep -q "^error: table3 row r1: failed (exit 2): error: table3: PYTHON=" "$tmp/run3b.log" ||
    fail "run-local.sh does not report it: $(cat "$tmp/run3b.log")"
ok "a PYTHON without sacremoses fails the row in one line before it trains"

# ---- 4: the batch layout: printed, and never changed silently ---------------
# the real row configs (batch_tokens = 25000): one GPU a row by default, one
# 25000-token micro-batch a step; MAX_TOKENS recomputes update_freq and says
# so; MAX_TOKENS or UPDATE_FREQ that would change the global batch are
# refused in one line, before anything is written; BATCH_TOKENS changes it
layout() { BIN=$BIN bash -c '. jobs/table3-stages.sh; table3_prepare "$@" && table3_print_layout' - "$@"; }
out=$(layout "$tmp/lay1" base big) || fail "layout of the default sweep failed: $out"
grep -qx 'layout: 1 GPU a row, micro-batch 25000 tokens x update_freq 1 = 25000 tokens a step (the paper: ~25000): rows base big' \
    <<< "$out" || fail "default layout not printed as expected: $out"
# by hand: base 100000 steps x 25000 tokens at the measured 694,824 tok/s
# (1.000 h) and big 300000 x 25000 at 303,571 (6.863 h): 7.9 GPU-hours
grep -qE '^estimate: 7\.9 GPU-hours of training at bf16 on H200s' <<< "$out" || fail "not base's and big's 7.9 GPU-hours: $out"
# DEVICE=cpu: lane-hours at base′'s measured lane rate, by hand: base′ and A1
# have 1,639,936 parameters each, 35400 steps of 2000 tokens at 6806 tokens/s
# = 2.889 h a run; two runs on PARALLEL=2 lanes 2.9 h
out=$(DEVICE=cpu PARALLEL=2 TABLE3_DIR=input/table3-m30k-conv layout "$tmp/layc" base A1) || fail "DEVICE=cpu layout failed: $out"
grep -q '^layout: 1 rank a row, micro-batch 2000 tokens x update_freq 1 = 2000 tokens a step' <<< "$out" ||
    fail "DEVICE=cpu: the layout should count ranks: $out"
grep -qE '^estimate: 5\.8 lane-hours of training on the CPU at train_steps .*; 2\.9 hours with PARALLEL=2 lanes$' <<< "$out" ||
    fail "DEVICE=cpu: not base′'s and A1's 2 x 2.889 lane-hours: $out"
out=$(MAX_TOKENS=6250 layout "$tmp/lay2" base) || fail "MAX_TOKENS=6250 on 1 GPU refused: $out"
grep -q 'micro-batch 6250 tokens x update_freq 4 = 25000 tokens a step.*update_freq 4 recomputed from MAX_TOKENS=6250' \
    <<< "$out" || fail "MAX_TOKENS=6250: the recomputed update_freq is not stated: $out"
expect_error 2 "^error: row base: 8 GPU(s) x max_tokens 6250 x update_freq 1 = 50000 tokens a step, not the global batch 25000 .*set BATCH_TOKENS=50000" \
    env MAX_TOKENS=6250 GPUS_PER_ROW=8 bash -c '. jobs/table3-stages.sh; table3_prepare "$@"' - "$tmp/lay3" base
[ "$(env MAX_TOKENS=6250 GPUS_PER_ROW=8 bash -c '. jobs/table3-stages.sh; table3_prepare "$@"' - "$tmp/lay3b" base 2>&1 | grep -c .)" -eq 1 ] ||
    fail "the layout refusal is not one line"
[ -z "$(ls -A "$tmp/lay3")" ] || fail "a start refused for its layout froze: $(ls "$tmp/lay3")"
expect_error 2 "^error: row base: 1 GPU(s) x max_tokens 3125 x update_freq 2 = 6250 tokens a step" \
    env UPDATE_FREQ=2 MAX_TOKENS=3125 bash -c '. jobs/table3-stages.sh; table3_prepare "$@"' - "$tmp/lay4" base
out=$(MAX_TOKENS=6250 GPUS_PER_ROW=8 BATCH_TOKENS=50000 layout "$tmp/lay5" base) || fail "BATCH_TOKENS=50000 refused: $out"
grep -q '8 GPUs a row, micro-batch 6250 tokens x update_freq 1 = 50000 tokens a step' <<< "$out" || fail "BATCH_TOKENS=50000: $out"
ok "layout: printed (1 GPU a row, 25000 tokens a step, GPU-hours; DEVICE=cpu: lane-hours by hand); MAX_TOKENS recomputes update_freq and says so; a changed global batch is refused in one line"
# a row on several nodes gets GPUS_PER_NODE ranks on each: GPUS_PER_ROW=6
# on 4-GPU nodes would train on 8 ranks, 8 x 4167 tokens a step, not the
# layout's 25000: refused in one line before a freeze or an sbatch call;
# a multiple of GPUS_PER_NODE (8: 2 nodes x 4) is submitted
rm -f "$tmp/sbatch.calls"
one_line_error 2 "^error: GPUS_PER_ROW=6: more than GPUS_PER_NODE=4 and not a multiple of it: a row would run 4 ranks on each of 2 nodes, 8 in all" \
    env PATH="$tmp/fakesb:$PATH" GPUS_PER_NODE=4 GPUS_PER_ROW=6 DATA=synthetic jobs/submit-table3.sh "$tmp/lay6" base
[ ! -e "$tmp/sbatch.calls" ] && [ -z "$(ls -A "$tmp/lay6")" ] || fail "GPUS_PER_ROW=6 on 4-GPU nodes was frozen or submitted"
PATH="$tmp/fakesb:$PATH" GPUS_PER_NODE=4 GPUS_PER_ROW=8 DATA=synthetic jobs/submit-table3.sh "$tmp/lay8" base > /dev/null ||
    fail "GPUS_PER_ROW=8 on 4-GPU nodes was refused"
grep -q -- '--nodes=2 --ntasks-per-node=4 ' "$tmp/sbatch.calls" || fail "GPUS_PER_ROW=8: not 2 nodes x 4: $(cat "$tmp/sbatch.calls")"
ok "GPUS_PER_ROW above GPUS_PER_NODE and not a multiple of it (more ranks than the layout) is refused in one line; 8 on 4-GPU nodes: 2 x 4"

# ---- 5: the jobs' precision: the fast one the GPU has, said; recorded per row --
prec() { bash -c '. jobs/lib.sh; job_precision "$@"; print_precision' - "$@"; }
for case in "9 cuda bf16" "8 cuda bf16" "7 cuda fp16" "6 cuda fp32" "9 cpu fp32"; do
    read -r cc dev want <<< "$case"
    out=$(PRECISION=auto TRANSFORMER_COMPUTE_CAP=$cc DEVICE=$dev prec) || fail "job_precision ($case) failed"
    grep -q "^precision: $want (PRECISION=auto: .*PRECISION=fp32 for the exact reference)" <<< "$out" ||
        fail "sm_$cc $dev: expected $want, got: $out"
done
out=$(PRECISION=fp32 TRANSFORMER_COMPUTE_CAP=9 DEVICE=cuda prec)
grep -q '^precision: fp32 (PRECISION=fp32' <<< "$out" || fail "PRECISION=fp32 not taken: $out"
printf 'precision = tf32\n' > "$tmp/tf32.cfg"
out=$(PRECISION=auto TRANSFORMER_COMPUTE_CAP=9 DEVICE=cuda prec "$tmp/tf32.cfg")
grep -q "^precision: the config's (PRECISION=auto: set by $tmp/tf32.cfg" <<< "$out" || fail "a config's precision was overridden: $out"
expect_error 2 "^error: PRECISION='bf32': not auto, fp32, tf32, bf16 or fp16 (jobs/cluster.env)" env PRECISION=bf32 bash -c '. jobs/lib.sh; job_precision'
grep -q '^precision: fp32 (PRECISION=auto: DEVICE=cpu' "$tmp/sw3/logs/"local_*.out || fail "the sweep's element log does not say its precision"
"${PYTHON:-$TOP/.venv/bin/python}" -c '
import sys, h5py
v = h5py.File(sys.argv[1], "r").attrs["precision"]
v = v.decode() if isinstance(v, bytes) else v
sys.exit(0 if v == "fp32" else f"r1.h5: precision {v!r}, expected fp32")' "$tmp/sw3/results/r1.h5" || fail "r1.h5 does not record fp32"
ok "precision: auto is bf16 on sm_80+, fp16 on sm_70, fp32 on the CPU; PRECISION=fp32 and a config's precision win; the row result records it"

#!/usr/bin/env bash
# A command started without mpirun or srun is an MPI singleton.  Open MPI 4
# forks an orted daemon for a singleton unless ess_singleton_isolated is
# set (0.17 against 0.07 CPU s a start; the suite starts hundreds), so
# dist_init asks for the isolated singleton:
#   - `transformer train` run alone has no orted child while it trains;
#   - OMPI_MCA_ess_singleton_isolated=0 set by the user is kept: the daemon
#     is there (which is also what shows that the first check can fail).
set -u
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
A="train_steps=100000 log_steps=1 threads=1 synth_train=100 synth_dev=20 max_tokens=256
   n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 ckpt_minutes=0"

# children ENV...: the command names of train's children, train started
# under `env ENV...` and listed after its first step; train runs until the
# SIGTERM that follows (checkpoint, exit 99), so it is alive while listed
children() {
    rm -rf "$tmp/run"
    : > "$tmp/out"     # not the last call's log, before this one truncates it
    env "$@" TRANSFORMER_STEP_SLEEP_MS=100 "$BIN" train $A run_dir="$tmp/run" > "$tmp/out" 2>&1 &
    pid=$!
    local t=$((SECONDS + 60)) rc
    until grep -q '^step 1 ' "$tmp/out" || [ $SECONDS -ge $t ]; do
        kill -0 "$pid" 2>/dev/null || fail "train ($*) ended before step 1: $(tail -n 2 "$tmp/out")"
        sleep 0.1
    done
    grep -q '^step 1 ' "$tmp/out" || fail "train ($*): no step 1 within 60 s: $(tail -n 2 "$tmp/out")"
    ps -o comm= --ppid "$pid" > "$tmp/children"
    kill -TERM "$pid"; wait "$pid"; rc=$?
    pid=""
    [ "$rc" -eq 99 ] || fail "train ($*): exit $rc after SIGTERM, expected 99 (stopped mid-run): $(tail -n 2 "$tmp/out")"
}
children -u OMPI_MCA_ess_singleton_isolated
grep -q orted "$tmp/children" && fail "train alone forked an orted: $(tr '\n' ' ' < "$tmp/children")"
ok "train alone: an isolated MPI singleton, no orted child"
children OMPI_MCA_ess_singleton_isolated=0
grep -q orted "$tmp/children" || fail "OMPI_MCA_ess_singleton_isolated=0: no orted child, the user's setting was overridden"
ok "OMPI_MCA_ess_singleton_isolated=0 kept: train has its orted child"

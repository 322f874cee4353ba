#!/usr/bin/env bash
# CPU binding under mpirun (src/dist.c dist_bind_cpu).  Open MPI 4 binds each
# rank to one core when a job has at most 2 ranks and nobody asked for a
# binding, so `mpirun -n 1 transformer train` trained on one core of the
# machine.  Checks, on a machine with at least 2 CPUs:
#   - mpirun -n 1 (that default): the rank may run on every CPU this shell
#     may (read from /proc while it trains) and trains with that many
#     threads; translate likewise;
#   - mpirun -n 2: each rank its own disjoint slice, the binding said undone;
#   - a binding the user chose is kept: mpirun --bind-to core (1 thread),
#     and taskset around mpirun (the launcher's CPUs are the limit).
set -u
. "$(dirname "$0")/lib.sh"
cd "$TOP"
mine=$(nproc)
[ "$mine" -ge 2 ] || skip "this shell may use $mine CPU; the binding needs at least 2 to be seen"
W=$(mktemp -d /tmp/test_mpi_bind.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
cd "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
unset OMPI_MCA_hwloc_base_binding_policy OMP_PLACES OMP_PROC_BIND
want=$(grep Cpus_allowed_list /proc/self/status | awk '{ print $2 }')
threads() { grep -o '[0-9]* ranks x [0-9]* threads' "$1"; }

# ---- 1 rank: every CPU of the shell, seen from /proc while it trains ---------
mpirun -n 1 "$BIN" train train_steps=3000 log_steps=1000 > "$W/one.log" 2>&1 &
pid=""
for _ in $(seq 1200); do   # up to 120 s: mpirun's start under load
    kill -0 %1 2>/dev/null || break
    pid=$(pgrep -f "^$BIN train train_steps=3000" | head -n 1)
    [ -n "$pid" ] && grep -q '^train: ' "$W/one.log" && break
    sleep 0.1
done
[ -n "$pid" ] && grep -q '^train: ' "$W/one.log" || fail "mpirun -n 1: the rank did not start: $(cat "$W/one.log")"
# the union over the rank's threads (each OpenMP thread is pinned to one CPU)
got=$(cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/^Cpus_allowed_list/ { print $2 }' | tr ',' '\n' |
      awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }' | sort -n | uniq | paste -sd,)
want=$(echo "$want" | tr ',' '\n' | awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }' | sort -n | uniq | paste -sd,)
kill %1 2>/dev/null; wait 2>/dev/null
[ "$got" = "$want" ] || fail "mpirun -n 1: the rank may run on CPUs $got, the shell on $want"
[ "$(threads "$W/one.log")" = "1 ranks x $mine threads" ] || fail "mpirun -n 1: $(threads "$W/one.log"), not $mine threads"
ok "mpirun -n 1: the rank runs on CPUs $got (the shell's) with $mine threads"

# ---- 2 ranks: disjoint slices --------------------------------------------------
mpirun -n 2 "$BIN" train train_steps=1 > "$W/two.log" 2>&1 || fail "mpirun -n 2: $(tail -n 3 "$W/two.log")"
[ "$(threads "$W/two.log")" = "2 ranks x $((mine / 2)) threads" ] || fail "mpirun -n 2: $(threads "$W/two.log")"
r0=$(sed -n 's/^rank 0: cpus \([0-9,-]*\) (own slice).*binding undone$/\1/p' "$W/two.log")
r1=$(sed -n 's/^rank 1: cpus \([0-9,-]*\) (own slice).*binding undone$/\1/p' "$W/two.log")
[ -n "$r0" ] && [ -n "$r1" ] && [ "$r0" != "$r1" ] || fail "mpirun -n 2: not two slices: $(grep '^rank' "$W/two.log")"
ok "mpirun -n 2: rank 0 on CPUs $r0, rank 1 on $r1, $((mine / 2)) threads each"

# ---- translate, 1 rank ---------------------------------------------------------
"$BIN" train train_steps=20 run_dir="$W/run" > /dev/null 2>&1 || fail "train for translate failed"
mpirun -n 1 "$BIN" translate --checkpoint "$W/run/ckpt_00000020.h5" --data synthetic --split dev \
    --output "$W/dev.txt" > "$W/tr.log" 2>&1 || fail "translate: $(tail -n 2 "$W/tr.log")"
grep -q "1 rank x $mine threads" "$W/tr.log" || fail "mpirun -n 1 translate: $(grep -o '[0-9]* ranks* x [0-9]* threads' "$W/tr.log")"
ok "mpirun -n 1 translate: $mine threads"

# ---- a binding the user chose stays -----------------------------------------
mpirun -n 1 --bind-to core "$BIN" train train_steps=1 > "$W/core.log" 2>&1 || fail "--bind-to core: $(tail -n 2 "$W/core.log")"
[ "$(threads "$W/core.log")" = "1 ranks x 1 threads" ] || fail "mpirun --bind-to core: $(threads "$W/core.log"), not 1 thread"
first=$(echo "$want" | cut -d, -f1 | cut -d- -f1)
taskset -c "$first" mpirun -n 1 "$BIN" train train_steps=1 > "$W/ts.log" 2>&1 || fail "taskset: $(tail -n 2 "$W/ts.log")"
[ "$(threads "$W/ts.log")" = "1 ranks x 1 threads" ] || fail "taskset -c $first mpirun: $(threads "$W/ts.log"), not 1 thread"
ok "kept: mpirun --bind-to core and taskset -c $first around mpirun train with 1 thread"

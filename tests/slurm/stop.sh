#!/usr/bin/env bash
# Stops the test Slurm started by tests/slurm/start.sh DIR: slurmd, then
# slurmctld, then munged, each by the PID recorded in DIR (never by name),
# and waits until they are gone.  Safe to call twice or after a failed start.
set -u
DIR=${1:?usage: tests/slurm/stop.sh DIR}
stop_pid() {   # name pidfile
    local f=$2 pid
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    # only a live process running the expected program
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "$1"; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$f"
}
# end the jobs first, so no job process outlives the daemons
if [ -s "$DIR/slurmctld.pid" ] && [ -f "$DIR/slurm.conf" ]; then
    export SLURM_CONF=$DIR/slurm.conf
    scancel --full --user="$(id -un)" 2>/dev/null
    for _ in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
fi
stop_pid slurmd "$DIR/slurmd.pid"
stop_pid slurmctld "$DIR/slurmctld.pid"
stop_pid munged "$DIR/munged.pid"
rm -f "$DIR/munge/munged.pid"
# anything still left of this cluster (slurmstepd inherits the marker that
# start.sh gave the daemons; job processes have SLURM_CONF of this cluster and
# SLURM_CLUSTER_NAME set by it): only those processes, never this shell
for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}; pid=${pid%/environ}
    [ "$pid" = $$ ] && continue
    env=$(tr '\0' '\n' 2>/dev/null < "$e") || continue
    if echo "$env" | grep -qxF "TRANSFORMER_TEST_SLURM=$DIR" ||
       { echo "$env" | grep -qxF "SLURM_CONF=$DIR/slurm.conf" &&
         echo "$env" | grep -qxF "SLURM_CLUSTER_NAME=transformer-test"; }; then
        kill -KILL "$pid" 2>/dev/null
    fi
done
exit 0

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
stop_pid slurmd "$DIR/slurmd.pid"
stop_pid slurmctld "$DIR/slurmctld.pid"
stop_pid munged "$DIR/munged.pid"
rm -f "$DIR/munge/munged.pid"
exit 0

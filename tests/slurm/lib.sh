# tests/slurm/lib.sh: what the Slurm tests share; source it after tests/lib.sh.
# SLURM_ON: the command prefix that runs a Slurm client on the test's
# cluster (an array; empty: the client here).  The helpers read the test's
# job id J and its log jlog where they say so.

# state ID: the job's state (an array's first element's)
state() { "${SLURM_ON[@]}" scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2; }
# wait_job ID TIMEOUT: until the job (every array element) has ended
wait_job() {
    local t=$((SECONDS + $2))
    while [ $SECONDS -lt $t ]; do
        "${SLURM_ON[@]}" scontrol -o show job "$1" 2>/dev/null |
            grep -qE 'JobState=(PENDING|RUNNING|REQUEUED|COMPLETING|CONFIGURING|SUSPENDED)' || return 0
        sleep 0.5
    done
    "${SLURM_ON[@]}" scontrol show job "$1" >&2
    return 1
}
# old_steps_alive: a slurmstepd of job J's previous run is still there (the
# namespace nodes of two-node.sh share this machine's process table)
old_steps_alive() { pgrep -f "slurmstepd: \[$J\." >/dev/null; }
# wait_restart N: job J was requeued; skip Slurm's requeue delay (about 2
# minutes) and wait for run N ("restart N" in jlog).  Not at once, which
# Slurm's own delay avoids: slurmd rejects a job whose new credential is from
# the same second as the revocation of its previous run's ("Job credential
# revoked"): a refused batch launch ends the job FAILED ("Killing
# non-startable batch job" in slurmctld's log; its script never runs), a
# refused step N.0 fails to launch ("aborted before step completely
# launched", after which srun may still exit 0) while the previous run's
# slurmstepd of step N.0 is still finishing (PMIx clean-up takes seconds on
# a slow VM).  So only once the job has been PENDING for 5 polls (2.5 s,
# a later second than the kill's) and no slurmstepd of its previous run is
# left.
wait_restart() {
    local t=$((SECONDS + 120)) pend=0
    while [ $SECONDS -lt $t ]; do
        if [ "$(state "$J")" = PENDING ] && ! old_steps_alive; then
            pend=$((pend + 1))
            [ $pend -ge 5 ] && "${SLURM_ON[@]}" scontrol update JobId="$J" TimeLimit=20 StartTime=now 2>/dev/null
        fi
        grep -q "restart $1 " "$jlog" 2>/dev/null && return 0
        sleep 0.5
    done
    cat "$jlog" >&2; fail "job $J: not restarted a ${1}th time (state $(state "$J"))"
}

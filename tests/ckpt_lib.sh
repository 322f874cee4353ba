# Helpers for the checkpoint tests (sourced after tests/lib.sh).
# A small model whose steps take long enough to kill a run between checkpoints.
CK_ARGS="threads=1 max_tokens=256 d_model=32 d_ff=64 n_layers=2 synth_train=2000 synth_dev=40 log_steps=5 ckpt_minutes=0"

# same_state A B: parameters and Adam moments of two checkpoints are bitwise equal
same_state() {
    local g
    for g in params adam_m adam_v; do
        h5diff -q "$1" "$2" /$g /$g >/dev/null || fail "$g differ between $1 and $2: $(h5diff -r "$1" "$2" /$g /$g | head -5)"
    done
}

# wait_file FILE PID: wait until FILE exists (or PID exits; lib.sh wait_until)
wait_file() { wait_until "$2" test -e "$1"; }

# wait_usr1_pending PID...: wait until every stopped process of PIDs has a
# SIGUSR1 pending (bit 0x200 of SigPnd or ShdPnd in /proc/PID/status).
# mpirun forwards a signal to its ranks asynchronously: under load that can
# take longer than any fixed sleep, and a rank continued before it arrives
# runs to the end and exits 0 (seen in CI)
wait_usr1_pending() {
    local i p st waiting
    for i in $(seq 1 6000); do
        waiting=0
        for p in "$@"; do
            case "$(ps -o stat= -p "$p" 2>/dev/null)" in T*) ;; *) continue ;; esac
            st=$(awk '$1 == "SigPnd:" || $1 == "ShdPnd:" { print $2 }' "/proc/$p/status" 2>/dev/null)
            local any=0 m
            for m in $st; do [ $(( 0x$m & 0x200 )) -ne 0 ] && any=1; done
            [ $any = 1 ] || waiting=1
        done
        [ $waiting = 0 ] && return 0
        sleep 0.01
    done
    return 1
}

# a Python with h5py and numpy: the analysis venv, else the system one
PY=/usr/bin/python3
[ -x "$TOP/.venv/bin/python" ] && "$TOP/.venv/bin/python" -c "import h5py, numpy" 2>/dev/null && PY=$TOP/.venv/bin/python

# wait_stopped PID...: wait until one of the processes is stopped (state T),
# as TRANSFORMER_CKPT_STOP_STEP=S makes a run once checkpoint S is in place
wait_stopped() {
    local i p
    for i in $(seq 1 6000); do
        for p in "$@"; do
            case "$(ps -o stat= -p $p 2>/dev/null)" in T*) return 0 ;; esac
        done
        sleep 0.01
    done
    return 1
}

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

# wait_file FILE PID: wait until FILE exists (or PID exits)
wait_file() {
    local i
    for i in $(seq 1 3000); do
        [ -e "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
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

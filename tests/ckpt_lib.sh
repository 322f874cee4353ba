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

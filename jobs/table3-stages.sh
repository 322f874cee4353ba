# shellcheck shell=bash
# jobs/table3-stages.sh: the stages of one Table 3 sweep element (sourced by
# jobs/table3.sbatch and jobs/run-local.sh after jobs/lib.sh).  Each stage is
# one function; table3_element runs them in order and turns the first failure
# into a result file with status "failed" and a one-line reason.
#
# Sweep-wide overrides (environment):
#   STEPS        train_steps of every row (the paper: 100000; big: 300000).
#                Below 100000 the learning-rate schedule is scaled with it
#                (table3_schedule) unless WARMUP is set
#   WARMUP       warmup of every row (eq. 3), replacing the scaled schedule
#   MAX_TOKENS   max_tokens per batch and rank
#   UPDATE_FREQ  micro-batches accumulated per step
#   BATCH_TOKENS global batch in tokens (batch_tokens: update_freq follows the ranks)
#   DATA         dataset file (or "synthetic") for training and dev evaluation
#   SHRINK       divide d_model, d_ff, d_k and d_v of every row by SHRINK
#                (keeping N, h, dropout, ...): the whole table, scaled down
#   SEEDS        train base with seeds 1..SEEDS (rows base, base-seed2, ...)
#                for the seed-to-seed spread (default 1)
#   EXTRA        further key=value overrides, space separated
#   PYTHON       interpreter for analysis/*.py (default: .venv/bin/python)
# The first submission records them in SWEEP/sweep.env; every element reads
# them from there, and a later submission that sets one to another value is
# refused (table3_prepare).

TABLE3_SWEEP_VARS="STEPS WARMUP MAX_TOKENS UPDATE_FREQ BATCH_TOKENS DATA SHRINK SEEDS EXTRA"

# the base row's training steps (Table 3): a sweep with fewer scales its schedule
PAPER_STEPS=100000

# cfg_get FILE KEY: the value of KEY in a config file ("" if absent)
cfg_get() {
    awk -v k="$2" '{ sub(/#.*/, "") } index($0, "=") {
        key = substr($0, 1, index($0, "=") - 1); val = substr($0, index($0, "=") + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", key); gsub(/^[ \t]+|[ \t]+$/, "", val)
        if (key == k) v = val } END { print v }' "$1"
}

# table3_overrides CFG: fills the array OVR with the key=value overrides
table3_overrides() {
    OVR=()
    [ -n "${STEPS:-}" ] && OVR+=("train_steps=$STEPS")
    table3_schedule "$1"
    [ -n "${MAX_TOKENS:-}" ] && OVR+=("max_tokens=$MAX_TOKENS")
    [ -n "${UPDATE_FREQ:-}" ] && OVR+=("update_freq=$UPDATE_FREQ")
    # an explicit batch size replaces the configs' global batch_tokens
    # (which would otherwise set update_freq from max_tokens)
    if [ -n "${MAX_TOKENS:-}${UPDATE_FREQ:-}" ] || [ -n "${BATCH_TOKENS:-}" ]; then
        OVR+=("batch_tokens=${BATCH_TOKENS:-0}")
    fi
    [ -n "${DATA:-}" ] && OVR+=("data=$DATA")
    if [ -n "${SHRINK:-}" ] && [ "$SHRINK" != 1 ]; then
        local k v
        for k in d_model d_ff d_k d_v; do
            v=$(cfg_get "$1" "$k")
            [ -n "$v" ] && OVR+=("$k=$(( v / SHRINK > 0 ? v / SHRINK : 1 ))")
        done
    fi
    local w
    # shellcheck disable=SC2086
    for w in ${EXTRA:-}; do OVR+=("$w"); done
}

# table3_schedule CFG: appends the learning-rate schedule of a scaled-down
# run to OVR.  A run of STEPS < PAPER_STEPS steps warms up over a fifth of its
# steps and peaks at the paper's rate for the row's d_model (eq. 3 with
# warmup 4000: lr_factor x sqrt(warmup / 4000)), then decays as eq. 3 does.
# Why not the paper's 4% of the steps: Post-LN Transformers need a minimum
# number of warmup updates, not a fraction (Xiong et al. 2020).  Measured on
# Multi30k (docs/results-multi30k.md): base at SHRINK=8 warmed up over 48 or
# 120 steps sat at dev PPL ~170-200 for 1200 steps; over 600 steps it left
# that plateau by step 750.  Left alone (warmup 4000), a 3000-step run never
# leaves warmup.  WARMUP=N sets the warmup instead (lr_factor stays).
table3_schedule() {
    if [ -n "${WARMUP:-}" ]; then OVR+=("warmup=$WARMUP"); return 0; fi
    [ -n "${STEPS:-}" ] && [ "$STEPS" -lt "$PAPER_STEPS" ] || return 0
    local w f
    w=$(cfg_get "$1" warmup); f=$(cfg_get "$1" lr_factor)
    read -r w f < <(awk -v s="$STEPS" -v w0="${w:-4000}" -v f="${f:-1}" \
        'BEGIN { w = int(s / 5 + 0.5); if (w < 1) w = 1; printf "%d %.6g\n", w, f * sqrt(w / w0) }')
    OVR+=("warmup=$w" "lr_factor=$f")
}

table3_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
    elif [ -x "$TRANSFORMER_HOME/.venv/bin/python" ]; then echo "$TRANSFORMER_HOME/.venv/bin/python"
    else echo python3; fi
}

# has_command NAME: the transformer binary has the command NAME
has_command() { "$BIN" --help 2>/dev/null | awk '{ print $1 }' | grep -qx "$1"; }

# run_logged NAME CMD...: run_stage CMD with stdout and stderr also copied to
# $RUN/NAME.out and $RUN/NAME.err (the element log keeps the live output)
run_logged() {
    local name=$1; shift
    local out="$RUN/$name.out" err="$RUN/$name.err" p1 p2 rc
    : > "$out"; : > "$err"
    exec 3> >(tee -a "$out"); p1=$!
    exec 4> >(tee -a "$err" >&2); p2=$!
    run_stage "$@" >&3 2>&4
    rc=$?
    exec 3>&- 4>&-
    while kill -0 "$p1" 2>/dev/null || kill -0 "$p2" 2>/dev/null; do sleep 0.05; done
    return "$rc"
}

# the first "error: ..." line of a stage's stderr (else its last line)
stage_message() {
    local m
    m=$(grep -m1 '^error:' "$RUN/$1.err" 2>/dev/null)
    [ -n "$m" ] || m=$(grep -v '^srun: ' "$RUN/$1.err" 2>/dev/null | tail -n 1)
    echo "${m:-exit code $2, no message}"
}

stage_params() {
    local out
    if ! out=$("$BIN" params --config "$CFG" "${OVR[@]}" 2>"$RUN/params.err"); then
        cat "$RUN/params.err" >&2
        FAIL_MSG="params: $(stage_message params 2)"
        return 1
    fi
    PARAMS=$(echo "$out" | awk '$1 == "params" { print $2; exit }')
    echo "table3: $ROW: $PARAMS parameters"
}

stage_train() {
    local t0=$SECONDS rc
    run_logged train "$BIN" train --config "$CFG" run_dir="$RUN" device="$DEVICE" "${OVR[@]}"
    rc=$?
    if preempted "$rc"; then requeue_self; fi
    if [ "$rc" -ne 0 ]; then FAIL_MSG="train: $(stage_message train "$rc")"; return 1; fi
    TRAIN_WALL=$((SECONDS - t0))
}

# newest checkpoint of the run (Table 3: no checkpoint averaging)
stage_checkpoint() {
    CKPT=$(ls "$RUN"/ckpt_*.h5 2>/dev/null | sort -V | tail -n 1)
    [ -n "$CKPT" ] || { FAIL_MSG="train: no checkpoint in $RUN"; return 1; }
    echo "table3: $ROW: evaluating $CKPT"
}

# the dataset of the run ("synthetic" or a dataset file)
row_data() { echo "${DATA:-$(cfg_get "$CFG" data)}"; }

# key=value overrides that eval/translate accept (the architecture comes from
# the checkpoint): device, precision, threads, max_tokens
eval_overrides() {
    EVO=("device=$DEVICE")
    local o
    for o in "${OVR[@]}"; do
        case ${o%%=*} in threads|precision|max_tokens|beam|len_alpha|max_len_a) EVO+=("$o") ;; esac
    done
}

# dev per-wordpiece perplexity (unsmoothed NLL) of the checkpoint
stage_eval() {
    local rc data
    data=$(row_data)
    if [ "$data" = synthetic ]; then
        # `eval` reads dataset files only; train evaluated the same final
        # parameters on the synthetic dev split (RUN/metrics.h5, /dev/ppl)
        echo "table3: $ROW: synthetic data: dev PPL from train's final evaluation ($RUN/metrics.h5)"
        return 0
    fi
    eval_overrides
    run_logged eval "$BIN" eval --checkpoint "$CKPT" --data "$data" --split dev "${EVO[@]}"
    rc=$?
    if preempted "$rc"; then requeue_self; fi
    [ "$rc" -eq 0 ] || { FAIL_MSG="eval: $(stage_message eval "$rc")"; return 1; }
    DEV_PPL=$(awk '$1 == "eval" { for (i = 2; i < NF; i++) if ($i == "ppl") v = $(i + 1) } END { print v }' "$RUN/eval.out")
    [ -n "$DEV_PPL" ] || { FAIL_MSG="eval: no 'ppl' in its output ($RUN/eval.out)"; return 1; }
    echo "table3: $ROW: dev ppl $DEV_PPL"
}

# dev translations by beam search (config keys beam, len_alpha, max_len_a:
# the paper's 4, 0.6, 50) and their references; row_result.py scores them
# with analysis/bleu.py: sacreBLEU (13a) and tokenised BLEU (multi-bleu.perl
# on Moses tokens, the paper's kind)
stage_bleu() {
    local rc data py
    data=$(row_data)
    if [ "$data" = synthetic ]; then
        echo "table3: $ROW: synthetic data: no BLEU"
        return 0
    fi
    if ! has_command translate; then
        echo "table3: $ROW: dev BLEU not measured (this build has no translate command)"
        return 0
    fi
    eval_overrides
    run_logged translate "$BIN" translate --checkpoint "$CKPT" --data "$data" --split dev \
        --output "$RUN/dev.hyp" "${EVO[@]}"
    rc=$?
    if preempted "$rc"; then requeue_self; fi
    [ "$rc" -eq 0 ] || { FAIL_MSG="translate: $(stage_message translate "$rc")"; return 1; }
    # references: DEV_REF, else the dev split's target files named in the
    # dataset, else its target ids decoded (normalised text, docs/dataset.md)
    py=$(table3_python)
    if [ -n "${DEV_REF:-}" ]; then
        cp "$DEV_REF" "$RUN/dev.ref" || { FAIL_MSG="$DEV_REF: cannot read the dev references"; return 1; }
    elif ! "$py" - "$data" "$RUN/dev.ref" <<'PY'
import os, sys, h5py
f = h5py.File(sys.argv[1], "r")
g = f["splits/dev"]
files = [x.decode() if isinstance(x, bytes) else str(x) for x in g.attrs.get("tgt_files", [])]
lines = []
if files and all(os.path.isfile(p) for p in files):
    for p in files:
        with open(p, encoding="utf-8") as r:
            lines += [l.rstrip("\n") for l in r]
else:
    pieces = [p.decode() if isinstance(p, bytes) else p for p in f["vocab/pieces"][:]]
    o, ids = g["tgt_offsets"][:], g["tgt_ids"][:]
    lines = ["".join(pieces[i] for i in ids[o[k]:o[k + 1]]).replace("\u2581", " ").strip() for k in range(len(o) - 1)]
with open(sys.argv[2], "w", encoding="utf-8") as w:
    w.writelines(l + "\n" for l in lines)
PY
    then
        FAIL_MSG="$data: cannot read the dev references"; return 1
    fi
    HYP=$RUN/dev.hyp REF=$RUN/dev.ref
    if [ -f "$TRANSFORMER_HOME/analysis/bleu.py" ]; then
        "$py" "$TRANSFORMER_HOME/analysis/bleu.py" "$HYP" "$REF" || true
    fi
}

# write SWEEP/results/<row>.h5 (docs/results.md); STATUS done or failed
stage_result() {
    local status=$1 args=() o py
    py=$(table3_python)
    args=(--out "$SWEEP/results/$ROW.h5" --row "$ROW" --config "$CFG" --status "$status")
    for o in "${OVR[@]}"; do args+=(--set "$o"); done
    [ -n "${PARAMS:-}" ] && args+=(--params "$PARAMS")
    [ -f "$RUN/metrics.h5" ] && args+=(--metrics "$RUN/metrics.h5")
    [ -n "${DEV_PPL:-}" ] && args+=(--dev-ppl "$DEV_PPL")
    [ -n "${HYP:-}" ] && [ "$status" = "done" ] && args+=(--hyp "$HYP" --ref "$REF")
    [ -n "${TRAIN_WALL:-}" ] && [ ! -f "$RUN/metrics.h5" ] && args+=(--wall "$TRAIN_WALL")
    [ "$status" = failed ] && args+=(--message "$FAIL_MSG")
    "$py" "$TRANSFORMER_HOME/analysis/row_result.py" "${args[@]}"
}

# table3_element SWEEP INDEX: run row INDEX (0-based line of SWEEP/rows.txt)
table3_element() {
    SWEEP=$(cd "$1" && pwd); local index=$2
    ROW=$(sed -n "$((index + 1))p" "$SWEEP/rows.txt")
    [ -n "$ROW" ] || { echo "error: $SWEEP/rows.txt: no row with index $index" >&2; exit 2; }
    CFG=$SWEEP/configs/$ROW.cfg
    RUN=$SWEEP/runs/$ROW
    mkdir -p "$RUN" "$SWEEP/results"
    [ -f "$SWEEP/sweep.env" ] && . "$SWEEP/sweep.env"
    table3_overrides "$CFG"
    PARAMS="" DEV_PPL="" HYP="" REF="" TRAIN_WALL="" CKPT="" FAIL_MSG=""
    echo "table3: row $ROW (index $index) job ${SLURM_JOB_ID:-local} restart ${SLURM_RESTART_COUNT:-0}" \
         "on ${SLURM_JOB_NODELIST:-$(hostname -s)}: $CFG ${OVR[*]}"
    local stage
    for stage in params train checkpoint eval bleu; do
        if ! "stage_$stage"; then
            echo "error: table3 row $ROW: $FAIL_MSG" >&2
            stage_result failed || echo "error: $SWEEP/results/$ROW.h5: could not record the failure" >&2
            exit 1
        fi
    done
    stage_result "done" || { echo "error: $SWEEP/results/$ROW.h5: cannot write the row result" >&2; exit 1; }
    echo "table3: row $ROW done: $SWEEP/results/$ROW.h5"
}

# table3_prepare SWEEP [ROW ...]: on first use, freeze TABLE3_DIR/*.cfg into
# SWEEP/configs, the row order into SWEEP/rows.txt and the overrides into
# SWEEP/sweep.env; then set SWEEP (absolute) and the array IDX to the 0-based
# indices of the ROWs (default: all rows).  Exits 2 with a one-line error.
table3_prepare() {
    mkdir -p "$1" || { echo "error: $1: cannot create the sweep directory" >&2; exit 2; }
    SWEEP=$(cd "$1" && pwd); shift
    local dir=${TABLE3_DIR:-$TRANSFORMER_HOME/input/table3} c v r i found
    if [ ! -f "$SWEEP/rows.txt" ]; then
        local cfgs=()
        for c in "$dir"/*.cfg; do [ -f "$c" ] && cfgs+=("$c"); done
        [ ${#cfgs[@]} -gt 0 ] || { echo "error: $dir: no *.cfg row configs" >&2; exit 2; }
        table3_check_vars
        if [ "${SEEDS:-1}" -gt 1 ] && [ ! -f "$dir/base.cfg" ]; then
            echo "error: SEEDS=$SEEDS: no base.cfg among the row configs ($dir)" >&2; exit 2
        fi
        mkdir -p "$SWEEP/configs"
        cp "${cfgs[@]}" "$SWEEP/configs/"
        table3_seed_rows
        for c in "$SWEEP"/configs/*.cfg; do basename "$c" .cfg; done > "$SWEEP/rows.txt.tmp"
        {
            echo "# overrides of this sweep (written $(date -u +%FT%TZ); read by every element)"
            for v in $TABLE3_SWEEP_VARS; do printf '%s=%q\n' "$v" "${!v:-}"; done
        } > "$SWEEP/sweep.env"
        mv "$SWEEP/rows.txt.tmp" "$SWEEP/rows.txt"
    fi
    mkdir -p "$SWEEP/logs" "$SWEEP/results" "$SWEEP/runs"
    mapfile -t ROWS < "$SWEEP/rows.txt"
    IDX=()
    if [ $# -eq 0 ]; then
        for i in "${!ROWS[@]}"; do IDX+=("$i"); done
    fi
    for r in "$@"; do
        found=""
        for i in "${!ROWS[@]}"; do [ "${ROWS[$i]}" = "$r" ] && found=$i; done
        [ -n "$found" ] || { echo "error: $SWEEP/rows.txt: no row '$r' (rows: ${ROWS[*]})" >&2; exit 2; }
        IDX+=("$found")
    done
    table3_same_overrides
}

# table3_check_vars: exit 2 with one line if a numeric override is not a
# positive integer (before anything is written)
table3_check_vars() {
    local v
    for v in STEPS WARMUP MAX_TOKENS UPDATE_FREQ SHRINK SEEDS; do
        case ${!v:-} in
            "") ;;
            *[!0-9]* | 0*) echo "error: $v='${!v}': not a positive integer" >&2; exit 2 ;;
        esac
    done
    if [ "${SEEDS:-1}" -gt 10 ]; then echo "error: SEEDS=$SEEDS: at most 10 seeds of base" >&2; exit 2; fi
}

# table3_seed_rows: SEEDS=N adds rows base-seed2 .. base-seedN to
# SWEEP/configs: base with seed = 2 .. N (the seed of data order, dropout and
# initialisation), for the seed-to-seed spread that the other rows' differences
# from base are read against (docs/results-multi30k.md)
table3_seed_rows() {
    local base=$SWEEP/configs/base.cfg s
    [ "${SEEDS:-1}" -gt 1 ] || return 0
    for ((s = 2; s <= SEEDS; s++)); do
        { grep -v -E '^[[:space:]]*(row|seed)[[:space:]]*=' "$base"
          echo "# SEEDS=$SEEDS: base with another seed"
          echo "row = base-seed$s"
          echo "seed = $s"; } > "$SWEEP/configs/base-seed$s.cfg"
    done
}

# table3_same_overrides: exit 2 if an override set in the environment differs
# from the one SWEEP/sweep.env recorded: the rows' run_dirs hold runs of the
# recorded settings (a resumed row would mix them) and the table compares rows
# of one setting.  Unset means "the sweep's".  Names the first selected row
# that has started (else the first selected row).
table3_same_overrides() {
    [ -f "$SWEEP/sweep.env" ] || return 0
    local line v old row=${ROWS[${IDX[0]}]} i
    for i in "${IDX[@]}"; do
        if [ -n "$(ls -A "$SWEEP/runs/${ROWS[$i]}" 2>/dev/null)" ]; then row=${ROWS[$i]}; break; fi
    done
    while IFS= read -r -d '' line; do
        v=${line%%=*}; old=${line#*=}
        if [ -n "${!v:-}" ] && [ "${!v}" != "$old" ]; then
            echo "error: $SWEEP: row $row: $v='${!v}' differs from this sweep's $v='$old' ($SWEEP/sweep.env); unset $v to resubmit with the sweep's settings, or use a new SWEEP_DIR" >&2
            exit 2
        fi
    done < <(
        # shellcheck disable=SC2086
        unset $TABLE3_SWEEP_VARS
        . "$SWEEP/sweep.env"
        for v in $TABLE3_SWEEP_VARS; do printf '%s=%s\0' "$v" "${!v:-}"; done
    )
}

# shellcheck shell=bash
# jobs/table3-stages.sh: the stages of one Table 3 sweep element (sourced by
# jobs/table3.sbatch and jobs/run-local.sh after jobs/lib.sh).  Each stage is
# one function; table3_row runs them in order (params, train, checkpoint,
# eval, average, bleu: dev with the final checkpoint, every held-out split
# with the final checkpoint and the average of the last 5) and turns the
# first failure into a result file with status "failed" and a one-line
# reason; then the attention stage writes the run's attention summary,
# SWEEP/attention/<row>.h5 (docs/attention.md).  table3_element runs a row,
# skips it if it finished earlier (its result file, committed or kept, is
# enough; a missing attention summary is written then from the run's
# checkpoint, where it is still there), and reruns once, with seed + 100, a
# row whose curve failed (docs/results.md; rerun_config).
#
# Row configs: TABLE3_DIR/*.cfg (default input/table3); TABLE3_DIR/seeds.txt
# ("ROW N" lines) adds rows ROW-seed2 .. ROW-seedN.
#
# Sweep-wide overrides (environment):
#   STEPS        train_steps of every row (the paper: 100000; big: 300000).
#                Below 100000 the learning-rate schedule is scaled with it
#                (table3_schedule) unless WARMUP is set
#   WARMUP       warmup of every row (eq. 3), replacing the scaled schedule
#   GPUS_PER_ROW ranks (GPUs) of each row (default 1; jobs/run-local.sh:
#                LOCAL_RANKS); the batch layout: table3_layout
#   MAX_TOKENS   max_tokens per micro-batch and rank (default: the global
#                batch / GPUS_PER_ROW); update_freq is recomputed, and said
#   UPDATE_FREQ  micro-batches accumulated per step
#   BATCH_TOKENS global batch in tokens (default: the rows' batch_tokens);
#                the only override that changes it
#   DATA         dataset file (or "synthetic") for training and dev evaluation
#   SHRINK       divide d_model, d_ff, d_k and d_v of every row by SHRINK
#                (keeping N, h, dropout, ...): the whole table, scaled down
#   SEEDS        train base with seeds 1..SEEDS (rows base, base-seed2, ...)
#                for the seed-to-seed spread (default 1)
#   EXTRA        further key=value overrides, space separated, passed unfiltered:
#                e.g. the stopping rule and schedule of a converged sweep (issue 42),
#                EXTRA="eval_steps=100 patience=10 patience_delta=0.001 keep_best=1
#                lr_decay=cosine lr_final=1e-5" (docs/training.md)
#   PYTHON       interpreter for analysis/*.py (default: .venv/bin/python)
#   TABLE3_RERUN 0: no rerun of a row whose curve failed (default 1)
#   TABLE3_REDO  1: run rows again that finished earlier (default 0)
#   TABLE3_CAP_CONTINUE  how many times a row with patience that reaches its
#                train_steps is continued with train_steps raised by half
#                (default 2; 0: never; cap_continue)
#   ATTN_SAMPLE  dev pairs of the attention stage (default 200), spread evenly
#                over the split: the same pairs for every row and seed
#   ATTN_ALIGN   silver word links of the dev split (analysis/silver_align.py;
#                Multi30k's: docs/results-multi30k/silver-align-dev.h5): the
#                summaries then carry the AER of the cross-attention heads
# The first submission records them in SWEEP/sweep.env; every element reads
# them from there, and a later submission that sets one to another value is
# refused (table3_prepare).

TABLE3_SWEEP_VARS="STEPS WARMUP MAX_TOKENS UPDATE_FREQ BATCH_TOKENS GPUS_PER_ROW DATA SHRINK SEEDS EXTRA ATTN_SAMPLE ATTN_ALIGN"

# the base row's training steps (Table 3): a sweep with fewer scales its schedule
PAPER_STEPS=100000

# cfg_get FILE KEY: the value of KEY in a config file ("" if absent)
cfg_get() {
    awk -v k="$2" '{ sub(/#.*/, "") } index($0, "=") {
        key = substr($0, 1, index($0, "=") - 1); val = substr($0, index($0, "=") + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", key); gsub(/^[ \t]+|[ \t]+$/, "", val)
        if (key == k) v = val } END { print v }' "$1"
}

# effective KEY of the row: its last override, else its config's value
row_key() {
    local o v
    v=$(cfg_get "$CFG" "$1")
    for o in "${OVR[@]}"; do [ "${o%%=*}" = "$1" ] && v=${o#*=}; done
    echo "$v"
}

# table3_overrides CFG: fills the array OVR with the key=value overrides
table3_overrides() {
    OVR=()
    [ -n "${STEPS:-}" ] && OVR+=("train_steps=$STEPS")
    table3_schedule "$1"
    table3_layout "$1" || return 1
    OVR+=("${LAYOUT_OVR[@]}")
    # the job's precision (job_precision, jobs/lib.sh; set in elements only)
    [ -n "${JOB_PRECISION:-}" ] && OVR+=("precision=$JOB_PRECISION")
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

# table3_layout CFG: the row's batch layout, by this rule (docs/jobs.md):
#   GPUs per row  R = GPUS_PER_ROW (default 1: every measured step is one
#                 GPU's, docs/performance.md)
#   global batch  G = BATCH_TOKENS, else the row's batch_tokens (the paper's
#                 ~25000 target tokens)
#   micro-batch   M = MAX_TOKENS, else G / R: one micro-batch a GPU and step,
#                 the shape measured (25,010-token steps on one H200)
#   update_freq   U = UPDATE_FREQ, else ceil(G / (R x M))
# A layout whose step (R x M x U tokens) misses G by more than a quarter is
# refused (LAYOUT_ERR): MAX_TOKENS or UPDATE_FREQ never change the global
# batch silently; BATCH_TOKENS does, by name.  A row without batch_tokens
# keeps its own max_tokens and update_freq.  Sets LAYOUT_R, LAYOUT_M,
# LAYOUT_U, LAYOUT_STEP (tokens a step), LAYOUT_NOTE, and LAYOUT_OVR (the
# overrides that make the trainer use it); returns 1 on a refusal.
table3_layout() {
    local r=${GPUS_PER_ROW:-1} g m u cm
    g=${BATCH_TOKENS:-$(cfg_get "$1" batch_tokens)}; g=${g:-0}
    cm=$(cfg_get "$1" max_tokens); cm=${cm:-2048}   # train's default max_tokens
    LAYOUT_OVR=() LAYOUT_NOTE="" LAYOUT_ERR="" LAYOUT_R=$r
    if [ -n "${UPDATE_FREQ:-}" ]; then
        u=$UPDATE_FREQ
        if [ "$g" -gt 0 ]; then m=${MAX_TOKENS:-$(( (g + r * u - 1) / (r * u) ))}; else m=${MAX_TOKENS:-$cm}; fi
        LAYOUT_OVR=("max_tokens=$m" "update_freq=$u" "batch_tokens=0")
    elif [ "$g" -gt 0 ]; then
        m=${MAX_TOKENS:-$(( (g + r - 1) / r ))}
        u=$(( (g + r * m - 1) / (r * m) ))
        LAYOUT_OVR=("max_tokens=$m" "batch_tokens=$g")
        [ -n "${MAX_TOKENS:-}" ] && LAYOUT_NOTE="update_freq $u recomputed from MAX_TOKENS=$m to keep the global batch"
    else
        m=${MAX_TOKENS:-$cm}; u=$(cfg_get "$1" update_freq); u=${u:-1}
        [ -n "${MAX_TOKENS:-}" ] && LAYOUT_OVR=("max_tokens=$m")
    fi
    LAYOUT_M=$m LAYOUT_U=$u LAYOUT_STEP=$((r * m * u))
    [ "$g" -gt 0 ] || return 0
    if [ "$LAYOUT_STEP" -gt $((g + g / 4)) ] || [ "$LAYOUT_STEP" -lt $((g - g / 4)) ]; then
        LAYOUT_ERR="row $(basename "$1" .cfg): $r GPU(s) x max_tokens $m x update_freq $u = $LAYOUT_STEP tokens a step, not the global batch $g"
        LAYOUT_ERR+=" (${BATCH_TOKENS:+BATCH_TOKENS}${BATCH_TOKENS:-batch_tokens of $1}): set BATCH_TOKENS=$LAYOUT_STEP to change the global batch, or unset MAX_TOKENS/UPDATE_FREQ"
        return 1
    fi
}

# the measured bf16 training rates on one H200 at 25,010-token steps
# (docs/performance.md, tests/gpu/calibration/cf63d2a-h200/kit-call1.md):
# base (63,045,632 parameters) 694,824 tok/s, big (214,171,648) 303,571
MEASURED_RATES="63045632 694824 214171648 303571"
# the measured CPU rate of one lane (one rank, threads=1, two lanes side by
# side on the 2-core VM): base′ (1,639,936 parameters, 2000-token steps) of
# the converged sweep, 141,000,000 target tokens in 20,717 s of training over
# its three seeds, 0.294 s a step (docs/results-multi30k.md, "Compute")
MEASURED_CPU_RATE="1639936 6806"

# table3_row_hours PARAMS STEPS TOKENS: hours of training for a row of PARAMS
# parameters, STEPS steps of TOKENS target tokens.  On a GPU (DEVICE=cuda,
# the default) at the rate of a power law through base's and big's measured
# rates; on the CPU (DEVICE=cpu) at base′'s measured lane rate times
# base′'s parameters / PARAMS (a CPU step is bound by its FLOPs, ~6 x
# parameters a token)
table3_row_hours() {
    if [ "${DEVICE:-cuda}" = cpu ]; then
        awk -v p="$1" -v s="$2" -v t="$3" -v r="$MEASURED_CPU_RATE" 'BEGIN {
            split(r, m, " "); printf "%.6f", s * t / (m[2] * m[1] / p) / 3600 }'
    else
        awk -v p="$1" -v s="$2" -v t="$3" -v r="$MEASURED_RATES" 'BEGIN {
            split(r, m, " "); a = log(m[4] / m[2]) / log(m[1] / m[3])
            printf "%.6f", s * t / (m[2] * (m[1] / p) ^ a) / 3600 }'
    fi
}

# table3_print_layout: one line per distinct layout of the selected rows
# (GPUs per row, micro-batch tokens, update_freq, tokens a step against the
# paper's ~25000), and the sweep's estimated hours of training from the
# measured step: each row's steps x tokens a step at the rate of its
# parameter count (table3_row_hours): GPU-hours on the GPUs of the row at no
# loss to communication (a lower bound), or with DEVICE=cpu lane-hours
table3_print_layout() {
    local i i2 cfg key p steps seen=() rows=() n gpuh total=0 missing="" unit=GPU
    [ "${DEVICE:-cuda}" = cpu ] && unit=rank
    for i in "${IDX[@]}"; do
        cfg=$SWEEP/configs/${ROWS[$i]}.cfg
        table3_overrides "$cfg" || return 1
        CFG=$cfg
        key="$LAYOUT_R $unit$([ "$LAYOUT_R" = 1 ] || echo s) a row, micro-batch $LAYOUT_M tokens x update_freq $LAYOUT_U = $LAYOUT_STEP tokens a step (the paper: ~25000)${LAYOUT_NOTE:+; $LAYOUT_NOTE}"
        n=""
        for i2 in "${!seen[@]}"; do [ "${seen[$i2]}" = "$key" ] && n=$i2; done
        if [ -z "$n" ]; then seen+=("$key"); rows+=("${ROWS[$i]}"); else rows[$n]+=" ${ROWS[$i]}"; fi
        p=$("$BIN" params --config "$cfg" "${OVR[@]}" 2>/dev/null | awk '$1 == "params" { print $2; exit }')
        steps=$(row_key train_steps); steps=${steps:-2000}
        if [ -z "$p" ]; then missing+=" ${ROWS[$i]}"; continue; fi
        gpuh=$(table3_row_hours "$p" "$steps" "$LAYOUT_STEP")
        total=$(awk -v a="$total" -v b="$gpuh" 'BEGIN { printf "%.6f", a + b }')
    done
    for n in "${!seen[@]}"; do
        echo "layout: ${seen[$n]}: rows ${rows[$n]}"
    done
    if [ "${DEVICE:-cuda}" = cpu ]; then
        awk -v t="$total" -v m="$missing" -v n="${PARALLEL:-}" -v r="$MEASURED_CPU_RATE" 'BEGIN {
            split(r, rate, " ")
            printf "estimate: %.1f lane-hours of training on the CPU at train_steps (a run that stops by patience takes fewer; base′ measured at %d tokens/s a lane, one rank with threads=1, scaled by parameters; evaluations and decoding on top)%s%s\n",
                t, rate[2], n == "" ? "" : sprintf("; %.1f hours with PARALLEL=%d lanes", t / n, n),
                m == "" ? "" : "; no estimate for" m " (params failed)" }'
        return 0
    fi
    awk -v t="$total" -v m="$missing" -v p="${PRECISION:-auto}" 'BEGIN {
        printf "estimate: %.1f GPU-hours of training at bf16 on H200s, a lower bound (base and big measured at 25,010-token steps, docs/performance.md, scaled by parameters; a small model'"'"'s short steps are launch-bound; PRECISION=%s; fp32 is 6-8x slower, other GPUs differ)%s\n",
            t, p, m == "" ? "" : "; no estimate for" m " (params failed)" }'
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

# table3_python_check: the interpreter that writes a row's result file,
# BLEU and attention summary imports what they need; checked before the row
# trains, so a wrong PYTHON costs seconds, not a run whose result is lost
table3_python_check() {
    local py err
    py=$(table3_python)
    # (sacreBLEU and sacremoses found, not imported: their import was 0.6 s
    # of each row's check; they are pure Python, what is missing is the usual fault)
    err=$("$py" -c 'import importlib.util, h5py, numpy
for m in ("sacrebleu", "sacremoses"):
    if importlib.util.find_spec(m) is None:
        raise SystemExit(f"ModuleNotFoundError: No module named {m!r}")' 2>&1 | tail -n 1) && return 0
    echo "error: table3: PYTHON=$py cannot import what a row's result needs (${err:-it does not run}): set PYTHON to an interpreter with analysis/requirements.txt (make venv: .venv/bin/python)" >&2
    return 1
}

# has_command NAME: the transformer binary has the command NAME
has_command() { grep -qx "$1" < <("$BIN" --help 2>/dev/null | awk '{ print $1 }'); }

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

# the first "error: ..." line of a stage's stderr; else, where the launcher
# failed, the first paragraph of its last boxed message, joined into one line
# (Open MPI frames "not enough slots", "run as root", "exited on signal 11"
# between rows of dashes: the last line, a row of dashes, said nothing);
# else its last line
stage_message() {
    local m
    m=$(grep -m1 '^error:' "$RUN/$1.err" 2>/dev/null)
    [ -n "$m" ] || m=$(awk '/^----------+$/ { box = !box; if (box) { p = ""; done = 0 } else if (p != "") m = p; next }
                            box && !done { if (NF) { sub(/^[ \t]+/, ""); p = p (p == "" ? "" : " ") $0 }
                                           else if (p != "") done = 1 }
                            END { print m }' "$RUN/$1.err" 2>/dev/null)
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

# the checkpoint the row is reported with: the best dev checkpoint where
# the run kept one (keep_best=1: a run stopped by patience, issue 42; its
# "final" hypothesis sets are then the best checkpoint's), else the newest
# (Table 3: no checkpoint averaging)
stage_checkpoint() {
    CKPT=$(ls "$RUN"/ckpt_*.h5 2>/dev/null | sort -V | tail -n 1)
    [ -n "$CKPT" ] || { FAIL_MSG="train: no checkpoint in $RUN"; return 1; }
    REPORTED=final
    if [ -e "$RUN/best.h5" ]; then CKPT=$RUN/best.h5 REPORTED=best; fi
    echo "table3: $ROW: evaluating $CKPT ($REPORTED)"
}

# the dataset of the run ("synthetic" or a dataset file): as train takes
# it, the last data= of the row's overrides (DATA, EXTRA), else its config's
# (CFG and OVR: the row's, table3_overrides)
row_data() { row_key data; }

# key=value overrides that eval/translate accept (the architecture comes from
# the checkpoint): device, precision, threads, max_tokens
eval_overrides() {
    EVO=("device=$DEVICE")
    local k v
    # the row's own values (config, then overrides): a row trained with
    # threads=1 beside another must not decode with every core's threads
    for k in threads precision max_tokens beam len_alpha max_len_a; do
        v=$(row_key "$k")
        [ -n "$v" ] && EVO+=("$k=$v")
    done
}

# dev per-wordpiece perplexity (unsmoothed NLL) of the checkpoint
stage_eval() {
    local rc data
    data=$(row_data)
    if [ "$data" = synthetic ]; then
        # train evaluated the same final parameters on the synthetic dev
        # split (RUN/metrics.h5, /dev/ppl): no second evaluation
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

# the held-out splits: every split of the dataset but train and dev
# (Multi30k: test2016, test2017), in the dataset's order
heldout_splits() {
    "$(table3_python)" -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(" ".join(s for s in f["splits"] if s not in ("train", "dev")))' "$1"
}

# translate_set NAME CKPT SPLIT: beam search (config keys beam, len_alpha,
# max_len_a: the paper's 4, 0.6, 50) of SPLIT with CKPT into RUN/NAME.hyp,
# the split's references into RUN/NAME.ref (detokenised, `translate
# --reference`); adds the pair to HYPSETS for row_result.py, which scores
# it (sacreBLEU 13a and tokenised BLEU, analysis/bleu.py) and keeps the lines
# for the paired bootstrap of analysis/table3.py
translate_set() {
    local name=$1 ckpt=$2 split=$3 rc
    eval_overrides
    run_logged "translate-$name" "$BIN" translate --checkpoint "$ckpt" --data "$(row_data)" --split "$split" \
        --output "$RUN/$name.hyp" --reference "$RUN/$name.ref" "${EVO[@]}"
    rc=$?
    if preempted "$rc"; then requeue_self; fi
    [ "$rc" -eq 0 ] || { FAIL_MSG="translate $name: $(stage_message "translate-$name" "$rc")"; return 1; }
    HYPSETS+=(--hyp-set "$name" "$RUN/$name.hyp" "$RUN/$name.ref")
}

# The sweep's checkpoint average: the last TABLE3_AVERAGE checkpoints of
# every row alike (section 6.1's base-model average), so that the rows'
# averaged columns compare; big's keep_ckpts = 20 (Table 2's average) is for
# standalone runs.  The hypothesis sets and RUN/avg5.h5 are named for it.
TABLE3_AVERAGE=5

# the average of the last TABLE3_AVERAGE checkpoints into RUN/avg5.h5, the
# last ones up to the best one where the run kept it (stage_checkpoint); AVG
# stays empty when the run kept fewer (a row too short for it)
stage_average() {
    local upto=()
    AVG=""
    [ "$(row_data)" = synthetic ] && return 0
    [ "$REPORTED" = best ] && upto=(--upto-best)
    if "$BIN" average --output "$RUN/avg5.h5" --last "$TABLE3_AVERAGE" "${upto[@]}" "$RUN" > "$RUN/average.out" 2> "$RUN/average.err"; then
        AVG=$RUN/avg5.h5
    else
        echo "table3: $ROW: no checkpoint average: $(stage_message average 2)"
    fi
}

# dev translations of the final checkpoint (the table's dev BLEU, Table 3's
# "unaveraged"), and every held-out split with the final checkpoint and the
# average: settings are chosen on dev only, test sets are only reported
stage_bleu() {
    local data split t0=$SECONDS
    data=$(row_data)
    HYPSETS=()
    if [ "$data" = synthetic ]; then echo "table3: $ROW: synthetic data: no BLEU"; return 0; fi
    if ! has_command translate; then
        echo "table3: $ROW: BLEU not measured (this build has no translate command)"; return 0
    fi
    translate_set dev.final "$CKPT" dev || return 1
    for split in $(heldout_splits "$data"); do
        translate_set "$split.final" "$CKPT" "$split" || return 1
        if [ -n "$AVG" ]; then translate_set "$split.avg5" "$AVG" "$split" || return 1; fi
    done
    DECODE_WALL=$((SECONDS - t0))
}

# the compute of the row, for the table (--compute KEY=VALUE of row_result.py,
# and --data: the epoch size and the unigram plateau come from the dataset)
row_compute() {
    local cpu dev
    cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
    dev=$DEVICE
    if [ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null; then
        dev=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    fi
    COMPUTE=(--compute "host_cpu=${cpu:-unknown}" --compute "threads=$(row_key threads)"
             --compute "ranks=${SLURM_NTASKS:-${LOCAL_RANKS:-1}}" --compute "device=${dev:-$DEVICE}")
    # the metrics log's elapsed time spans every resume and requeue; this
    # invocation's TRAIN_WALL is the training time only without one
    [ -n "${TRAIN_WALL:-}" ] && [ ! -f "$RUN/metrics.h5" ] && COMPUTE+=(--compute "wall_seconds=$TRAIN_WALL")
    [ -n "${DECODE_WALL:-}" ] && COMPUTE+=(--compute "eval_seconds=$DECODE_WALL")
    [ -n "${REPORTED:-}" ] && COMPUTE+=(--compute "reported_checkpoint=$REPORTED")
    [ "$(row_data)" != synthetic ] && COMPUTE+=(--data "$(row_data)")
    return 0
}

# the learning-rate rule of the row, in words, and its peak rate (unknown
# where the config does not say: train's defaults are not repeated here);
# with lr_decay linear or cosine the decay to lr_final, and with patience
# the stopping rule (docs/training.md)
row_schedule() {
    local w f p d decay tail=""
    w=$(row_key warmup); f=$(row_key lr_factor); p=$(row_key lr_peak); d=$(row_key d_model); decay=$(row_key lr_decay)
    SCHED=()
    [ -n "$w" ] && SCHED+=(--compute "warmup=$w")
    case $decay in linear | cosine)
        tail=", then $decay decay to lr_final $(row_key lr_final) at step $(row_key train_steps)" ;;
    esac
    if [ -n "$(row_key patience)" ] && [ "$(row_key patience)" != 0 ]; then
        tail+="; early stopping: patience $(row_key patience) dev evaluations every $(row_key eval_steps) steps,"
        tail+=" patience_delta $(row_key patience_delta) nats"
    fi
    if [ -n "$p" ] && awk -v p="$p" 'BEGIN { exit !(p > 0) }'; then
        SCHED+=(--compute "lr_rule=eq. 3 shape, lr_peak $p for every row, warmup $w updates$tail" --compute "peak_lr=$p")
    elif [ -n "$w" ] && [ -n "$d" ]; then
        p=$(awk -v f="${f:-1}" -v d="$d" -v w="$w" 'BEGIN { printf "%.4g", f / sqrt(d) / sqrt(w) }')
        SCHED+=(--compute "lr_rule=eq. 3, lr_factor ${f:-1} (peak d_model^-0.5 warmup^-0.5 lr_factor), warmup $w updates$tail"
                --compute "peak_lr=$p")
    fi
}

# The attention of the run (docs/attention.md, "Attention of a sweep's
# runs"): the maps of ATTN_SAMPLE dev pairs spread evenly over the split
# (`attention --sample`: the same pairs for every row and seed) from the
# checkpoint the row's dev NLL is measured with (stage_checkpoint: the
# final one, or the best where the run kept it), into
# RUN/attention.h5 (float32, ~29 MB for base: kept with the checkpoints), and
# their per-head statistics into SWEEP/attention/<row>.h5 (~25 KB: committed
# with the results); with ATTN_ALIGN, the summary also has the AER of the
# cross-attention heads against those links (computed here: the maps are
# not committed).  Both are written through a temporary and renamed; the
# result file is not touched.  Returns 1 after one line naming the file.
stage_attention() {
    local out=$SWEEP/attention/$ROW.h5 full=$RUN/attention.h5 rc align=()
    [ -n "${ATTN_ALIGN:-}" ] && align=(--align "$ATTN_ALIGN")
    if ! has_command attention; then echo "table3: $ROW: no attention (this build has no attention command)"; return 0; fi
    mkdir -p "$SWEEP/attention"
    run_logged attention "$BIN" attention --checkpoint "$CKPT" --data "$(row_data)" --split dev \
        --sample "${ATTN_SAMPLE:-200}" --output "$full"
    rc=$?
    if preempted "$rc"; then requeue_self; fi
    [ "$rc" -eq 0 ] || { attention_failed "$full" attention "$rc"; return 1; }
    "$(table3_python)" "$TRANSFORMER_HOME/analysis/attention.py" summary "$full" --out "$out" --run "$ROW" \
        "${align[@]}" > "$RUN/attention-summary.out" 2> "$RUN/attention-summary.err" ||
        { attention_failed "$out" attention-summary 1; return 1; }
    echo "table3: $ROW: attention of ${ATTN_SAMPLE:-200} dev pairs (at most): $full, summary $out"
}

# attention_failed FILE STAGE RC: the stage's one line, naming FILE unless
# the program's own message starts with it
attention_failed() {
    local msg
    msg=$(stage_message "$2" "$3"); msg=${msg#error: }
    case $msg in "$1"*) ;; *) msg="$1: $msg" ;; esac
    echo "error: table3 row $ROW: attention: $msg" >&2
}

# row_attention ROW: a finished run without its attention summary (it ran
# before the attention stage existed, or the stage failed) gets one from its
# reported checkpoint (stage_checkpoint), if the run directory still has it
row_attention() {
    ROW=$1 RUN=$SWEEP/runs/$1 CFG=$SWEEP/configs/$1.cfg
    [ -f "$SWEEP/attention/$ROW.h5" ] && return 0
    row_state "$ROW"
    [ "$RS_STATUS" = done ] || return 0
    if ! stage_checkpoint >/dev/null; then
        echo "table3: row $ROW: no attention summary and no checkpoint in $RUN to make one from"; return 0
    fi
    table3_overrides "$CFG"
    stage_attention
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
    [ "$status" = "done" ] && args+=("${HYPSETS[@]}")
    [ -n "${TRAIN_WALL:-}" ] && [ ! -f "$RUN/metrics.h5" ] && args+=(--wall "$TRAIN_WALL")
    [ "$status" = failed ] && args+=(--message "$FAIL_MSG")
    row_compute; row_schedule
    "$py" "$TRANSFORMER_HOME/analysis/row_result.py" "${args[@]}" "${COMPUTE[@]}" "${SCHED[@]}"
}

# table3_row ROW: the stages of one row, then its result file; returns 1
# on a failed stage (after recording it in the result file)
table3_row() {
    ROW=$1 CFG=$SWEEP/configs/$1.cfg RUN=$SWEEP/runs/$1
    mkdir -p "$RUN" "$SWEEP/results"
    PARAMS="" FAIL_MSG=""
    job_precision "$CFG"
    print_precision
    if ! table3_overrides "$CFG"; then
        FAIL_MSG="layout: $LAYOUT_ERR"
        echo "error: table3 row $ROW: $FAIL_MSG" >&2
        stage_result failed || echo "error: $SWEEP/results/$ROW.h5: could not record the failure" >&2
        return 1
    fi
    PARAMS="" DEV_PPL="" TRAIN_WALL="" DECODE_WALL="" CKPT="" REPORTED="" AVG="" FAIL_MSG="" HYPSETS=()
    echo "table3: row $ROW job ${SLURM_JOB_ID:-local} restart ${SLURM_RESTART_COUNT:-0}" \
         "on ${SLURM_JOB_NODELIST:-$(hostname -s)}: $CFG ${OVR[*]}"
    local stage
    for stage in params train checkpoint eval average bleu; do
        if ! "stage_$stage"; then
            echo "error: table3 row $ROW: $FAIL_MSG" >&2
            stage_result failed || echo "error: $SWEEP/results/$ROW.h5: could not record the failure" >&2
            return 1
        fi
    done
    stage_result "done" || { echo "error: $SWEEP/results/$ROW.h5: cannot write the row result" >&2; return 1; }
    echo "table3: row $ROW done: $SWEEP/results/$ROW.h5"
    # after the result: a failed attention stage leaves the row's result
    # done (a resubmission skips the row and only writes the attention)
    stage_attention
}

# row_state ROW: what ROW's result file says, in RS_STATUS (done, failed,
# pending), RS_STOPPED_BY, RS_TRAIN_STEPS and RS_VERDICT ('VERDICT reason':
# healthy, diverged, stuck, unstable; docs/results.md); empty where the file
# or the field is missing.  One start of Python (row_result.py --state) per
# version of the file, not one per field: a row's checks ask up to six
# fields in turn.  Call it directly, not in $(...), which would lose the
# cache.  (A rewritten result file is a new inode: row_result.py renames.)
_RS_KEY=""
row_state() {
    local f=$SWEEP/results/$1.h5 key line
    key="$f $(stat -c '%d %i %s %Y' "$f" 2>/dev/null)"
    [ "$key" = "$_RS_KEY" ] && return 0
    RS_STATUS="" RS_STOPPED_BY="" RS_TRAIN_STEPS="" RS_VERDICT="" _RS_KEY=$key
    [ -f "$f" ] || return 0
    line=$("$(table3_python)" "$TRANSFORMER_HOME/analysis/row_result.py" --state "$f" 2>/dev/null) || return 0
    read -r RS_STATUS RS_STOPPED_BY RS_TRAIN_STEPS RS_VERDICT <<< "$line"
    [ "$RS_STATUS" = - ] && RS_STATUS=""
    [ "$RS_STOPPED_BY" = - ] && RS_STOPPED_BY=""
    [ "$RS_TRAIN_STEPS" = - ] && RS_TRAIN_STEPS=""
    [ "$RS_VERDICT" = - ] && RS_VERDICT=""
    return 0
}

# row_verdict ROW: prints RS_VERDICT of ROW; exit 1 where there is none
row_verdict() {
    row_state "$1"
    [ -n "$RS_VERDICT" ] && echo "$RS_VERDICT"
}

# row_finished ROW: ROW has a result file of status done, or its curve
# failed and its rerun has one; a sweep run again (another session, another
# allocation) skips it: results are kept, checkpoints need not be.  Not a
# result of fewer steps than the frozen config now asks (row_cut_short)
row_finished() {
    if row_curve_failed "$1"; then
        row_state "$1-rerun"
        [ "$RS_STATUS" = done ]
    else
        row_state "$1"
        [ "${TABLE3_REDO:-0}" != 1 ] && [ "$RS_STATUS" = done ] && ! row_cut_short "$1"
    fi
}

# row_cut_short ROW: ROW's result is of a run that stopped at its
# train_steps, fewer than its frozen config (with the sweep's overrides)
# asks now: a continuation (cap_continue) was stopped (a preemption, a
# time limit) before its new cap, and resumes instead of being skipped.
# (CFG and OVR are its own: the caller's are left as they were)
row_cut_short() {
    local steps CFG OVR
    row_state "$1"
    [ "$RS_STOPPED_BY" = train_steps ] || return 1
    CFG=$SWEEP/configs/$1.cfg
    table3_overrides "$CFG" || return 1
    steps=$(row_key train_steps)
    [ -n "$steps" ] && [ "$RS_TRAIN_STEPS" -lt "$steps" ] 2>/dev/null
}

# row_curve_failed ROW: ROW has a result file whose curve failed (diverged,
# stuck, unstable), so only its rerun is left to run (TABLE3_REDO=1: not)
row_curve_failed() {
    [ "${TABLE3_REDO:-0}" = 1 ] && return 1
    [ -f "$SWEEP/results/$1.h5" ] || return 1
    row_state "$1"
    case $RS_VERDICT in diverged* | stuck* | unstable*) return 0 ;; esac
    return 1
}

# cap_continue ROW: the converged protocol's rule for a run that reaches its
# step cap without a patience stop (docs/results-multi30k/converged/
# protocol.md): flagged not converged, and continued from its checkpoints
# with train_steps raised by half, keeping its name, seed and pairs (eq. 3's
# rate does not depend on train_steps, and a resumed run is bitwise the
# uninterrupted one).  Raises train_steps in the frozen config, which records
# how the run ran, with a comment line saying so, and returns 0; returns 1
# where the run stopped otherwise, its curve failed (diverged, stuck,
# unstable: rerun instead), it has no patience, takes its steps from an
# override (STEPS, EXTRA), or was continued TABLE3_CAP_CONTINUE times
# (default 2) already.  (CFG and OVR: the row's, as table3_row left them.)
cap_continue() {
    local cfg=$SWEEP/configs/$1.cfg steps every n new
    [ "$(row_key patience)" -gt 0 ] 2>/dev/null && [ "$(row_key train_steps)" = "$(cfg_get "$cfg" train_steps)" ] ||
        return 1
    row_state "$1"
    [ "$RS_STOPPED_BY" = train_steps ] || return 1
    case $RS_VERDICT in healthy*) ;; *) return 1 ;; esac   # a failed curve is rerun instead
    steps=$(cfg_get "$cfg" train_steps) every=$(cfg_get "$cfg" eval_steps)
    [ "${every:-0}" -gt 0 ] 2>/dev/null || every=1
    n=$(grep -c '^# continued at the cap' "$cfg")
    if [ "$n" -ge "${TABLE3_CAP_CONTINUE:-2}" ]; then
        echo "table3: row $1: at its cap of $steps updates after $n continuations: left flagged not converged"
        return 1
    fi
    new=$(( (steps * 3 / 2 + every - 1) / every * every ))
    awk -v old="$steps" -v new="$new" -v when="$(date -u +%FT%TZ)" '
        /^[ \t]*train_steps[ \t]*=/ { print "# continued at the cap: train_steps " old " -> " new " (" when ", protocol: a run at the cap)"
                                       print "train_steps = " new; next } { print }' "$cfg" > "$cfg.tmp" &&
        mv "$cfg.tmp" "$cfg" || { echo "error: $cfg: cannot raise train_steps" >&2; return 1; }
    echo "table3: row $1: reached its cap of $steps updates without a patience stop: continued to $new"
}

# rerun_config ROW: SWEEP/configs/ROW-rerun.cfg, ROW with seed s + 100.
# Not s + 1: under matched seeds (the converged protocol) seed s + 1 is
# every row's next run, so the rerun would share base's seed-(s+1) data
# order and initialisation; s + 100 is a seed no row uses, and the analysis
# pairs the rerun with base's seed s, marked unmatched (compare.pair_seed)
RERUN_SEED_OFFSET=100
rerun_config() {
    local seed
    seed=$(cfg_get "$SWEEP/configs/$1.cfg" seed)
    { grep -v -E '^[[:space:]]*(row|seed)[[:space:]]*=' "$SWEEP/configs/$1.cfg"
      echo "# rerun of $1 with seed + $RERUN_SEED_OFFSET: its first run's curve failed (docs/results.md)"
      echo "row = $1-rerun"
      echo "seed = $(( ${seed:-1} + RERUN_SEED_OFFSET ))"; } > "$SWEEP/configs/$1-rerun.cfg"
}

# table3_element SWEEP INDEX: run row INDEX (0-based line of SWEEP/rows.txt).
# A row whose curve failed (diverged, also when training stopped on a
# non-finite loss; stuck; unstable: docs/results.md) is run once more with
# seed + 100 as row ROW-rerun, by policy; both results are kept and shown.
# Exits 1 if the row failed otherwise, or its rerun failed too.
table3_element() {
    SWEEP=$(cd "$1" && pwd); local index=$2 row verdict rc
    row=$(sed -n "$((index + 1))p" "$SWEEP/rows.txt")
    [ -n "$row" ] || { echo "error: $SWEEP/rows.txt: no row with index $index" >&2; exit 2; }
    [ -f "$SWEEP/sweep.env" ] && . "$SWEEP/sweep.env"
    # a finished row is skipped, unless it stopped at its cap and is continued
    # (cap_continue: a sweep run again with TABLE3_CAP_CONTINUE raised, or one
    # whose first run predates the rule)
    if row_finished "$row" && ! { CFG=$SWEEP/configs/$row.cfg; table3_overrides "$CFG" && cap_continue "$row"; }; then
        echo "table3: row $row: finished earlier ($SWEEP/results/$row.h5; TABLE3_REDO=1 runs it again)"
        row_attention "$row" || exit 1
        if [ -f "$SWEEP/results/$row-rerun.h5" ]; then row_attention "$row-rerun" || exit 1; fi
        return 0
    fi
    table3_python_check || exit 2
    if row_curve_failed "$row"; then
        # its rerun was stopped (a requeue, a resubmission): the row's own
        # stages are not run again, only the rerun continues
        verdict=$(row_verdict "$row")
        echo "table3: row $row: its curve failed earlier: $verdict ($SWEEP/results/$row.h5; TABLE3_REDO=1 runs it again)"
        row_attention "$row" || exit 1
    else
        table3_row "$row"; rc=$?
        while [ "$rc" -eq 0 ] && cap_continue "$row"; do table3_row "$row"; rc=$?; done
        # no verdict where no curve was logged (a row that failed before training)
        verdict=$(row_verdict "$row" 2>/dev/null) && echo "table3: row $row: $verdict"
    fi
    case $verdict in
        diverged* | stuck* | unstable*) ;;
        *) [ "$rc" -eq 0 ] || exit 1; return 0 ;;
    esac
    case $row in *-rerun) exit 1 ;; esac
    if [ "${TABLE3_RERUN:-1}" != 1 ]; then
        echo "error: table3 row $row: its curve failed: $verdict (TABLE3_RERUN=0: no rerun)" >&2; exit 1
    fi
    echo "table3: row $row failed its curve check: rerun with seed + $RERUN_SEED_OFFSET as $row-rerun"
    rerun_config "$row"
    table3_row "$row-rerun" || exit 1
    verdict=$(row_verdict "$row-rerun") || exit 1
    echo "table3: row $row-rerun: $verdict"
    case $verdict in
        healthy*) return 0 ;;
        *) echo "error: table3 row $row: its curve failed, and so did its rerun's: $verdict" >&2; exit 1 ;;
    esac
}

# The freeze of a first start (table3_prepare) is built and checked in a
# hidden stage folder, SWEEP/.freeze.XXXXXX, then moved in place by one mv,
# rows.txt last (it marks a complete freeze).  A SIGINT, SIGTERM or SIGHUP
# during the checks removes the stage and ends the start by that signal:
# nothing is frozen, and the same command starts afresh.  During the move it
# waits (mv runs with them ignored) and is then taken as the caller takes
# it, with the sweep frozen.  The caller's traps (jobs/lib.sh's TERM in
# run-local.sh; none where this file is sourced alone) are put back after.
T3_FREEZE_SIGNALS="INT TERM HUP"
_T3_STAGE="" _T3_TRAPS="" _T3_CAUGHT=""
_t3_traps_restore() {
    # shellcheck disable=SC2086
    trap - $T3_FREEZE_SIGNALS
    eval "$_T3_TRAPS"
}
_t3_freeze_abort() {   # the trap during the checks: SIG
    rm -rf "$_T3_STAGE"
    trap - "$1"
    kill -s "$1" "$BASHPID"
    exit $((128 + $(kill -l "$1")))   # SIG ignored since this shell started
}

# table3_freeze_left SWEEP: the stage of an interrupted move that still holds
# its rows.txt, if any (named by the refusal of configs/ without rows.txt)
table3_freeze_left() {
    local st
    for st in "$1"/.freeze.*; do
        [ -f "$st/rows.txt" ] && { echo "$st"; return 0; }
    done
    return 1
}

# table3_prepare SWEEP [ROW ...]: on first use, freeze TABLE3_DIR/*.cfg into
# SWEEP/configs, the row order into SWEEP/rows.txt and the overrides into
# SWEEP/sweep.env; then set SWEEP (absolute) and the array IDX to the 0-based
# indices of the ROWs (default: all rows).  Exits 2 with a one-line error.
# Everything is checked before the freeze: the overrides, seeds.txt, the ROW
# names, the rows' layouts and (TABLE3_DATA_FROM=DIR, relative paths from
# DIR) their datasets, and (TABLE3_CHECK_PARAMS, table3_check_params) their
# configs with the overrides; a refused first start writes nothing but SWEEP itself, so the
# corrected command starts the sweep afresh; so does one interrupted before
# its freeze is in place (SIGINT, SIGTERM, SIGHUP: see above).  A frozen sweep runs the same
# checks on its frozen state, and refuses an override set to another value
# (table3_same_overrides).
table3_prepare() {
    mkdir -p "$1" || { echo "error: $1: cannot create the sweep directory" >&2; exit 2; }
    SWEEP=$(cd "$1" && pwd); shift
    local dir=${TABLE3_DIR:-$TRANSFORMER_HOME/input/table3} c v stage fresh=""
    if [ ! -f "$SWEEP/rows.txt" ] && compgen -G "$SWEEP/configs/*.cfg" > /dev/null; then
        # the frozen configs record how the runs ran: never copied over
        if stage=$(table3_freeze_left "$SWEEP"); then
            echo "error: $SWEEP: configs/ without rows.txt, which is in $stage (a start stopped while it moved its freeze in place): move what $stage holds into $SWEEP, rows.txt last, remove it and start again" >&2
        else
            echo "error: $SWEEP: configs/ without rows.txt (its rows.txt lost, or not a sweep directory): restore rows.txt or use a new SWEEP_DIR" >&2
        fi
        exit 2
    fi
    if [ ! -f "$SWEEP/rows.txt" ]; then
        fresh=1
        local cfgs=()
        for c in "$dir"/*.cfg; do [ -f "$c" ] && cfgs+=("$c"); done
        [ ${#cfgs[@]} -gt 0 ] || { echo "error: $dir: no *.cfg row configs" >&2; exit 2; }
        table3_check_vars
        : "${GPUS_PER_ROW:=${TABLE3_RANKS:-1}}"   # recorded: the layout depends on it
        if [ "${SEEDS:-1}" -gt 1 ] && [ ! -f "$dir/base.cfg" ]; then
            echo "error: SEEDS=$SEEDS: no base.cfg among the row configs ($dir)" >&2; exit 2
        fi
        # the frozen state is built in a hidden folder of SWEEP and checked
        # in a subshell (whose refusals exit it with 2); only then moved in.
        # Interrupted before the move, the start leaves nothing (see above)
        # shellcheck disable=SC2086
        _T3_TRAPS=$(trap -p $T3_FREEZE_SIGNALS) _T3_STAGE="" _T3_CAUGHT=""
        for v in $T3_FREEZE_SIGNALS; do trap "_t3_freeze_abort $v" "$v"; done
        stage=$(mktemp -d "$SWEEP/.freeze.XXXXXX") || { echo "error: $SWEEP: cannot write the sweep directory" >&2; exit 2; }
        _T3_STAGE=$stage
        if ! (
            mkdir "$stage/configs" && cp "${cfgs[@]}" "$stage/configs/" ||
                { echo "error: $SWEEP: cannot copy the row configs of $dir into it" >&2; exit 2; }
            table3_seed_rows "$dir" "$stage/configs"
            mapfile -t ROWS < <(for c in "$stage"/configs/*.cfg; do basename "$c" .cfg; done)
            table3_select "$dir" "$@"
            # the checks read (and name) the configs of TABLE3_DIR
            T3_SRC=$dir table3_check_rows
            printf '%s\n' "${ROWS[@]}" > "$stage/rows.txt" &&
            {
                echo "# overrides of this sweep (written $(date -u +%FT%TZ); read by every element)"
                for v in $TABLE3_SWEEP_VARS; do printf '%s=%q\n' "$v" "${!v:-}"; done
            } > "$stage/sweep.env" || { echo "error: $SWEEP: cannot write the sweep's rows.txt and sweep.env" >&2; exit 2; }
        ); then
            rm -rf "$stage"
            exit 2
        fi
        # one mv, rows.txt last (it marks a complete freeze), with the
        # signals ignored: one that comes now is recorded and taken after it
        for v in $T3_FREEZE_SIGNALS; do trap "_T3_CAUGHT=$v" "$v"; done
        if ! (
            # shellcheck disable=SC2086
            trap '' $T3_FREEZE_SIGNALS
            # configs/ by one rename where SWEEP has none (or an empty one)
            if rmdir "$SWEEP/configs" 2>/dev/null || [ ! -e "$SWEEP/configs" ]; then
                exec mv "$stage/configs" "$stage/sweep.env" "$stage/rows.txt" "$SWEEP/"
            fi
            # a configs/ that holds other files (*.cfg ones are refused above)
            mv "$stage"/configs/*.cfg "$SWEEP/configs/" && exec mv "$stage/sweep.env" "$stage/rows.txt" "$SWEEP/"
        ); then
            _t3_traps_restore
            echo "error: $SWEEP: cannot freeze the sweep (from $stage)" >&2; exit 2
        fi
        rm -rf "$stage"
        _T3_STAGE=""
        _t3_traps_restore
        if [ -n "$_T3_CAUGHT" ]; then kill -s "$_T3_CAUGHT" "$BASHPID"; fi
    fi
    mapfile -t ROWS < "$SWEEP/rows.txt"
    table3_select "$SWEEP/rows.txt" "$@"
    if [ -z "$fresh" ]; then
        table3_same_overrides
        # unset overrides take the sweep's values (set ones equal them)
        . "$SWEEP/sweep.env"
        table3_check_rows
    else
        . "$SWEEP/sweep.env"   # checked above, with the values it recorded
    fi
    mkdir -p "$SWEEP/logs" "$SWEEP/results" "$SWEEP/runs" ||
        { echo "error: $SWEEP: cannot create logs/, results/ and runs/ in it" >&2; exit 2; }
}

# table3_select WHERE [ROW ...]: IDX, the indices in ROWS of the ROWs (all
# without any); exit 2 with one line naming WHERE for a ROW that is not one
table3_select() {
    local where=$1 r i found; shift
    IDX=()
    if [ $# -eq 0 ]; then
        for i in "${!ROWS[@]}"; do IDX+=("$i"); done
    fi
    for r in "$@"; do
        found=""
        for i in "${!ROWS[@]}"; do [ "${ROWS[$i]}" = "$r" ] && found=$i; done
        [ -n "$found" ] || { echo "error: $where: no row '$r' (rows: ${ROWS[*]})" >&2; exit 2; }
        IDX+=("$found")
    done
}

# table3_row_cfg ROW: the config the checks read for ROW: its frozen one,
# or before the freeze (T3_SRC, the TABLE3_DIR) the one it is made from:
# ROW.cfg, for a seed row ROW-seedN ROW.cfg (it differs only in its row
# and seed lines)
table3_row_cfg() {
    if [ -z "${T3_SRC:-}" ]; then echo "$SWEEP/configs/$1.cfg"
    elif [ -f "$T3_SRC/$1.cfg" ]; then echo "$T3_SRC/$1.cfg"
    else echo "$T3_SRC/${1%-seed*}.cfg"; fi
}

# table3_check_rows: the checks of the selected rows (IDX) before anything
# is frozen, run or submitted: layouts, with TABLE3_DATA_FROM=DIR datasets,
# with TABLE3_CHECK_PARAMS configs and overrides
table3_check_rows() {
    table3_check_layouts
    if [ -n "${TABLE3_NODE_GPUS:-}" ]; then table3_check_nodes "$TABLE3_NODE_GPUS"; fi
    if [ -n "${TABLE3_DATA_FROM:-}" ]; then table3_check_data "$TABLE3_DATA_FROM"; table3_check_align "$TABLE3_DATA_FROM"; fi
    if [ -n "${TABLE3_CHECK_PARAMS:-}" ]; then table3_check_params; fi
    return 0
}

# table3_check_params: exit 2 with one line if `transformer params` (BIN;
# config_refusal, jobs/lib.sh) refuses a selected row's config with the
# sweep's overrides, as its training would.  TABLE3_CHECK_PARAMS=all
# (jobs/submit-table3.sh: else the element fails after its queue wait);
# =overrides only where the row's config alone passes, i.e. where the
# sweep's overrides (EXTRA, ...), which would be frozen, are at fault
# (jobs/run-local.sh: a row whose own config is bad fails in its params
# stage, and its frozen config can be fixed and the row rerun).
table3_check_params() {
    local i cfg why seen=" "
    for i in "${IDX[@]}"; do
        cfg=$(table3_row_cfg "${ROWS[$i]}")
        case $seen in *" $cfg "*) continue ;; esac   # a seed row's source: once
        seen+="$cfg "
        table3_overrides "$cfg" || continue            # its layout: refused before
        why=$(config_refusal "$cfg" device="${DEVICE:-cuda}" "${OVR[@]}") && continue
        if [ "$TABLE3_CHECK_PARAMS" = overrides ] && ! config_refusal "$cfg" > /dev/null; then continue; fi
        why=${why/#command line:/the sweep\'s overrides (EXTRA, STEPS, DATA, SHRINK, layout):}
        echo "error: table3 row ${ROWS[$i]}: $why (transformer params; nothing frozen, run or submitted)" >&2
        exit 2
    done
}

# table3_check_data DIR: exit 2 with one line if a selected row's dataset
# (DATA, else its config's data) is not a file, relative paths taken from
# DIR, where the rows run (Slurm: TRANSFORMER_HOME; run-local.sh: here);
# else every row would fail at its start, on a cluster after its wait in
# the queue.  "synthetic" and a config without data are train's to judge.
table3_check_data() {
    local i d from
    for i in "${IDX[@]}"; do
        CFG=$(table3_row_cfg "${ROWS[$i]}")
        table3_overrides "$CFG" || continue    # its layout: refused before
        d=$(row_data)
        case $d in "" | synthetic) continue ;; /*) ;; *) d=$1/$d ;; esac
        [ -f "$d" ] && continue
        from="from row ${ROWS[$i]}'s config"
        [ -n "${DATA:-}" ] && from="from DATA"
        case " ${EXTRA:-} " in *" data="*) from="from EXTRA" ;; esac
        echo "error: $d: no such dataset file ($from; input/prepare.sh makes one)" >&2
        exit 2
    done
}

# table3_check_nodes N: exit 2 with one line unless a row of GPUS_PER_ROW
# ranks fills whole nodes of N GPUs (submit-table3.sh: GPUS_PER_NODE): a
# row on several nodes gets N ranks on each, more than its layout counts,
# and would train a bigger global batch than its config says
table3_check_nodes() {
    local r=${GPUS_PER_ROW:-1} n=$1
    [ "$r" -le "$n" ] || [ $((r % n)) -eq 0 ] && return 0
    echo "error: GPUS_PER_ROW=$r: more than GPUS_PER_NODE=$n and not a multiple of it: a row would run $n ranks on each of $(( (r + n - 1) / n )) nodes, $(( (r + n - 1) / n * n )) in all, and train a bigger batch than its layout (use a multiple of $n)" >&2
    exit 2
}

# table3_check_align DIR: exit 2 with one line if ATTN_ALIGN is set and not
# a file, relative paths taken from DIR (as table3_check_data): else every
# row would train and then fail its attention stage, and the corrected
# ATTN_ALIGN be refused as another setting than the frozen sweep's
table3_check_align() {
    local a=${ATTN_ALIGN:-}
    case $a in "") return 0 ;; /*) ;; *) a=$1/$a ;; esac
    [ -f "$a" ] && return 0
    echo "error: $a: no such file (ATTN_ALIGN, the silver word links of the dev split; analysis/silver_align.py makes them)" >&2
    exit 2
}

# table3_check_layouts: exit 2 with one line if a selected row's layout is
# refused (table3_layout), before anything is submitted
table3_check_layouts() {
    local i
    for i in "${IDX[@]}"; do
        table3_layout "$(table3_row_cfg "${ROWS[$i]}")" || { echo "error: $LAYOUT_ERR" >&2; exit 2; }
    done
}

# table3_check_vars: exit 2 with one line if a numeric override is not a
# positive integer (before anything is written)
table3_check_vars() {
    local v
    for v in STEPS WARMUP MAX_TOKENS UPDATE_FREQ BATCH_TOKENS GPUS_PER_ROW SHRINK SEEDS ATTN_SAMPLE; do
        case ${!v:-} in
            "") ;;
            *[!0-9]* | 0*) echo "error: $v='${!v}': not a positive integer" >&2; exit 2 ;;
        esac
    done
    if [ "${SEEDS:-1}" -gt 10 ]; then echo "error: SEEDS=$SEEDS: at most 10 seeds of base" >&2; exit 2; fi
}

# table3_seed_rows DIR [FOLDER]: SEEDS=N adds rows base-seed2 .. base-seedN to
# FOLDER (default SWEEP/configs): base with seed = 2 .. N (the seed of data order, dropout and
# initialisation), for the seed-to-seed spread that the other rows' differences
# from base are read against (docs/results-multi30k.md).  A file seeds.txt
# beside the row configs ("ROW N" lines) does the same for any row: the rows
# whose expected effect is small need more seeds to be told apart from base.
table3_seed_rows() {
    local dir=$1 to=${2:-$SWEEP/configs} row n line=0
    [ "${SEEDS:-1}" -gt 1 ] && seed_rows base "$SEEDS" "$to"
    [ -f "$dir/seeds.txt" ] || return 0
    while read -r row n; do
        line=$((line + 1))
        case $row in ""|"#"*) continue ;; esac
        case $n in
            [1-9] | 10) ;;
            *) echo "error: $dir/seeds.txt:$line: expected 'ROW N' with N from 1 to 10, got '$row $n'" >&2; exit 2 ;;
        esac
        [ -f "$to/$row.cfg" ] || { echo "error: $dir/seeds.txt:$line: no row config $row.cfg" >&2; exit 2; }
        seed_rows "$row" "$n" "$to"
    done < "$dir/seeds.txt"
}

# seed_rows ROW N [FOLDER]: ROW-seed2 .. ROW-seedN, ROW with seed = 2 .. N
# (in FOLDER, default SWEEP/configs)
seed_rows() {
    local s to=${3:-$SWEEP/configs}
    for ((s = 2; s <= $2; s++)); do
        { grep -v -E '^[[:space:]]*(row|seed)[[:space:]]*=' "$to/$1.cfg"
          echo "# seed $s of $1 (of $2)"
          echo "row = $1-seed$s"
          echo "seed = $s"; } > "$to/$1-seed$s.cfg"
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

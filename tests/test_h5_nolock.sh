#!/usr/bin/env bash
# HDF5 files on a file system without locks, and transient read errors
# (tests/fsfail_shim.c, LD_PRELOAD):
#   1. flock/fcntl locks failing with ENOLCK (NFS without lockd) or ENOSYS:
#      datasets, eval and resume read intact files as intact (before, every
#      open failed and resume called the checkpoints "truncated or corrupt");
#   2. an I/O error (EIO) opening the newest checkpoint: resume stops with
#      one line naming the error (exit 2); the checkpoint is not renamed
#      .bad and the run does not go on quietly from an older one.
set -u
. "$(dirname "$0")/lib.sh"
SHIM=$TOP/bin/tests/fsfail_shim.so
[ -f "$SHIM" ] || fail "$SHIM: not built (make test)"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# a small real dataset (SentencePiece, HDF5): counting in English -> German
words_en=(zero one two three four five six seven eight nine)
words_de=(null eins zwei drei vier fuenf sechs sieben acht neun)
for i in $(seq 0 299); do
    a=$((i % 10)) b=$((i / 10 % 10)) c=$((i / 100))
    echo "${words_en[$c]} ${words_en[$b]} ${words_en[$a]}" >> "$W/t.en"
    echo "${words_de[$c]} ${words_de[$b]} ${words_de[$a]}" >> "$W/t.de"
done
head -n 40 "$W/t.en" > "$W/d.en"; head -n 40 "$W/t.de" > "$W/d.de"
"$BIN" prepare --out "$W/d.h5" --split train "$W/t.en" "$W/t.de" --split dev "$W/d.en" "$W/d.de" \
    --byte-fallback 0 vocab_size=60 max_len=16 > "$W/prep.log" 2>&1 || { cat "$W/prep.log"; fail "prepare"; }
A="data=$W/d.h5 vocab_size=60 max_len=16 n_layers=1 d_model=16 d_ff=32 n_heads=2 d_k=8 d_v=8 max_tokens=200
   threads=1 log_steps=1 ckpt_steps=2 ckpt_minutes=0 run_dir=$W/run"
"$BIN" train $A train_steps=4 > "$W/train.log" 2>&1 || { cat "$W/train.log"; fail "train"; }
ls "$W"/run/ckpt_00000004.h5 "$W"/run/ckpt_00000002.h5 >/dev/null || fail "no checkpoints of steps 2 and 4"

# ---- 1: no locks -------------------------------------------------------------
steps=4
for e in ENOLCK ENOSYS; do
    steps=$((steps + 2))
    LD_PRELOAD=$SHIM FSFAIL_LOCK=$e "$BIN" eval --checkpoint "$W/run/ckpt_00000004.h5" --data "$W/d.h5" \
        > "$W/eval.log" 2>&1 || { cat "$W/eval.log"; fail "$e: eval of an intact checkpoint and dataset failed"; }
    grep -q '^eval dev .* ppl ' "$W/eval.log" || fail "$e: no eval line: $(cat "$W/eval.log")"
    LD_PRELOAD=$SHIM FSFAIL_LOCK=$e "$BIN" train $A train_steps=$steps > "$W/resume.log" 2>&1 ||
        { cat "$W/resume.log"; fail "$e: resume failed"; }
    grep -q "^resume: $W/run/ckpt_0000000[46].h5" "$W/resume.log" || fail "$e: did not resume from the newest: $(cat "$W/resume.log")"
    grep -q 'damaged\|corrupt' "$W/resume.log" && fail "$e: intact files called damaged: $(cat "$W/resume.log")"
    ls "$W"/run/*.bad 2>/dev/null && fail "$e: a checkpoint was renamed .bad"
    grep -q "warning: $W/run/.lock: cannot lock the run directory" "$W/resume.log" ||
        fail "$e: no warning that the run directory is unlocked: $(cat "$W/resume.log")"
    ok "locks failing with $e: eval and resume read the intact dataset and checkpoints"
done
# the analysis (h5py's own HDF5) on a login node reading the run's files
if [ -x "$TOP/.venv/bin/python" ]; then
    LD_PRELOAD=$SHIM FSFAIL_LOCK=ENOLCK "$TOP/.venv/bin/python" "$TOP/analysis/curves.py" "$W/run" --out "$W/curves" \
        > "$W/curves.log" 2>&1 || fail "ENOLCK: analysis/curves.py failed on intact files: $(cat "$W/curves.log")"
    [ -s "$W/curves_steps.png" ] || fail "ENOLCK: no figure: $(cat "$W/curves.log")"
    ok "locks failing with ENOLCK: analysis/curves.py reads the run's metrics.h5"
fi

# ---- 2: a transient read error on the newest checkpoint ----------------------
LD_PRELOAD=$SHIM FSFAIL_EIO=ckpt_00000008.h5 "$BIN" train $A train_steps=10 > "$W/eio.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$W/eio.log"; fail "EIO on the newest checkpoint: exit $rc, expected 2"; }
grep -q "^error: $W/run/ckpt_00000008.h5: cannot read checkpoint: Input/output error" "$W/eio.log" ||
    fail "EIO: no line naming the checkpoint and the error: $(cat "$W/eio.log")"
# one line: HDF5's own diagnostic stack, printed above it, is not passed on
! grep -q "HDF5-DIAG" "$W/eio.log" || fail "EIO: HDF5's error stack printed: $(grep -c . "$W/eio.log") lines"
[ -f "$W/run/ckpt_00000008.h5" ] && ! ls "$W"/run/*.bad >/dev/null 2>&1 || fail "EIO: the checkpoint was moved aside"
grep -q '^step 7 ' "$W/eio.log" && fail "EIO: training went on from an older checkpoint"
"$BIN" train $A train_steps=10 > "$W/after.log" 2>&1 && grep -q "^resume: $W/run/ckpt_00000008.h5" "$W/after.log" ||
    fail "after the error passed, resume did not use the newest checkpoint: $(cat "$W/after.log")"
ok "EIO on the newest checkpoint: exit 2 with '$(grep -m1 '^error' "$W/eio.log")'; nothing renamed; resumes from it later"

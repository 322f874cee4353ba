#!/usr/bin/env bash
# One Table 3 row end to end on real text (a small Multi30k subset), as the
# sweep runs it (jobs/table3-stages.sh, docs/results.md):
#   1. a healthy row: trained, dev and every held-out split translated with
#      the final checkpoint and the average of the last 5 (avg5.h5 made of
#      exactly the last 5 step checkpoints), all stored in its
#      result file with their BLEU, the compute (tokens seen = the metrics
#      log's sum, wall time = its elapsed time, threads) and the learning-rate rule; verdict healthy;
#   2. a planted stuck row (a learning rate too small to leave the start):
#      verdict stuck, rerun once by policy with seed + 100 as ROW-rerun,
#      both results kept, the element failing since the rerun is stuck too;
#   3. run again, the finished row is skipped (its result file is enough);
#   4. every run writes its attention (docs/attention.md): the maps of
#      ATTN_SAMPLE dev pairs spread evenly over the split in runs/ROW/attention.h5
#      and their per-head statistics in attention/ROW.h5; a planted failure of
#      that stage (ok's summary path is a directory) is one line naming the
#      file, leaves ok's result done, and the rerun of the sweep writes it;
#      with ATTN_ALIGN (planted silver links of the dev split) each summary
#      has the AER of the cross-attention heads, = attention.py's on the maps.
#   5. a row with patience at its cap is continued with train_steps raised
#      by half; 6. a continuation stopped (SIGTERM) before its new cap is
#      resumed to it when the sweep runs again, not skipped;
#   7. a rerun stopped (SIGTERM) is continued alone when the sweep runs
#      again: the stages of the row whose curve failed are not run again.
. "$(dirname "$0")/lib.sh"
need_multi30k
# KEEP_DIR=DIR keeps the sweep there for a look
W=${KEEP_DIR:-$(mktemp -d)}; [ -n "${KEEP_DIR:-}" ] || trap 'rm -rf "$W"' EXIT
cd "$TOP" || fail "$TOP"
unset STEPS WARMUP MAX_TOKENS UPDATE_FREQ DATA SHRINK SEEDS EXTRA BATCH_TOKENS TABLE3_REDO TABLE3_RERUN
export ATTN_SAMPLE=8   # of the 40 dev pairs: 0, 5, ..., 35
export TRANSFORMER_HOME=$TOP LOCAL_RANKS=1 OMP_NUM_THREADS=1
PY=$(. jobs/table3-stages.sh; table3_python)

# a small dataset: 3000 training pairs, 40 dev, 30 of each test set
for s in train:3000 val:40 test2016:30 test2017:30; do
    for l in en de; do head -n "${s#*:}" "$M/${s%%:*}.$l" > "$W/${s%%:*}.$l"; done
done
"$BIN" prepare --out "$W/d.h5" --split train "$W/train.en" "$W/train.de" --split dev "$W/val.en" "$W/val.de" \
    --split test2016 "$W/test2016.en" "$W/test2016.de" --split test2017 "$W/test2017.en" "$W/test2017.de" \
    vocab_size=500 max_len=64 > "$W/prepare.log" 2>&1 || fail "prepare: $(tail -2 "$W/prepare.log")"
# planted silver links of the dev split (target word k to source word k):
# what the AER is does not matter here, only that the stage scores against them
"$PY" - "$W/d.h5" "$W/silver.h5" "$TOP/analysis" <<'PY' || fail "planted silver links: see above"
import sys
sys.path.insert(0, sys.argv[3])
import silver_align as S
src, tgt = S.dataset_words(sys.argv[1], "dev")
links = [{(k, k) for k in range(min(len(s), len(t)))} for s, t in zip(src, tgt)]
S.write_silver(sys.argv[2], range(len(src)), src, tgt, links, {"split": "dev", "aligner": "planted"})
PY
export ATTN_ALIGN=$W/silver.h5
mkdir -p "$W/configs"
row_cfg() {   # row_cfg NAME LR_PEAK STEPS
    printf '%s\n' "row = $1" n_layers=1 d_model=64 d_ff=128 n_heads=4 d_k=16 d_v=16 vocab_size=500 max_len=64 \
        "data = $W/d.h5" "lr_peak = $2" warmup=30 "train_steps = $3" max_tokens=600 log_steps=10 eval_steps=20 \
        ckpt_steps=10 keep_ckpts=5 threads=1 dropout=0 beam=2 seed=1 > "$W/configs/$1.cfg"
}
# (measured: ok's dev NLL falls 1.3 nats below the unigram NLL by 40% of its
# 300 steps, the verdict's margin being 1.0; stuck's stays above it)
row_cfg ok 1e-2 300
row_cfg stuck 1e-7 100
mkdir -p "$W/sw/attention/ok.h5"   # planted: the attention stage of row ok cannot write its summary
TABLE3_DIR=$W/configs DEVICE=cpu jobs/run-local.sh table3 "$W/sw" ok stuck > "$W/sweep.log" 2>&1 &&
    fail "the sweep succeeded although its stuck row's rerun is stuck too: $(tail -3 "$W/sweep.log")"
[ -f "$W/sw/results/ok.h5" ] || { cat "$W/sweep.log"; fail "no result file for row ok"; }

"$PY" - "$W/sw" <<'PY' || fail "result files: see above"
import sys, h5py, numpy as np
sw = sys.argv[1]
r = h5py.File(f"{sw}/results/ok.h5", "r")
a = r.attrs
assert a["status"] == "done", a["status"]
assert str(a["verdict"]) == "healthy", (a["verdict"], a["verdict_reason"])
n = {"dev": 40, "test2016": 30, "test2017": 30}
for name in ("dev.final", "test2016.final", "test2016.avg5", "test2017.final", "test2017.avg5"):
    h = r[f"hyps/{name}"]
    assert h.attrs["lines"] == n[name.split(".")[0]], (name, h.attrs["lines"])
    assert np.isfinite(a[f"bleu_{name}"]), name
m = h5py.File(f"{sw}/runs/ok/metrics.h5", "r")
assert a["tokens_seen"] == m["train/tokens"][:].sum() > 0, (a["tokens_seen"], m["train/tokens"][:].sum())
# the training time of every invocation (resumes too), not the last one's
assert a["wall_seconds"] == m["train/elapsed_s"][-1] > 0, (a["wall_seconds"], m["train/elapsed_s"][-1])
assert str(a["threads"]) == "1" and "lr_peak 1e-2" in str(a["lr_rule"]), (a["threads"], a["lr_rule"])
assert "nrefs:1" in str(a["bleu_signature"]), a["bleu_signature"]
# avg5 averages the run's last 5 step checkpoints (section 6.1's base
# average; ckpt_steps 10, train_steps 300), oldest first, not 4 or 6 of them
# (the checks above only count avg5's lines and find its BLEU finite)
av = h5py.File(f"{sw}/runs/ok/avg5.h5", "r").attrs["averaged_from"]
av = av.decode() if isinstance(av, bytes) else str(av)
got = [p.rsplit("/", 1)[-1] for p in av.split("\n")]
want = [f"ckpt_{s:08d}.h5" for s in range(260, 301, 10)]
assert got == want, ("avg5.h5 averages", got, "not the last 5 step checkpoints", want)
for row in ("stuck", "stuck-rerun"):
    s = h5py.File(f"{sw}/results/{row}.h5", "r").attrs
    assert str(s["verdict"]) == "stuck", (row, s["verdict"], s["verdict_reason"])
cfg = open(f"{sw}/configs/stuck-rerun.cfg").read()
assert "seed = 101" in cfg and "row = stuck-rerun" in cfg, cfg
print("ok")
PY
grep -q "row stuck failed its curve check: rerun with seed + 100 as stuck-rerun" "$W/sw/logs/local_1.out" ||
    fail "no rerun line: $(grep table3 "$W/sw/logs/local_1.out" | tail -3)"
grep -q "^error: table3 row stuck: failed (exit 1): its curve failed, and so did its rerun's: stuck" "$W/sweep.log" ||
    fail "the sweep's error line does not say why: $(grep error "$W/sweep.log")"
ok "row ok: healthy, dev + test2016/test2017 (final, avg5) translated and stored, tokens and rule recorded"
ok "row stuck: verdict stuck, rerun with seed 2 as stuck-rerun (stuck too), the element failed"
grep -qx "error: table3 row ok: attention: $W/sw/attention/ok.h5: cannot write: Is a directory" \
    < "$W/sw/logs/local_0.out" || fail "no one-line error naming ok's attention file: $(grep error "$W/sw/logs/local_0.out")"
[ -z "$(ls -A "$W/sw/attention/ok.h5")" ] || fail "the failed summary left files: $(ls -A "$W/sw/attention/ok.h5")"
[ "$("$PY" -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs["status"])' "$W/sw/results/ok.h5")" = done ] ||
    fail "a failed attention stage changed ok's result"
ok "a failed attention stage: one line naming the file, nothing left behind, ok's result still done"
rmdir "$W/sw/attention/ok.h5"

TABLE3_DIR=$W/configs DEVICE=cpu jobs/run-local.sh table3 "$W/sw" ok > "$W/again.log" 2>&1 ||
    fail "run again: $(tail -3 "$W/again.log")"
grep -q "row ok: finished earlier" "$W/sw/logs/local_0.out" || fail "row ok was not skipped: $(tail -3 "$W/sw/logs/local_0.out")"
ok "a finished row is skipped when the sweep runs again"

"$PY" - "$W/sw" "$TOP/analysis" <<'PY' || fail "attention files: see above"
import re, sys, h5py, numpy as np
sw = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import attention as A
want = [i * 40 // 8 for i in range(8)]
for row in ("ok", "stuck", "stuck-rerun"):
    full, summ = f"{sw}/runs/{row}/attention.h5", f"{sw}/attention/{row}.h5"
    with h5py.File(full, "r") as f, h5py.File(summ, "r") as g:
        assert list(f["sentence_index"][()]) == want == list(g["sentence_index"][()]), (row, g["sentence_index"][()])
        assert (f.attrs["n_layers"], f.attrs["n_heads"]) == (1, 4) == (g.attrs["n_layers"], g.attrs["n_heads"])
        ckpt = A.attr_str(f, "checkpoint")
        assert re.fullmatch(r".*/ckpt_\d+\.h5", ckpt) and A.attr_str(g, "checkpoint") == ckpt, ckpt   # the final one
        assert A.attr_str(g, "run") == row and g.attrs["n_sentences"] == 8 and A.attr_str(g, "split") == "dev"
        for name in f["sentences"]:
            s = f["sentences"][name]
            S, T = s.attrs["src_len"], s.attrs["tgt_len"]
            assert s["encoder_self"].shape == (1, 4, S, S) and s["cross"].shape == (1, 4, T, S), (row, name)
        st = A.file_stats(full, A.load(full)["steps"][None])
        for kind in A.KINDS:
            assert g[kind]["mean"].shape == g[kind]["sd"].shape == g[kind]["count"].shape == (len(A.STATS), 1, 4)
            np.testing.assert_allclose(g[kind]["mean"][()], np.stack([st[kind][k] for k in A.STATS]), rtol=1e-12)
        al = A.sample_aer(full, f"{sw}/../silver.h5", A.load(full)["steps"][None], f["sentence_index"][()], "dev", 64)
        assert g["alignment/aer_head"].shape == (1, 4) and g["alignment"].attrs["n_links"] > 0, row
        np.testing.assert_array_equal(g["alignment/aer_head"][()], al["head"])
        np.testing.assert_array_equal(g["alignment/aer_layer"][()], al["layer"])
print("ok")
PY
grep -q "table3: ok: attention of 8 dev pairs" "$W/sw/logs/local_0.out" || fail "the rerun did not write ok's attention"
ok "attention: 8 evenly spread dev pairs from the final checkpoint in runs/ROW/attention.h5, per-head summaries = attention.py's statistics and AER against ATTN_ALIGN (ok written by the second run)"

# 4. a row that keeps its best checkpoint and stops by patience (issue 42:
# the converged protocol; a sweep of its own): reported with best.h5 (dev, hypotheses, the
# attention), averaged over the last checkpoints up to it; an improvement
# needs 0.5 nats, so it stops soon after the first fast fall
row_cfg best 1e-2 300
printf '%s\n' keep_best=1 patience=2 patience_delta=0.5 >> "$W/configs/best.cfg"
TABLE3_DIR=$W/configs DEVICE=cpu jobs/run-local.sh table3 "$W/sw2" best > "$W/best.log" 2>&1 ||
    fail "row best: $(tail -3 "$W/best.log")"
"$PY" - "$W/sw2" "$TOP/analysis" <<'PY' || fail "row best: see above"
import sys, h5py
sw = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import attention as A
a = h5py.File(f"{sw}/results/best.h5", "r").attrs
rep, stop = str(a["reported_checkpoint"]), str(a["stopped_by"])
assert rep == "best" and stop == "patience" and 0 < a["best_step"] < a["stop_step"] < 300, (rep, stop, a["best_step"], a["stop_step"])
with h5py.File(f"{sw}/attention/best.h5", "r") as g:
    assert A.attr_str(g, "checkpoint").endswith("/runs/best/best.h5"), A.attr_str(g, "checkpoint")
print("ok")
PY
grep -q "table3: best: evaluating $W/sw2/runs/best/best.h5 (best)" "$W/sw2/logs/local_0.out" ||
    fail "row best was not evaluated with best.h5: $(grep evaluating "$W/sw2/logs/local_0.out")"
ok "a row with keep_best stopped by patience: dev, hypotheses and attention from best.h5, recorded as reported_checkpoint=best"
# 5. a row at its cap without a patience stop (the converged protocol; its
# curve healthy by then, as a stuck one is rerun instead): the
# element continues it from its checkpoints with train_steps raised by half
# (260 -> 400, rounded up to an evaluation), records that in its frozen
# config, and after TABLE3_CAP_CONTINUE continuations leaves it flagged; the
# continued run's dev curve is that of a run given 400 steps from the start
row_cfg cap 1e-2 260
row_cfg cap400 1e-2 400
printf '%s\n' keep_best=1 patience=50 patience_delta=0 >> "$W/configs/cap.cfg"
echo keep_best=1 >> "$W/configs/cap400.cfg"   # no patience: not continued (patience does not change training)
TABLE3_CAP_CONTINUE=1 TABLE3_DIR=$W/configs DEVICE=cpu jobs/run-local.sh table3 "$W/sw3" cap cap400 > "$W/cap.log" 2>&1 ||
    fail "rows cap, cap400: $(tail -3 "$W/cap.log")"
grep -q "table3: row cap: reached its cap of 260 updates without a patience stop: continued to 400" "$W"/sw3/logs/*.out &&
    grep -q "table3: row cap: at its cap of 400 updates after 1 continuations: left flagged not converged" "$W"/sw3/logs/*.out ||
    fail "row cap was not continued once: $(grep 'row cap' "$W"/sw3/logs/*.out)"
grep -q '^train_steps = 400$' "$W/sw3/configs/cap.cfg" && grep -q '^# continued at the cap: train_steps 260 -> 400 ' "$W/sw3/configs/cap.cfg" ||
    fail "the frozen config of row cap does not record its new cap: $(grep train_steps "$W/sw3/configs/cap.cfg")"
"$PY" - "$W/sw3" <<'PY' || fail "row cap: see above"
import sys, h5py, numpy as np
f = {r: h5py.File(f"{sys.argv[1]}/results/{r}.h5", "r") for r in ("cap", "cap400")}
for r, g in f.items():
    assert str(g.attrs["status"]) == "done" and str(g.attrs["stopped_by"]) == "train_steps", (r, dict(g.attrs))
a, b = (f[r]["curves"] for r in ("cap", "cap400"))
assert list(a["dev_step"][()]) == list(range(20, 401, 20)), a["dev_step"][()]
assert np.array_equal(a["dev_step"][()], b["dev_step"][()]) and np.array_equal(a["dev_nll"][()], b["dev_nll"][()]), \
    (a["dev_nll"][()], b["dev_nll"][()])
print("ok")
PY
ok "a row at its cap without a patience stop: continued once from 260 to 400 updates (its config records it), then left flagged; its dev curve = a 400-step run's"
# run again with a second continuation allowed: the finished row at its cap
# is continued (400 -> 600), the other skipped
TABLE3_CAP_CONTINUE=2 TABLE3_DIR=$W/configs DEVICE=cpu jobs/run-local.sh table3 "$W/sw3" cap cap400 > "$W/cap2.log" 2>&1 ||
    fail "rows cap, cap400 again: $(tail -3 "$W/cap2.log")"
grep -q "table3: row cap: reached its cap of 400 updates without a patience stop: continued to 600" "$W"/sw3/logs/*.out &&
    grep -q "table3: row cap400: finished earlier" "$W"/sw3/logs/*.out && grep -q '^train_steps = 600$' "$W/sw3/configs/cap.cfg" ||
    fail "the finished row cap was not continued when the sweep ran again: $(grep -h 'row cap' "$W"/sw3/logs/*.out | tail -4)"
"$PY" -c 'import sys, h5py; s = h5py.File(sys.argv[1], "r")["curves/dev_step"][()]; assert s[-1] == 600, s' "$W/sw3/results/cap.h5" ||
    fail "row cap's result is not of the continued run"
ok "a finished row at its cap is continued when the sweep runs again with a continuation left (400 -> 600)"

# 6. a continuation stopped before its new cap (SIGTERM to the element, as
# a preemption or a time limit sends, at its first checkpoint past 260):
# the sweep run again resumes it to 400, and does not skip the row with its
# 260-step result (nor count the stop as a second continuation)
row_cfg cut 1e-2 260
printf '%s\n' keep_best=1 patience=50 patience_delta=0 >> "$W/configs/cut.cfg"
TABLE3_CAP_CONTINUE=1 TABLE3_DIR=$W/configs DEVICE=cpu jobs/run-local.sh table3 "$W/sw4" cut > "$W/cut.log" 2>&1 & p=$!
wait_until "$p" test -e "$W/sw4/runs/cut/ckpt_00000280.h5" || fail "row cut was not continued: $(tail -3 "$W/cut.log")"
kill -TERM "$(pgrep -f "table3.sbatch $W/sw4")"
wait "$p"; [ $? -eq 99 ] || fail "the stopped continuation did not exit 99: $(tail -3 "$W/cut.log")"
TABLE3_CAP_CONTINUE=1 TABLE3_DIR=$W/configs DEVICE=cpu jobs/run-local.sh table3 "$W/sw4" cut > "$W/cut2.log" 2>&1 ||
    fail "row cut after its stop: $(tail -3 "$W/cut2.log")"
! grep -q "table3: row cut: finished earlier" "$W"/sw4/logs/*.out && grep -q '^train_steps = 400$' "$W/sw4/configs/cut.cfg" ||
    fail "the stopped continuation of row cut was not resumed: $(grep -h 'row cut' "$W"/sw4/logs/*.out | tail -3)"
"$PY" -c 'import sys, h5py; a = h5py.File(sys.argv[1], "r"); assert a.attrs["train_steps"] == 400, a.attrs["train_steps"]' \
    "$W/sw4/results/cut.h5" || fail "row cut's result is not of its continued run to 400"
ok "a continuation stopped before its new cap resumes to it when the sweep runs again (260 -> 400), not skipped"
# 7. a rerun stopped (SIGTERM to the element, as a preemption sends) after
# its row's curve failed: the sweep run again continues the rerun only; the
# row's own stages (evaluation, translations, attention) are not run again
# and its result file is kept as it was
row_cfg stall 1e-7 100   # stuck at any length, as row stuck
mkdir -p "$W/c5" && mv "$W/configs/stall.cfg" "$W/c5/"   # a sweep of one row: its log is local_0.out
TABLE3_DIR=$W/c5 DEVICE=cpu jobs/run-local.sh table3 "$W/sw5" > "$W/stall.log" 2>&1 & p=$!
rerun_started() { compgen -G "$W/sw5/runs/stall-rerun/ckpt_*.h5" > /dev/null; }
wait_until "$p" rerun_started || fail "row stall was not rerun: $(tail -3 "$W/stall.log")"
kill -TERM "$(pgrep -f "table3.sbatch $W/sw5")"
wait "$p"; [ $? -eq 99 ] || fail "the stopped rerun did not exit 99: $(tail -3 "$W/stall.log")"
before=$(stat -c %Y.%s "$W/sw5/results/stall.h5") n=$(wc -l < "$W/sw5/logs/local_0.out")
TABLE3_DIR=$W/c5 DEVICE=cpu jobs/run-local.sh table3 "$W/sw5" > "$W/stall2.log" 2>&1 &&
    fail "the sweep succeeded although row stall's rerun is stuck too"
log=$(tail -n "+$((n + 1))" "$W/sw5/logs/local_0.out")
grep -q "^table3: row stall: its curve failed earlier: stuck" <<< "$log" && ! grep -q "^table3: row stall job " <<< "$log" ||
    fail "row stall's stages ran again: $(grep '^table3: row stall' <<< "$log")"
[ "$(stat -c %Y.%s "$W/sw5/results/stall.h5")" = "$before" ] || fail "row stall's result file was written again"
[ "$("$PY" -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs["status"])' "$W/sw5/results/stall-rerun.h5")" = done ] ||
    fail "the stopped rerun was not continued to its result: $(tail -3 "$W/stall2.log")"
ok "a rerun stopped after its row's curve failed: continued alone when the sweep runs again, the row's stages not run again"

#!/usr/bin/env bash
# The GPU measurement kit (issue 32, docs/gpu-accept.md "The kit"), on the
# CUDA emulator (its times are the emulator's, not a GPU's: the plumbing):
# - per-call timing (gpu_model --run-steps N --time-calls CSV), bf16, fp32
#   and fp16: the CSV has
#   one row per call of the dry-run trace of the same config, in order,
#   with the same op, call, kind and shape; timed calls have a device time,
#   syncs none; the real step's trace is the dry run's byte for byte; the
#   parameters after the steps are bitwise those of the same steps without
#   timing; gpu_model --fit joins the CSV, and says so when a trace's
#   kernels lack grid shapes (priced otherwise); all under the strict emulator
#   (rule ELAPSED: the events are read after the stream's synchronisation).
#   The join with the dry run holds where cuBLASLt takes every fused plan
#   (the dry run assumes it does); rule LT_HEURISTIC refuses a seeded
#   quarter of them in a real run, as cuBLASLt may on a GPU, so that run's
#   own trace (--write-trace beside --time-calls) is what --fit joins, and
#   the test checks both.
# - the GEMM sweep (tests/gpu/gemm_sweep.sh, gpu_model --gemm-sweep): at
#   the paper's batch, its rows are exactly the GEMM shape classes of the
#   base and big steps' dry-run traces (op, call, m x n x k x batch, with
#   their call counts), 44 in all, each with a time, TFLOP/s and the
#   model's prediction; and a real (not dry) swept step of a small model
#   runs under the strict emulator.
# - gemm_peak (bin/tests/gemm_peak: the emulator's build, n = 64): three
#   constant-data lines as before and three random-data lines tagged
#   `random`, --constant / --random alone, gpu_bench.sh's parse taking
#   the constant bf16 line and the random one beside it, a bad argument
#   refused with one line.
# - tests/gpu/gpu_clocks.sh with a fake nvidia-smi on PATH: the query
#   loop runs with the issue's fields every 200 ms while the command runs
#   and is stopped after it; the CSV has its samples; the summary finds the
#   planted clock dip; the command's output and exit status pass through;
#   without nvidia-smi, one line and the command alone.
# - tests/gpu/torch_train_strong.py --cpu-smoke under /usr/bin/python3
#   (Debian's python3-torch; skipped in one line without it): the strong
#   model's attention path computes the reference model's logits, and 3
#   bf16 steps run with finite losses; without a GPU the full run refuses
#   in one line.
# - tests/gpu/kit.sh (make gpu-kit-plan): the plan has at most 3 calls,
#   each at most 540 s, 2000 characters and 8 files, 360 s in all; with
#   gpu-accept's calls and a machine start of 90 s it fits a session's 900 s;
#   docs/gpu-accept.md gives its commands; over-budget plans are refused;
#   the timing and sweep stages run end to end on the emulator (stub
#   nvidia-smi, small model): kit.md with PASS lines and the fit, kit.tgz
#   with the CSVs and the clock log; a stage past its budget fails, saying
#   so; a bad CALL is refused in one line.
# - the levers stage (issue 44's A/B pairs: base′ with and without CUDA
#   Graphs, attention gemm and fused, ReLU mask 1 and 0) on the emulator:
#   each pair's times and speed-up, the graphs pair's hashes equal; a
#   planted gpu_model whose --graphs runs print another hash fails it.
set -u
. "$(dirname "$0")/lib.sh"
M=$TOP/bin/tests/gpu_model
[ -x "$M" ] || skip "bin/tests/gpu_model not built (no CUDA headers for the emulator)"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cd "$TOP" || fail "cd $TOP"

# a small model, bf16, fp32 and fp16 storage (fp32 takes the plain cuBLAS path; fp16 its loss-scale check)
for prec in bf16 fp32 fp16; do
    SMALL="--model base --batch 4 --len 9 n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 vocab_size=100 precision=$prec"
    # shellcheck disable=SC2086
    {
        $M $SMALL --run-steps 2 --time-calls $W/t_lt.csv --write-trace $W/real_lt.csv > /dev/null ||
            fail "$prec: --time-calls with cuBLASLt refusals"
        $M $SMALL --trace $W/real_lt.csv --fit $W/t_lt.csv > $W/fit_lt.txt ||
            fail "$prec: --fit on the timed run's own trace: $(tail -1 $W/fit_lt.txt)"
        export CUDA_EMU_STRICT_LT_HEURISTIC=0
        $M $SMALL --run-steps 3 --time-calls $W/t.csv --write-trace $W/real.csv > $W/timed.txt ||
            fail "$prec: --time-calls: $(tail -2 $W/timed.txt)"
        $M $SMALL --run-steps 3 > $W/plain.txt || fail "$prec: --run-steps: $(tail -2 $W/plain.txt)"
        $M $SMALL --write-trace $W/dry.csv > /dev/null || fail "$prec: --write-trace"
        $M $SMALL --trace $W/dry.csv --fit $W/t.csv > $W/fit.txt || fail "$prec: --fit on the timing CSV: $(tail -1 $W/fit.txt)"
        unset CUDA_EMU_STRICT_LT_HEURISTIC
    }
    h1=$(grep -o 'fnv1a [0-9a-f]*' $W/timed.txt) h0=$(grep -o 'fnv1a [0-9a-f]*' $W/plain.txt)
    [ -n "$h0" ] && [ "$h1" = "$h0" ] || fail "$prec: parameters after 3 steps: timed $h1, untimed $h0"
    ok "$prec: 3 steps timed per call leave the parameters bitwise as untimed ($h0)"
    cmp -s $W/real.csv $W/dry.csv || fail "$prec: the timed real step's trace differs from the dry run's"
    python3 - $W/t.csv $W/dry.csv <<'PY' > $W/join.txt || fail "$prec: the timing CSV does not join the trace: $(cat $W/join.txt)"
import csv, sys
t = list(csv.DictReader(open(sys.argv[1])))
tr = list(csv.DictReader(open(sys.argv[2])))
assert len(t) == len(tr) > 0, (len(t), len(tr))
timed = 0
for i, (a, b) in enumerate(zip(t, tr)):
    assert int(a["index"]) == i, (i, a)
    for key in ("op", "call", "kind", "m", "n", "k", "batch"):
        assert a[key] == b[key], (i, key, a[key], b[key])
    dev, host = float(a["measured_us"]), float(a["host_us"])
    assert host >= 0, (i, a)
    if a["kind"] in ("sync", "comm"):
        assert dev == 0, (i, a)
    else:
        assert dev > 0, ("a timed call without a device time", i, a)
        timed += 1
print("%d rows = the trace's %d, same op/call/kind/shape in order; %d timed calls with device time, syncs 0"
      % (len(t), len(tr), timed))
PY
    ok "$prec: $(cat $W/join.txt); the real step's trace = the dry run's; --fit joins it, and the run's own trace under cuBLASLt refusals"
    grep -q '^note: .* no grid shape' $W/fit.txt && fail "$prec: --fit says a shaped trace has no grid shapes"
    # shellcheck disable=SC2086
    awk -F, 'BEGIN { OFS = "," } NR > 1 && $3 == "kernel" { $14 = 0; $15 = 0 } { print }' $W/dry.csv > $W/unshaped.csv
    $M $SMALL --trace $W/unshaped.csv --fit $W/t.csv | grep -q '^note: [0-9]* kernel calls of the trace have no grid shape' ||
        fail "$prec: --fit is silent on a trace without kernel grid shapes"
done

# the GEMM sweep covers every GEMM shape class of base and big
bash tests/gpu/gemm_sweep.sh $M $W/sweep.csv 2 > $W/sweep.txt || fail "gemm_sweep.sh: $(tail -2 $W/sweep.txt)"
for m in base big; do
    $M --model $m --batch 610 --len 41 precision=bf16 --write-trace $W/$m.trace.csv > /dev/null || fail "$m: --write-trace"
done
python3 - $W/sweep.csv $W/base.trace.csv $W/big.trace.csv <<'PY' > $W/cover.txt || fail "the sweep does not cover the GEMM shapes: $(cat $W/cover.txt)"
import collections, csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = collections.Counter()
for model, path in (("base", sys.argv[2]), ("big", sys.argv[3])):
    for r in csv.DictReader(open(path)):
        if r["kind"] == "gemm":
            want[(model, r["op"], r["call"], r["m"], r["n"], r["k"], r["batch"])] += 1
got = collections.Counter()
for r in rows:
    key = (r["model"], r["op"], r["call"], r["m"], r["n"], r["k"], r["batch"])
    assert key not in got, ("a class twice", key)
    got[key] = int(r["calls"])
    assert r["dtype"] == "bf16" and int(r["reps"]) == 2, r
    assert float(r["ms"]) >= 0 and float(r["predicted_ms"]) > 0 and float(r["predicted_tflops"]) > 0, r
missing, extra = set(want) - set(got), set(got) - set(want)
assert not missing and not extra, ("missing", sorted(missing), "extra", sorted(extra))
assert got == want, [(k, got[k], want[k]) for k in want if got[k] != want[k]]
print("%d classes (base %d, big %d) = the traces' GEMM shape classes, %d calls" % (len(rows),
      sum(k[0] == "base" for k in got), sum(k[0] == "big" for k in got), sum(got.values())))
PY
ok "gemm sweep: $(cat $W/cover.txt)"
SMALL="--model base --batch 4 --len 9 n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 vocab_size=100 precision=bf16"
# shellcheck disable=SC2086
$M $SMALL --gemm-sweep $W/small.csv --reps 3 --real > $W/small.txt || fail "a real swept step: $(tail -2 $W/small.txt)"
ok "a real swept step of a small model, strict emulator: $(tail -1 $W/small.txt | sed 's/: .*//'), $(($(wc -l < $W/small.csv) - 1)) classes"

# gemm_peak: constant and random data
P=$TOP/bin/tests/gemm_peak
[ -x "$P" ] || fail "bin/tests/gemm_peak not built"
$P 64 > $W/peak.txt || fail "gemm_peak 64"
[ "$(grep -c ' random$' $W/peak.txt)" = 3 ] && [ "$(grep -vc ' random$' $W/peak.txt)" = 3 ] ||
    fail "gemm_peak: expected 3 constant and 3 random lines: $(cat $W/peak.txt)"
[ "$($P 64 --constant | grep -c random)" = 0 ] && [ "$($P 64 --random | grep -vc random)" = 0 ] ||
    fail "gemm_peak --constant / --random"
c=$(awk '$2 == "bf16" && $7 != "random" {print $6}' $W/peak.txt) r=$(awk '$2 == "bf16" && $7 == "random" {print $6}' $W/peak.txt)
[ "$(wc -w <<< "$c $r")" = 2 ] || fail "gpu_bench.sh's parse of gemm_peak: '$c' '$r'"
$P 64 --bogus > /dev/null 2> $W/err.txt && fail "gemm_peak --bogus accepted"
[ "$(wc -l < $W/err.txt)" = 1 ] && grep -q '^error: ' $W/err.txt || fail "gemm_peak --bogus: $(cat $W/err.txt)"
ok "gemm_peak: constant and random data, 3 lines each; gpu_bench's parse: bf16 constant $c, random $r (emulator)"

# clocks and power around a command, with a fake nvidia-smi
mkdir -p $W/fake
cat > $W/fake/nvidia-smi <<'SH'
#!/bin/sh
echo "$$ $*" > "$FAKE_SMI_LOG"
echo "clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, utilization.gpu [%]"
i=0
while :; do
    i=$((i + 1)); sm=1980; [ $i = 2 ] && sm=1410
    echo "$sm MHz, 2619 MHz, 650.5 W, $((60 + i % 3)), 98 %"
    sleep 0.05
done
SH
chmod +x $W/fake/nvidia-smi
export FAKE_SMI_LOG=$W/smi.log
# the command runs until the logger has written 3 samples (at most 60 s), not
# for a fixed time that a loaded machine's sampler might not fill
PATH=$W/fake:$PATH bash tests/gpu/gpu_clocks.sh $W/clocks.csv sh -c \
    'echo ran; for i in $(seq 1200); do [ "$(cat "$0" 2>/dev/null | wc -l)" -ge 4 ] && break; sleep 0.05; done; exit 3' $W/clocks.csv \
    > $W/clk.out 2> $W/clk.err
rc=$?
[ $rc = 3 ] && [ "$(cat $W/clk.out)" = ran ] || fail "gpu_clocks.sh: exit $rc, output $(cat $W/clk.out)"
read -r pid args < $W/smi.log
[ "$args" = "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu --format=csv -lms 200" ] ||
    fail "gpu_clocks.sh ran nvidia-smi $args"
sleep 0.1
! kill -0 "$pid" 2> /dev/null || { kill "$pid"; fail "gpu_clocks.sh left nvidia-smi ($pid) running"; }
samples=$(($(wc -l < $W/clocks.csv) - 1))
[ $samples -ge 3 ] || fail "gpu_clocks.sh: $samples samples, expected at least 3"
grep -q "^gpu_clocks: $samples samples: SM clock median 1980 MHz, min 1410; power median 650.5 W, max 650.5; temperature max 62 C$" $W/clk.err ||
    fail "gpu_clocks.sh summary: $(cat $W/clk.err)"
mkdir -p $W/nosmi && ln -sf "$(command -v sh)" $W/nosmi/sh
PATH=$W/nosmi "$(command -v bash)" tests/gpu/gpu_clocks.sh $W/none.csv sh -c 'exit 4' 2> $W/none.err
rc=$?
[ $rc = 4 ] && [ "$(wc -l < $W/none.err)" = 1 ] && grep -q 'no nvidia-smi' $W/none.err && [ ! -e $W/none.csv ] ||
    fail "gpu_clocks.sh without nvidia-smi: exit $rc, $(cat $W/none.err)"
ok "gpu_clocks.sh: fake nvidia-smi queried as the issue asks, stopped after the command (exit 3 passed on); $(cat $W/clk.err)"

# the strong PyTorch baseline, its CPU smoke mode
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
    timeout 60 /usr/bin/python3 tests/gpu/torch_train_strong.py --cpu-smoke > $W/torch.txt 2>&1 ||
        fail "torch_train_strong.py --cpu-smoke: $(tail -3 $W/torch.txt)"
    grep -q '^equal: strong vs reference logits' $W/torch.txt && grep -q '^torch-strong smoke tok/s [0-9.]* ms/step' $W/torch.txt ||
        fail "torch_train_strong.py --cpu-smoke: $(cat $W/torch.txt)"
    if ! /usr/bin/python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2> /dev/null; then
        /usr/bin/python3 tests/gpu/torch_train_strong.py --model base > /dev/null 2> $W/torch.err &&
            fail "torch_train_strong.py ran without a GPU"
        [ "$(wc -l < $W/torch.err)" = 1 ] && grep -q '^error: ' $W/torch.err || fail "without a GPU: $(cat $W/torch.err)"
    fi
    ok "torch_train_strong.py --cpu-smoke: $(head -1 $W/torch.txt); $(tail -1 $W/torch.txt | cut -c1-60)..."
else
    echo "note: /usr/bin/python3 has no torch: torch_train_strong.py --cpu-smoke not run"
fi

# the kit's plan and its calls
bash tests/gpu/kit.sh --plan > $W/plan.txt || fail "kit.sh --plan: $(cat $W/plan.txt)"
bash tests/gpu/accept.sh --plan > $W/accept-plan.txt || fail "accept.sh --plan: $(cat $W/accept-plan.txt)"
python3 - $W/plan.txt docs/gpu-accept.md $W/accept-plan.txt <<'PY' > $W/plancheck.txt || fail "the kit's plan: $(cat $W/plancheck.txt)"
import json, re, sys
plan, doc = open(sys.argv[1]).read(), open(sys.argv[2]).read()
calls = re.findall(r"^call (\d+): (\d+) s = .*\((\d+) files\)$", plan, re.M)
runs = re.findall(r"^  run (\{.*\})$", plan, re.M)
assert 1 <= len(calls) <= 3 and len(runs) == len(calls), (calls, runs)
assert all(int(t) <= 540 and int(f) <= 8 for _, t, f in calls), calls
assert sum(int(t) for _, t, _ in calls) <= 360, calls
# one session: a fresh machine's start (90 s), gpu-accept's calls, the kit's
accept = [int(t) for t in re.findall(r"^call \d+: (\d+) s = ", open(sys.argv[3]).read(), re.M)]
session = 90 + sum(accept) + sum(int(t) for _, t, _ in calls)
assert accept and session <= 900, ("over a session's 900 s", accept, calls)
for (_, t, _), r in zip(calls, runs):
    a = json.loads(r)  # timeout_s: the call's budget and 60 s, so a hung call costs its budget
    assert len(a["command"]) <= 2000 and a["timeout_s"] == min(600, int(t) + 60) and len(a["carry"]) <= 8, a
    assert r in doc, ("docs/gpu-accept.md does not give", r)
print("%d call(s), %s s, each <= 540 s and <= 8 files, commands in docs/gpu-accept.md; a session: 90 s start + gpu-accept %s s + kit = %d s <= 900 s"
      % (len(calls), "+".join(t for _, t, _ in calls), "+".join(map(str, accept)), session))
PY
KIT_BUDGET_compile=900 bash tests/gpu/kit.sh --plan > /dev/null 2> $W/planerr.txt && fail "a 900 s compile stage was accepted"
grep -q '^error: gpu-kit: plan: call 1 takes up to' $W/planerr.txt || fail "over-budget plan: $(cat $W/planerr.txt)"
KIT_BUDGET_compile=220 bash tests/gpu/kit.sh --plan > /dev/null 2> $W/planerr.txt && fail "a plan over the kit's 360 s was accepted"
grep -qx 'error: gpu-kit: plan: the calls take up to 430 s, over 360 s' $W/planerr.txt || fail "over the kit's share: $(cat $W/planerr.txt)"
CALL=7 bash tests/gpu/kit.sh $W/x > /dev/null 2> $W/callerr.txt && fail "CALL=7 accepted"
[ "$(wc -l < $W/callerr.txt)" = 1 ] || fail "CALL=7: $(cat $W/callerr.txt)"
cat > $W/fake/nvidia-smi <<'SH'
#!/bin/sh
case "$*" in
*-lms*) echo "clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, utilization.gpu [%]"
        while :; do echo "1980 MHz, 2619 MHz, 650.5 W, 61, 98 %"; sleep 0.05; done ;;
*) echo "NVIDIA H100 80GB HBM3 (stub), 1980 MHz" ;;
esac
SH
export KIT_WORK=$W/kitwork KIT_GPU_MODEL=$M KIT_GEMM_PEAK=$P KIT_PEAK_N=64 KIT_REPS=2
export KIT_MODEL_ARGS="--batch 4 --len 9 n_layers=1 d_model=32 d_ff=64 n_heads=2 d_k=16 d_v=16 vocab_size=100 precision=bf16"
# (the budgets are a GPU's: on the emulator, on 2 shared cores, they would
# make the verdict depend on the machine's load, issue 41)
PATH=$W/fake:$PATH KIT_BUDGET_timing=300 KIT_BUDGET_sweep=300 STAGE=timing,sweep bash tests/gpu/kit.sh $W/kitout > $W/kit.txt 2>&1 || fail "kit.sh timing,sweep: $(cat $W/kit.txt; cat $W/kitout/kit.md)"
[ "$(grep -c '^- PASS' $W/kitout/kit.md)" = 8 ] && ! grep -q '^- FAIL' $W/kitout/kit.md &&
    grep -q '^step: measured' $W/kitout/kit.md && grep -q '^gpu_clocks: [0-9]* samples' $W/kitout/kit.md ||
    fail "kit.md: $(cat $W/kitout/kit.md)"
for f in time_base.csv trace_base.csv fit_base.txt time_big.csv sweep.csv peak.txt clocks.csv; do
    tar tzf $W/kitout/kit.tgz | grep -qx "./$f" || fail "kit.tgz has no $f"
done
PATH=$W/fake:$PATH KIT_BUDGET_sweep=1 STAGE=sweep bash tests/gpu/kit.sh $W/kitout2 > /dev/null 2>&1 && fail "a stage past its budget passed"
grep -q '^- FAIL sweep: stopped at its budget of 1 s' $W/kitout2/kit.md || fail "budget: $(cat $W/kitout2/kit.md)"
ok "kit.sh: plan $(cat $W/plancheck.txt); over-budget plan refused; timing and sweep end to end on the emulator (8 PASS, the fit, 7 files in kit.tgz); a stage past its budget fails"

# the levers stage (issue 44's A/B pairs in one window): base′ with and
# without CUDA Graphs, base's attention gemm and fused, the ReLU mask 1 and
# 0; each pair's times and speed-up reported, the graphs pair's hashes equal.
# Then a gpu_model whose --graphs runs end with other parameters (a planted
# wrapper changing the hash it prints): the equality check fails the stage.
export KIT_PRIME_ARGS="--model base $KIT_MODEL_ARGS" KIT_LEVER_STEPS=2
PATH=$W/fake:$PATH KIT_BUDGET_levers=600 STAGE=levers bash tests/gpu/kit.sh $W/lev > $W/lev.txt 2>&1 ||
    fail "kit.sh levers: $(cat $W/lev.txt; cat $W/lev/kit.md)"
m=$W/lev/kit.md
[ "$(grep -c '^- PASS' $m)" = 7 ] && ! grep -q '^- FAIL' $m || fail "levers: not 7 PASS lines: $(cat $m)"
grep -q '^- PASS base′: the same parameters with and without CUDA Graphs ([0-9a-f]*, [0-9a-f]*)$' $m || fail "levers: no hash check: $(cat $m)"
for w in "base′, CUDA Graphs: .* ms/step (prime-eager), .* ms/step (prime-graphs): prime-graphs is [0-9.]*x as fast" \
         "base, attention: .* (attention-gemm), .* (attention-fused): attention-fused is [0-9.]*x as fast" \
         "base, feed-forward backward: .* (relu-mask-1), .* (relu-mask-0): relu-mask-0 is [0-9.]*x as fast"; do
    grep -q "^  $w" $m || fail "levers: no line '$w': $(cat $m)"
done
for f in lever_prime-eager.txt lever_prime-graphs.txt lever_attention-fused.txt lever_relu-mask-0.txt; do
    tar tzf $W/lev/kit.tgz | grep -qx "./$f" || fail "levers: kit.tgz has no $f"
done
printf '#!/bin/sh\ncase "$*" in *--graphs*) "%s" "$@" | sed "s/fnv1a [0-9a-f]*/fnv1a 0123456789abcdef/" ;; *) exec "%s" "$@" ;; esac\n' "$M" "$M" > $W/gm_planted
chmod +x $W/gm_planted
PATH=$W/fake:$PATH KIT_GPU_MODEL=$W/gm_planted KIT_BUDGET_levers=600 STAGE=levers bash tests/gpu/kit.sh $W/lev2 > /dev/null 2>&1 &&
    fail "levers: parameters that differ with CUDA Graphs passed"
grep -q '^- FAIL base′: the same parameters with and without CUDA Graphs ([0-9a-f]*, 0123456789abcdef)' $W/lev2/kit.md ||
    fail "levers: the planted hash was not caught: $(cat $W/lev2/kit.md)"
ok "kit.sh levers on the emulator: 3 A/B pairs with their speed-ups, equal hashes with CUDA Graphs; a planted hash difference fails it"

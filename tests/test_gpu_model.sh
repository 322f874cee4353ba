#!/usr/bin/env bash
# The GPU cost model (make gpu-model, docs/gpu-model.md):
# - its calibration against the H100 measurements of commit 122cb66 stays
#   within +-20% (tests/gpu/gpu_model.sh exits 1 otherwise);
# - the tensor-core FLOPs declared by the GEMMs of a logged base and big
#   step equal gpu-bench's analytic model FLOPs (6 x matmul parameters x
#   tokens + attention), an independent count, within 0.1%; with the
#   fused attention kernels (TRANSFORMER_ATTENTION=fused: in bf16 the
#   tensor-core ones of cuda/attention_tc.cuh) the GEMMs declare all but
#   the attention products, and the kernels those as tensor-core FLOPs of
#   their 16 x 16 tiles (lengths padded to 16: 41 -> 48), within 0.1%;
# - the step of the big model at the paper's batch (25,010 tokens) is
#   logged in dry-run mode without touching its 11.6 GiB of activations;
# - the prediction at the paper's batch is a range (issue 32): floor <=
#   fast end <= point <= slow end, MFU against both named peaks, every
#   guessed setting in the sensitivity table and the measured ones named so,
#   and the GEMM path's floor as cf63d2a logged it equals the review's
#   independent 20.2 / 56.25 ms (this code's is lower: fewer passes);
# - the step's batch goes up in one copy (its trace has one upload);
# - --fit recovers settings planted in a per-call timing CSV made by the
#   model itself (bandwidth fraction 0.6 instead of 0.85, 20 us per cuBLAS
#   call instead of 8, GEMM fixed cost 512 instead of 256, 16-bit overlap
#   0.5 instead of 1), leaves the others where they were, and its residuals
#   are then near zero; a CSV that does not join the step is refused with
#   one line;
# - a GEMM shape class planted 25% slower in that CSV (the FFN's
#   25010x2048x512, 24 calls) is the one --fit flags: the only class whose
#   residual under the common rate is beyond 10% (the model too fast), and
#   the lowest own tile rate by a margin;
# - the default of TRANSFORMER_RELU_MASK is the one the model, anchored to
#   the H200's per-call times of cf63d2a, prices faster (issue 44: the
#   model decides until a GPU measures both);
# - --anchor: a step anchored to its own timing prices as the model does;
#   the fused-attention step anchored to the GEMM path's timing splits into
#   measured and priced sums that equal an independent join in Python;
#   --changed alone or naming no kernel of the step, --anchor with
#   --graphs and a timing that does not join its trace are refused with
#   one line.
# - --graphs on base' (Table 3's scaled base): the model's host launches
#   per step without and with CUDA Graphs equal the emulator's counts of an
#   eager and a replayed step, and the step is predicted shorter with them.
set -u
. "$(dirname "$0")/lib.sh"
M=$TOP/bin/tests/gpu_model
[ -x "$M" ] || skip "bin/tests/gpu_model not built (no CUDA headers for the emulator)"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cd "$TOP" || fail "cd $TOP"

bash tests/gpu/gpu_model.sh > $W/model.txt 2>&1 || fail "gpu_model.sh: $(grep -E 'calibration|error' $W/model.txt | tail -3)"
ok "calibration: $(grep '^calibration [a-z]*:' $W/model.txt | tr '\n' ' ')"

for row in "base 6 512 2048" "big 6 1024 4096"; do
    set -- $row
    # the GEMM path (TRANSFORMER_ATTENTION=gemm): attention on tensor cores too
    got=$(awk '/^total/ {print $4}' <<< "$(TRANSFORMER_ATTENTION=gemm $M --model $1 precision=bf16)")
    read -r want want_mm want_att <<< "$(python3 -c "
N,d,dff,B,L,V=$2,$3,$4,300,41,37000
mm = N*(4*d*d+2*d*dff)*B*L + N*(8*d*d+2*d*dff)*B*L + V*d*B*L
att = 3*N*4*L*L*d*B*3
print((6*mm + att) / 1e12, 6*mm / 1e12, att / 1e12)")"
    python3 -c "import sys; g, w = $got, $want; sys.exit(abs(g - w) > 1e-3 * w)" ||
        fail "$1: the GEMMs declare $got TFLOP, the model FLOPs are $want"
    ok "$1: GEMMs declare $got tensor-core TFLOP per step = the analytic $want"
    # the fused attention kernels in bf16 (cuda/attention_tc.cuh): the
    # GEMMs declare the rest; the kernels the attention products as the
    # tensor-core FLOPs of their tiles, 41 tokens padded to 48, and the
    # one-kernel backward's recomputed scores Q K^T (tc_recompute_p): one
    # product more than the 6 of forward and backward, so 7/6
    out=$(TRANSFORMER_ATTENTION=fused $M --model $1 precision=bf16)
    read -r got att <<< "$(awk '/^total/ {t = $4} /^attention_(forward|backward) / {a += $4}
                                END {printf "%.6f %.6f\n", t - a, a}' <<< "$out")"
    want_tiles=$(python3 -c "print($want_att * (48 / 41) ** 2 * 7 / 6)")
    python3 -c "import sys; g, w = $got, $want_mm; sys.exit(abs(g - w) > 1e-3 * w)" ||
        fail "$1, fused attention: the GEMMs declare $got TFLOP, the model FLOPs without attention are $want_mm"
    python3 -c "import sys; a, w = $att, $want_tiles; sys.exit(abs(a - w) > 1e-3 * w + 1e-3)" ||
        fail "$1, fused attention: its kernels declare $att tensor-core TFLOP, the padded products are $want_tiles"
    ok "$1, fused attention: GEMMs $got TFLOP = the analytic $want_mm, attention tiles $att TFLOP = $want_tiles"
done

rss=$(python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    subprocess.run(sys.argv[2:], stdout=out, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' $W/big.txt $M --model big --batch 610 --len 41 precision=bf16) ||
    fail "big step at 25010 tokens"
[ "$rss" -lt 3000000 ] || fail "the dry-run big step used $rss kB of memory (its activations were touched)"
ok "big model, 25010 tokens: logged in dry run with $((rss / 1024)) MiB resident ($(grep -o 'activations.*' $W/big.txt))"

# the prediction as a range (make gpu-model's summary and tables)
python3 - "$W/model.txt" <<'PY' > $W/ranges.txt || fail "the ranges of make gpu-model: $(cat $W/ranges.txt)"
import re, sys
out = open(sys.argv[1]).read()
for m in ("base", "big"):
    line = lambda what: re.search(r"^%s: %s.*$" % (m, what), out, re.M).group(0)
    floor = float(re.search(r"cost: ([\d.]+) ms", line("floor:")).group(1))
    point = float(re.search(r"estimate: ([\d.]+) ms", line("point estimate:")).group(1))
    lo, hi = map(float, re.search(r"range %s: ([\d.]+)\.\.([\d.]+) ms" % m, line("range %s:" % m)).groups())
    assert floor <= lo <= point <= hi, (m, floor, lo, point, hi)
    for what in ("floor:", "point estimate:"):
        assert "of the data sheet's 989 TFLOP/s" in line(what) and "of the measured random-data 798" in line(what), what
    table = out[out.index("== range, %s," % m):]
    table = table[:table.index("\nrange %s:" % m)]
    for key, kind in (("tc_frac", "measured"), ("latency_s", "fitted"), ("overlap32", "fitted")):
        assert re.search(r"^  %s +\S+( us)? +%s" % (key, kind), table, re.M), (m, key, kind)
    for key in ("hbm_frac", "tile", "k_fixed", "splitk_depth", "overlap16", "dev_launch_s", "dev_gemm_s",
                "host_launch_s", "host_gemm_s", "host_sync_s"):
        assert len(re.findall(r"^  %s +\S+( us)? +guessed +[\d.]+ ms" % key, table, re.M)) == 2, (m, key)
    print("%s: floor %.2f ms <= range %.2f..%.2f ms, point %.2f ms;" % (m, floor, lo, hi, point), end=" ")
PY
ok "ranges: $(cat $W/ranges.txt)MFU of 989 and 798 named; measured and guessed settings named"
C0=tests/gpu/calibration/cf63d2a-h200
# the floor of the GEMM path (TRANSFORMER_ATTENTION=gemm, with the ReLU
# bit-mask's DRELU matmul, TRANSFORMER_RELU_MASK=1) as cf63d2a logged it
# (its committed trace) equals the gpu-review notes' floors, computed apart
# from this code for that step; this code's step on that path has passes
# fewer (the LayerNorm's parameter gradients inside its backward), so its
# floor lies below the review's, by no more than the colsum passes removed
for row in "base 20.2" "big 56.25"; do
    set -- $row
    floor_of() { sed -n 's/^floor: .*cost: \([0-9.]*\) ms.*$/\1/p'; }
    floor=$($M --model $1 --trace $C0/trace_$1.csv --range precision=bf16 | floor_of)
    python3 -c "import sys; sys.exit(not abs($floor / $2 - 1) < 0.01)" 2>/dev/null ||
        fail "$1: the floor of cf63d2a's GEMM path is '$floor' ms, the review's $2"
    now=$(TRANSFORMER_ATTENTION=gemm TRANSFORMER_RELU_MASK=1 $M --model $1 --batch 610 --len 41 --range precision=bf16 |
          floor_of)
    python3 -c "import sys; sys.exit(not 0.95 * $2 < $now <= $floor)" 2>/dev/null ||
        fail "$1: this code's floor of the GEMM path is '$now' ms, not within 5% under cf63d2a's $floor"
    ok "$1: floor of cf63d2a's GEMM path $floor ms = the review's $2 ms; this code's $now ms"
done

# the DRELU path (issue 44): until a GPU measures both, the model's point
# estimate anchored to the H200's per-call times of cf63d2a (gpu_model
# --anchor, the settings fitted to them) decides TRANSFORMER_RELU_MASK's
# default, so the default must price as the faster of =0 and =1 there
# (docs/gpu-model.md sections 11 and 12)
C=tests/gpu/calibration/cf63d2a-h200
relu_ms() {
    # shellcheck disable=SC2046
    env -u TRANSFORMER_RELU_MASK ${2:+TRANSFORMER_RELU_MASK=$2} $M --model $1 --batch 610 --len 41 precision=bf16 \
        $(sed -n 's/^fitted: //p' $C/fit_$1.txt) --anchor $C/trace_$1.csv $C/time_$1.csv --changed k_xent |
        sed -n 's/^anchored step: \([0-9.]*\) ms.*/\1/p'
}
for model in base big; do
    d=$(relu_ms $model) m0=$(relu_ms $model 0) m1=$(relu_ms $model 1)
    python3 -c "import sys; d, a, b = $d, $m0, $m1; sys.exit(not (a != b and d == min(a, b)))" 2>/dev/null ||
        fail "$model: the default's anchored step is '$d' ms, TRANSFORMER_RELU_MASK=0 '$m0', =1 '$m1': the default is not the faster"
    ok "$model: the default's anchored step $d ms = the faster of TRANSFORMER_RELU_MASK=0 ($m0 ms) and =1 ($m1 ms)"
done

# --fit against settings planted in a timing CSV that the model writes itself
PLANTED="hbm_frac=0.6 host_gemm_s=20e-6 k_fixed=512 overlap16=0.5"
# shellcheck disable=SC2086
$M --model base --batch 610 --len 41 precision=bf16 --write-trace $W/trace.csv --write-timing $W/planted.csv \
    $PLANTED > /dev/null || fail "--write-timing"
# the batch goes up in one copy and one wait (model_upload_batch), not one
# per array: a step's trace has one upload, of at least the six arrays'
# bytes (610 x 41 tokens a side: source, target in and out; 3 x 610 ints)
read -r ups bytes <<< "$(awk -F, '$1 == "upload" && $3 == "host" { n++; b += $5 } END { print n + 0, b + 0 }' $W/trace.csv)"
[ "$ups" = 1 ] && [ "$bytes" -ge $(( (3 * 610 * 41 + 3 * 610) * 4 )) ] ||
    fail "the step's batch upload: $ups copies of $bytes bytes in all (want 1 of >= $(( (3 * 610 * 41 + 3 * 610) * 4 )))"
ok "the step's batch in one upload of $bytes bytes"
$M --model base --trace $W/trace.csv --fit $W/planted.csv precision=bf16 > $W/fit.txt || fail "--fit: $(tail -1 $W/fit.txt)"
python3 - "$W/fit.txt" <<'PY' > $W/fitted.txt || fail "--fit did not recover the planted settings: $(cat $W/fitted.txt $W/fit.txt)"
import re, sys
out = open(sys.argv[1]).read()
fitted = dict((k, float(v)) for k, v in re.findall(r" (\w+)=(\S+)", re.search(r"^fitted:.*$", out, re.M).group(0)))
# planted (the first four) and left as the model has them, each with its tolerance
want = {"hbm_frac": (0.6, 0.005), "host_gemm_s": (20e-6, 0.1e-6), "k_fixed": (512, 16), "overlap16": (0.5, 0.05),
        "tc_frac": (0.84 * 8448 / 8192, 0.005), "dev_launch_s": (1e-6, 0.05e-6), "dev_gemm_s": (2e-6, 0.2e-6),
        "host_launch_s": (3e-6, 0.05e-6), "host_sync_s": (10e-6, 0.2e-6), "tile": (128, 0), "splitk_depth": (4, 0)}
bad = [(k, fitted[k], v) for k, (v, tol) in want.items() if abs(fitted[k] - v) > tol]
assert not bad, bad
before, after = out.split("after the fit:")
rows = lambda text: re.findall(r"^  ((?:host|device): [^\d]+?) +(\d+) +([\d.]+) +([\d.]+) +([-+][\d.]+)% +([\d.]+)", text, re.M)
assert len(rows(after)) == 5 and len(rows(before)) == 5, (rows(before), rows(after))
for name, calls, meas, pred, rel, rms in rows(after):
    assert abs(float(rel)) < 0.05 and float(rms) < 0.05, ("residual after the fit", name, rel, rms)
worst = max(abs(float(r[4])) for r in rows(before))
assert worst > 20, ("the planted errors should show before the fit", worst)
meas, b, a = map(float, re.search(r"measured ([\d.]+) ms, predicted ([\d.]+) ms before the fit, ([\d.]+) ms after", out).groups())
assert abs(a / meas - 1) < 1e-4, (meas, a)
print("hbm_frac %(hbm_frac)g, host_gemm_s %(host_gemm_s)g, k_fixed %(k_fixed)g, overlap16 %(overlap16)g" % fitted,
      "(planted 0.6, 2e-05, 512, 0.5); residual per class after the fit < 0.05%% and 0.05 us rms (before: up to %.0f%%);" % worst,
      "step %.3f ms measured, %.3f after the fit, %.3f before" % (meas, a, b))
PY
ok "--fit: $(cat $W/fitted.txt)"

# one GEMM shape class planted 25% slower (device time only) is flagged
$M --model base --batch 610 --len 41 precision=bf16 --write-timing $W/model.csv > /dev/null || fail "--write-timing"
awk -F, 'BEGIN { OFS = "," } NR > 1 && $4 == "gemm" && $5 == 25010 && $6 == 2048 && $7 == 512 { $9 = sprintf("%.4f", 1.25 * $9) } { print }' \
    $W/model.csv > $W/slow.csv
$M --model base --trace $W/trace.csv --fit $W/slow.csv precision=bf16 > $W/fit_slow.txt || fail "--fit slow.csv"
python3 - "$W/fit_slow.txt" <<'PY' > $W/flagged.txt || fail "--fit did not flag the planted GEMM shape class: $(cat $W/flagged.txt)"
import re, sys
out = open(sys.argv[1]).read()
shapes = out[out.index("GEMM shape classes"):]
rows = re.findall(r"^  (\d+x\d+x\d+(?:x\d+)?), 2B +\d+ +[\d.]+ +[\d.]+ +([-+][\d.]+)% +[\d.]+ +own tc_frac = ([\d.]+)", shapes, re.M)
assert len(rows) >= 15, rows
planted = "25010x2048x512"
res = {s: float(r) for s, r, _ in rows}
own = {s: float(o) for s, _, o in rows}
assert res[planted] < -10, ("the planted class's residual", res[planted])
others = {s: r for s, r in res.items() if s != planted}
assert all(abs(r) < 10 for r in others.values()), ("another class beyond 10%", others)
low = sorted(own.values())
assert own[planted] == low[0] and low[1] - low[0] > 0.05, ("the planted class's own rate is not the lowest by 0.05", own)
print("%s: residual %+.1f%% under the common rate (others within %.1f%%), own tc_frac %.3f (next lowest %.3f)"
      % (planted, res[planted], max(abs(r) for r in others.values()), own[planted], low[1]))
PY
ok "--fit flags a GEMM shape class planted 25% slower: $(cat $W/flagged.txt)"

# the fitted: line, passed back as key=value, prices the step as measured
fitted=$(sed -n 's/^fitted: //p' $W/fit.txt)
measured=$(sed -n 's/^step: measured \([0-9.]*\) ms.*/\1/p' $W/fit.txt)
# shellcheck disable=SC2086
priced=$($M --model base --trace $W/trace.csv precision=bf16 $fitted | awk '/^predicted H100-SXM/ {print $3}')
python3 -c "import sys; sys.exit(abs($priced / $measured - 1) > 1e-3)" ||
    fail "the fitted settings price the step at $priced ms, measured $measured ms"
ok "the fitted settings passed back price the step at $priced ms (measured $measured ms)"

# a CSV that does not join the step (a row dropped, two swapped, a wrong
# header, the same calls at another batch): refused with one line
sed '5d' $W/planted.csv > $W/dropped.csv
awk 'NR == 11 { held = $0; next } { print } NR == 12 { print held }' $W/planted.csv > $W/swapped.csv
sed '1s/measured_us/device_us/' $W/planted.csv > $W/header.csv
$M --model base --batch 300 --len 41 precision=bf16 --write-timing $W/other.csv > /dev/null || fail "--write-timing"
for bad in dropped swapped header other; do
    $M --model base --trace $W/trace.csv --fit $W/$bad.csv precision=bf16 > $W/out.txt 2> $W/err.txt
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l < $W/err.txt)" -eq 1 ] && grep -q '^error: ' $W/err.txt && [ ! -s $W/out.txt ] ||
        fail "--fit $bad.csv: exit $rc, stderr $(cat $W/err.txt), stdout $(head -2 $W/out.txt)"
    ok "--fit $bad.csv refused: $(cat $W/err.txt)"
done

# --anchor (docs/gpu-model.md section 12): a step anchored to its own
# timing takes every call's time from it and prices as the model does at
# the settings that wrote the timing
# shellcheck disable=SC2086
out=$($M --model base --batch 610 --len 41 precision=bf16 $PLANTED --anchor $W/trace.csv $W/planted.csv) ||
    fail "--anchor: $out"
read -r own priced <<< "$(sed -n 's/^this step: .* (\([0-9.]*\) ms), \([0-9]*\) priced .*/\1 \2/p' <<< "$out")"
read -r pred <<< "$(awk '/^total/ { print $6 }' <<< "$out")"
read -r anch <<< "$(sed -n 's/^anchored step: \([0-9.]*\) ms.*/\1/p' <<< "$out")"
[ "$priced" = 0 ] && python3 -c "import sys; sys.exit(abs($anch / $pred - 1) > 1e-4)" ||
    fail "--anchor to its own timing: $priced calls priced, anchored $anch ms, the model $pred ms"
ok "--anchor to its own timing: every call taken from it, anchored $anch ms = the model's $pred ms at those settings"
# the fused-attention step anchored to the GEMM path's timing, k_xent
# marked changed: the measured and priced sums equal an independent join
# of the two traces by class (op, call, kind, bytes, FLOPs, shape) in
# Python, with the waits taken out of both timings as measured_waits does
TRANSFORMER_ATTENTION=fused $M --model base --batch 610 --len 41 precision=bf16 --write-trace $W/fused.csv \
    --write-timing $W/fused_time.csv > /dev/null || fail "--write-trace fused"
out=$(TRANSFORMER_ATTENTION=fused $M --model base --batch 610 --len 41 precision=bf16 \
      --anchor $W/trace.csv $W/planted.csv --changed k_xent) || fail "--anchor fused: $out"
echo "$out" > $W/anchor_out.txt
python3 - "$W" <<'PY' > $W/anchored.txt || fail "--anchor fused: $(cat $W/anchored.txt)"
import csv, re, sys
w = sys.argv[1]
out = open(w + "/anchor_out.txt").read()
def step(trace, timing):
    rows = list(csv.DictReader(open(trace)))
    t = list(csv.DictReader(open(timing)))
    H = D = 0.0
    dev = []
    for r, m in zip(rows, t):
        if r["kind"] == "sync": H += float(m["host_us"]); dev.append(None); continue
        H += float(m["host_us"]); wait = max(0.0, H - D); D += float(m["measured_us"])
        dev.append(None if r["kind"] == "comm" else float(m["measured_us"]) - wait)
    key = lambda r: tuple(r[k] for k in ("op", "call", "kind", "rd", "wr", "flop_tc", "flop", "tc", "m", "n", "k", "batch", "operand"))
    return [(key(r), d) for r, d in zip(rows, dev)]
anchor, classes = step(w + "/trace.csv", w + "/planted.csv"), {}
for k, d in anchor:
    if d is not None: classes.setdefault(k, []).append(d)
measured = priced = 0.0
n_priced = 0
for k, d in step(w + "/fused.csv", w + "/fused_time.csv"):
    if d is None: continue
    if k in classes and not k[1].startswith("k_xent<"): measured += sum(classes[k]) / len(classes[k])
    else: priced += d; n_priced += 1
got = re.search(r"^this step: (\d+) calls .* \(([\d.]+) ms\), (\d+) priced .* \(([\d.]+) ms\)", out, re.M).groups()
assert abs(float(got[1]) - measured / 1e3) < 2e-3 and abs(float(got[3]) - priced / 1e3) < 2e-3 and int(got[2]) == n_priced, \
    (got, measured / 1e3, priced / 1e3, n_priced)
for want in (r"attention_forward +k_attention_forward_tc<T> .*not in the anchor", r"xent +k_xent<A> .*changed since",
             r"gemm_batched +cublasGemmBatchedEx +41x41x64xB"):
    assert re.search(want, out), want
print("measured %.3f ms, priced %.3f ms over %d calls (Python's join: %.3f, %.3f)" % (float(got[1]), float(got[3]),
      n_priced, measured / 1e3, priced / 1e3))
PY
ok "--anchor fused to the GEMM path's timing: $(cat $W/anchored.txt)"
# refused with one line: --changed alone, --anchor under --graphs, a
# timing that does not join its trace, a --changed name no kernel has
for bad in "--changed k_xent" "--graphs --anchor $W/trace.csv $W/planted.csv" "--anchor $W/trace.csv $W/other.csv" \
           "--anchor $W/trace.csv $W/planted.csv --changed k_xent,k_xnet"; do
    # shellcheck disable=SC2086
    $M --model base --batch 610 --len 41 precision=bf16 $bad > $W/out.txt 2> $W/err.txt
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l < $W/err.txt)" -eq 1 ] && grep -q '^error: ' $W/err.txt ||
        fail "$bad: exit $rc, stderr $(cat $W/err.txt)"
    ok "${bad%% *} refused: $(cat $W/err.txt)"
done

# CUDA Graphs (cuda/graph.cuh; gpu_model --graphs): base' (Table 3's scaled
# base, a batch of 140 x 14 tokens) priced under its graphs beside the same
# step without: the model's host launches per step without and with graphs
# equal the emulator's counts of an eager and of a replayed step (dry run);
# far fewer launches, and a shorter predicted H100 step, with graphs
out=$($M --config input/table3-m30k/base.cfg --batch 140 --len 14 --graphs precision=bf16) || fail "--graphs: $out"
read -r wo wi <<< "$(sed -n 's/^CUDA Graphs: host launches per step \([0-9]*\) without, \([0-9]*\) with .*/\1 \2/p' <<< "$out")"
read -r eo ei <<< "$(sed -n 's/^emulator: host launches per step: \([0-9]*\) eager; \([0-9]*\) replayed .*/\1 \2/p' <<< "$out")"
[ -n "$wo" ] && [ "$wo" = "$eo" ] && [ "$wi" = "$ei" ] && [ "$((10 * wi))" -lt "$wo" ] ||
    fail "--graphs: launches without/with: model $wo/$wi, emulator $eo/$ei: $(grep -E '^(CUDA|emulator)' <<< "$out")"
read -r t0 t1 <<< "$(awk '/^CUDA Graphs: H100-SXM/ { print $4, $7 }' <<< "$out")"
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b > 0 && b < a) }' || fail "--graphs: H100 $t1 ms/step with graphs, $t0 without"
ok "base' under CUDA Graphs: $wo host launches without, $wi with (= the emulator's counts); H100 $t0 -> $t1 ms/step"

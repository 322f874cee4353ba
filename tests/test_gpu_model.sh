#!/usr/bin/env bash
# The GPU cost model (make gpu-model, docs/gpu-model.md):
# - its calibration against the H100 measurements of commit 122cb66 stays
#   within +-20% (tests/gpu/gpu_model.sh exits 1 otherwise);
# - the tensor-core FLOPs declared by the GEMMs of a logged base and big
#   step equal gpu-bench's analytic model FLOPs (6 x matmul parameters x
#   tokens + attention), an independent count, within 0.1%;
# - the step of the big model at the paper's batch (25,010 tokens) is
#   logged in dry-run mode without touching its 11.6 GiB of activations.
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
    got=$(awk '/^total/ {print $4}' <<< "$($M --model $1 precision=bf16)")
    want=$(python3 -c "
N,d,dff,B,L,V=$2,$3,$4,300,41,37000
mm = N*(4*d*d+2*d*dff)*B*L + N*(8*d*d+2*d*dff)*B*L + V*d*B*L
print((6*mm + 3*N*4*L*L*d*B*3) / 1e12)")
    python3 -c "import sys; g, w = $got, $want; sys.exit(abs(g - w) > 1e-3 * w)" ||
        fail "$1: the GEMMs declare $got TFLOP, the model FLOPs are $want"
    ok "$1: GEMMs declare $got tensor-core TFLOP per step = the analytic $want"
done

rss=$(python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    subprocess.run(sys.argv[2:], stdout=out, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' $W/big.txt $M --model big --batch 610 --len 41 precision=bf16) ||
    fail "big step at 25010 tokens"
[ "$rss" -lt 3000000 ] || fail "the dry-run big step used $rss kB of memory (its activations were touched)"
ok "big model, 25010 tokens: logged in dry run with $((rss / 1024)) MiB resident ($(grep -o 'activations.*' $W/big.txt))"

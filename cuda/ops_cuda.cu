/* CUDA backend: the op interface of src/ops.h on one GPU, name for name with
 * the CPU reference src/ops_cpu.c.
 *
 * - GEMMs go to cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx).  The
 *   interface is row-major and cuBLAS column-major: a row-major C = op(A)
 *   op(B) is the column-major C^T = op(B)^T op(A)^T, so the operands are
 *   swapped and every transpose stays an operand flag (nothing is copied).
 * - precision: fp32 (IEEE sgemm) or tf32 (tensor cores, 10-bit mantissa
 *   inputs), chosen by the cuBLAS compute type, with everything stored
 *   fp32; or bf16 / fp16 mixed precision ("bf16 storage" in memory.cuh):
 *   activations and GEMM inputs stored bf16 (fp16), every op accumulating
 *   in fp32, fp32 master weights, gradients and Adam state; fp16 adds
 *   dynamic loss scaling in train.c (src/loss_scale.h).
 * - Every other op is a kernel below.  Reductions are block-level tree sums
 *   with a fixed shape, so results are deterministic run to run; no kernel
 *   uses atomics.  Dropout masks come from the same Philox counter as the
 *   CPU (philox.h), so both backends drop exactly the same elements.
 * - Compute runs on one non-blocking stream (I->stream); the gradient
 *   allreduce runs on a second one (I->comm_stream), ordered after each
 *   bucket's gradients by an event (comm.cuh); uploads and downloads
 *   synchronise the compute stream.  The emulator's strict rules STREAMS
 *   and RACE check that ordering (docs/testing.md).
 *
 * The file also compiles with g++ -DCUDA_EMULATION against cuda/emu/, which
 * runs the kernels on the CPU in the tests.
 *
 * It is one translation unit made of one part per concern (as llm.c's
 * train_gpt2.cu includes the headers of llmc/), so that the static helpers stay
 * private to the backend and one ptxas log covers every kernel:
 *   common.cuh   headers, error checks, backend state, block reductions
 *   memory.cuh   memory and precision (bf16 storage, weight shadow); it
 *                includes cost.cuh, the declared costs of the GPU cost model
 *   gemm.cuh     GEMMs, bias epilogue, column sums
 *   softmax.cuh  attention softmax, log-softmax
 *   attention.cuh  the fused attention core (scores, masks, softmax, P V)
 *   norm.cuh     residual + dropout + LayerNorm
 *   embed.cuh    embeddings and positional encodings
 *   xent.cuh     label-smoothed cross-entropy
 *   heads.cuh    head gates (head importance, masked heads)
 *   adam.cuh     optimizer
 *   graph.cuh    CUDA Graphs: the gate of every device call (via cost.cuh)
 *   step_graph.cuh  the training step's graphs by shape, the graph hooks
 *   comm.cuh     gradient allreduce (NCCL, MPI fallback)
 *   device.cuh   device selection, backend creation and teardown */

#include "common.cuh"
#include "memory.cuh"
#include "gemm.cuh"
#include "softmax.cuh"
#include "attention.cuh"
#include "norm.cuh"
#include "embed.cuh"
#include "xent.cuh"
#include "heads.cuh"
#include "adam.cuh"
#include "step_graph.cuh"
#include "comm.cuh"
#include "device.cuh"

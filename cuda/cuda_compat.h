/* What the CUDA sources of cuda/ use instead of raw launch syntax, so
 * that the same file compiles with nvcc for the GPU and with g++
 * (-DCUDA_EMULATION) for the CPU emulator of cuda/emu/, which the tests run
 * where no GPU exists.
 *
 *   LAUNCH(kernel, grid, block, smem_bytes, stream, args...)
 *                               -- unless LAUNCH_GATE(...) says no (graph.cuh)
 *   DYNAMIC_SHARED(T, name);    -- T *name = the block's dynamic shared memory
 *   EMU_SEEN(p, bytes, write);  -- the emulator counts an access (cost model)
 *                                  and checks it (rule ACCESS); nothing on a GPU
 *   EMU_ALIGNED(p, bytes, write); -- the emulator checks a vector access's
 *                                  alignment (rule ACCESS); nothing on a GPU
 *   UNROLL for (...)            -- #pragma unroll for nvcc (a loop over a
 *                                  register array); nothing for g++
 *
 * Kernels use dynamic shared memory: the emulator refills it with 0xFF
 * before every block and watches red zones around it (static __shared__
 * arrays are refilled too, under rule SHARED, but have no red zones). */
#ifndef CUDA_COMPAT_H
#define CUDA_COMPAT_H

/* LAUNCH asks LAUNCH_GATE(kernel, grid, block, smem, stream, args...)
 * whether to launch now: the backend's CUDA Graphs redefine it (graph.cuh)
 * to skip the launches a step graph replays */
#define LAUNCH_GATE(...) true

#ifdef CUDA_EMULATION
#include "emu/emu.h"
#define UNROLL
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

/* the launch's grid and block go to the cost log (cuda/cost.cuh; a no-op
 * unless it is on), so that a step logged on a GPU (gpu_model
 * --time-calls --write-trace) has the shapes the model prices kernels by,
 * as one logged under the emulator does */
extern "C" void cuda_cost_shape(const char *call, double blocks, double threads);
#define LAUNCH(kernel, grid, block, smem, stream, ...)                                      \
    do {                                                                                  \
        if (!LAUNCH_GATE(kernel, grid, block, smem, stream, __VA_ARGS__)) break;          \
        dim3 launch_grid_(grid), launch_block_(block);                                    \
        cuda_cost_shape(#kernel, (double)launch_grid_.x * launch_grid_.y * launch_grid_.z, \
                        (double)launch_block_.x * launch_block_.y * launch_block_.z);     \
        kernel<<<launch_grid_, launch_block_, (smem), (stream)>>>(__VA_ARGS__);           \
    } while (0)
/* 32-byte aligned: wmma's tiles (attention_tc.cuh) must be */
#define DYNAMIC_SHARED(T, name)                                  \
    extern __shared__ __align__(32) unsigned char cuda_dyn_smem_[]; \
    T *name = reinterpret_cast<T *>(cuda_dyn_smem_)
#define EMU_SEEN(p, n, write) ((void)0)
#define EMU_ALIGNED(p, n, write) ((void)0)
#define UNROLL _Pragma("unroll")
#endif

#endif

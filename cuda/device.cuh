/* Device selection and the backend's lifecycle: pick_device (one rank per
 * GPU), backend_cuda_create (the op table) and cuda_destroy. */
#pragma once

#include "step_graph.cuh"

/* ------------------------------------------------------------- lifecycle */

static void cuda_destroy(Backend *be)
{
    CudaImpl *I = IMPL(be);
    cudaStreamSynchronize(I->stream);
    graphs_destroy(I);
    if (I->sin_table) cudaFree(I->sin_table);
    if (I->part) cudaFree(I->part);
    if (I->seg) cudaFree(I->seg);
    if (I->embed_part) cudaFree(I->embed_part);
    if (I->sums_arena) cudaFree(I->sums_arena);
    if (I->gptrs) cudaFree(I->gptrs);
    for (int k = 0; k < 2; k++) {
        if (I->seg_host[k]) cudaFreeHost(I->seg_host[k]);
        cudaEventDestroy(I->seg_copied[k]);
    }
    if (I->shadow) cudaFree(I->shadow);
    if (I->flag) cudaFree(I->flag);
    for (int k = 0; k < 5; k++)
        if (I->gscratch[k]) cudaFree(I->gscratch[k]);
    lt_plans_destroy(I);
    cublasLtMatmulPreferenceDestroy(I->lt_pref);
    cublasLtDestroy(I->lt);
    /* activation buffers the caller did not free */
    for (const auto &a : I->act_size) cudaFree(a.first);
    if (I->comm_stream) {
        cudaStreamSynchronize(I->comm_stream);
#if USE_NCCL
        if (I->use_nccl) ncclCommDestroy(I->nccl);
#endif
        cudaEventDestroy(I->ev_ready);
        cudaEventDestroy(I->ev_done);
        for (const CudaImpl::Staged &st : I->staged) {   /* the MPI fallback's */
            cudaFreeHost(st.host);
            cudaEventDestroy(st.copied);
        }
        cudaStreamDestroy(I->comm_stream);
    }
    cublasDestroy(I->blas);
    cost_time_release(I->stream);
    cudaStreamDestroy(I->stream);
    delete I;
    free(be);
}

/* free device memory in bytes (max_tokens = 0, auto_tokens.h); 0 if
 * the runtime cannot say */
static size_t cuda_device_free(Backend *be)
{
    (void)be;
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return free_b;
}

/* the UUID of the rank's device (ops.h device_uuid) */
static int cuda_device_uuid(Backend *be, unsigned char uuid[16])
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, IMPL(be)->device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    memcpy(uuid, prop.uuid.bytes, 16);
    return 0;
}

/* One rank per GPU: the node-local rank picks the device where every rank
 * sees all n GPUs of the node; where each sees only its own (Slurm
 * --gpus-per-task=1: n = 1), device 0.  More node-local ranks than visible
 * GPUs, or two ranks of a node on one GPU (compared by UUID over the
 * node's ranks: collective), is refused: the ranks would share a GPU's
 * memory and time.  TRANSFORMER_SHARE_GPU=1 allows it (tests on one GPU).
 * Returns the device, or -1 after a one-line error. */
static int pick_device(int local_rank, int n)
{
    const char *share_env = getenv("TRANSFORMER_SHARE_GPU");
    int share = share_env && !strcmp(share_env, "1");
    int dev = share ? local_rank % n : local_rank < n ? local_rank : n == 1 ? 0 : -1;
    int mpi = 0, rank = 0;
    MPI_Initialized(&mpi);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* which node-local rank holds the same GPU (-1: none) */
    int other = -1;
    if (mpi) {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        int me, size;
        MPI_Comm_rank(node, &me);
        MPI_Comm_size(node, &size);
        /* by UUID, not PCI bus id: MIG instances of one GPU share the bus
         * id but are separate devices.  Every rank takes part, sharing
         * allowed or not: the collective must not hang on some ranks. */
        unsigned char id[17] = {0};   /* uuid, then 1 if known */
        cudaDeviceProp prop;
        if (dev >= 0 && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
            memcpy(id, prop.uuid.bytes, 16);
            id[16] = 1;
        } else cudaGetLastError();   /* unknown: not compared */
        std::vector<unsigned char> ids((size_t)size * sizeof id);
        MPI_Allgather(id, sizeof id, MPI_BYTE, ids.data(), sizeof id, MPI_BYTE, node);
        for (int r = 0; r < me && id[16] && other < 0; r++)
            if (!memcmp(&ids[(size_t)r * sizeof id], id, sizeof id)) other = r;
        MPI_Comm_free(&node);
    }
    if (share) return dev;
    if (dev < 0) {
        fprintf(stderr, "error: device=cuda: rank %d on host %s: node-local rank %d but only %d GPUs visible; run one "
                        "rank per GPU\n", rank, host, local_rank, n);
        return -1;
    }
    if (other >= 0) {
        fprintf(stderr, "error: device=cuda: rank %d on host %s: node-local rank %d would share its GPU (%d visible) "
                        "with node-local rank %d; run one rank per GPU\n", rank, host, local_rank, n, other);
        return -1;
    }
    return dev;
}

/* bf16 storage and TF32 tensor cores need compute capability 8.0 (A100);
 * a V100 (7.0) or T4 (7.5) runs fp32 and fp16.  Refused with one line
 * saying what would run, not emulated slowly.  0 after the message. */
static int precision_supported(int dev, Precision prec)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        return 1;   /* unknown: let cuBLAS decide */
    }
    int cc = prop.major * 10 + prop.minor;
    if ((prec == PRECISION_BF16 || prec == PRECISION_TF32) && cc < 80) {
        fprintf(stderr, "error: device=cuda: precision=%s needs compute capability 8.0 or newer, but GPU %d (%s) is "
                        "%d.%d: use precision=fp16 (or fp32)\n",
                config_choice("precision", prec), dev, prop.name, prop.major, prop.minor);
        return 0;
    }
    return 1;
}

/* A GPU runs a kernel only from the build's SASS for its major version
 * (minor at most its own) or from PTX not newer than it (CUDA C++
 * Programming Guide, "Binary Compatibility"); CUDA 13's nvcc has no sm_70,
 * so on a V100 every launch fails with cudaErrorNoKernelImageForDevice.
 * One empty launch at start-up says so in one line, instead of the first
 * op's check failing.  0 after the message. */
#ifndef CUDA_ARCH_LIST
#define CUDA_ARCH_LIST "?"
#endif
static __global__ void k_probe(int unused) { (void)unused; }

static int kernels_run(int dev)
{
    DECLARE_KERNEL(k_probe, "probe", 0, 0, 0, 0);
    LAUNCH(k_probe, 1, 1, 0, 0, 0);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return 1;
    cudaGetLastError();
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        snprintf(prop.name, sizeof prop.name, "?");
        prop.major = prop.minor = 0;
    }
    char arch[64];
    snprintf(arch, sizeof arch, "%s", CUDA_ARCH_LIST);
    for (char *c = arch; *c; c++) if (*c == '_') *c = ' ';
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
        fprintf(stderr, "error: device=cuda: GPU %d (%s) is compute capability %d.%d, and this build has no kernel "
                        "for it (CUDA_ARCH = %s): rebuild with make CUDA_ARCH=%d%d (CUDA 13's nvcc builds 75 and newer)\n",
                dev, prop.name, prop.major, prop.minor, arch, prop.major, prop.minor);
    else fprintf(stderr, "error: device=cuda: GPU %d (%s): a first empty kernel fails: %s\n", dev, prop.name,
                 cudaGetErrorString(e));
    return 0;
}

/* The environment's switches of the CUDA path, checked: 0 after a
 * one-line message on a value that is not one of theirs.
 * TRANSFORMER_ATTENTION=fused runs cuda/attention.cuh (on tensor cores for
 * bf16 and fp16: attention_tc.cuh); the default is
 * attention.c's batched GEMMs and separate softmax, the path a GPU has
 * checked (gpu-accept), until a GPU run checks and times the fused
 * kernels: the cost model, anchored to an H200's per-call times, prices
 * them faster (base bf16 32.61 -> 26.89 ms; docs/performance.md
 * "Anchored predictions"), but they have run on the emulator only.
 * TRANSFORMER_RELU_MASK=0 (the default): the FFN forward keeps no ReLU
 * bit-mask and the backward is a plain GEMM and one masking pass; =1 keeps
 * the cuBLASLt bit-mask for one DRELU matmul, which an H200 ran at a fifth
 * of a plain GEMM's rate (docs/performance.md).  The default is the path
 * the cost model, anchored to that H200's per-call times, prices faster,
 * until a GPU measures both (issue 44; test_gpu_model checks it,
 * docs/gpu-model.md section 11). */
static int env_switches(bool *fused_attention, bool *relu_mask)
{
    const char *attn = getenv("TRANSFORMER_ATTENTION");
    if (attn && *attn && strcmp(attn, "fused") && strcmp(attn, "gemm")) {
        fprintf(stderr, "error: device=cuda: TRANSFORMER_ATTENTION '%s' is not fused or gemm\n", attn);
        return 0;
    }
    const char *rm = getenv("TRANSFORMER_RELU_MASK");
    if (rm && *rm && strcmp(rm, "0") && strcmp(rm, "1")) {
        fprintf(stderr, "error: device=cuda: TRANSFORMER_RELU_MASK '%s' is not 0 or 1\n", rm);
        return 0;
    }
    *fused_attention = attn && !strcmp(attn, "fused");
    *relu_mask = rm && !strcmp(rm, "1");
    return 1;
}

/* the backend's state on GPU dev: its stream, cuBLAS and cuBLASLt handles
 * in the precision's compute type */
static CudaImpl *impl_create(int dev, Precision prec, Allreduce allreduce, bool relu_mask)
{
    CudaImpl *I = new CudaImpl();
    I->device = dev;
    I->precision = prec;
    I->act_dtype = prec == PRECISION_BF16 ? DT_BF16 : prec == PRECISION_FP16 ? DT_F16 : DT_F32;
    I->relu_mask = relu_mask;
    I->want_nccl = allreduce != ALLREDUCE_MPI;
    I->need_nccl = allreduce == ALLREDUCE_NCCL;
    /* (bf16: for GEMMs whose operands are all fp32 storage, e.g. the
     * decoders' own buffers; bf16-stored operands use CUBLAS_COMPUTE_32F;
     * fp16: those few stay plain fp32, which every GPU from sm_70 runs) */
    I->compute = prec == PRECISION_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
               : prec == PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : CUBLAS_COMPUTE_32F;
    CK(cudaStreamCreateWithFlags(&I->stream, cudaStreamNonBlocking));
    cost_time_release(cost_stream);   /* a backend's timing events go with it: one backend is timed */
    cost_stream = I->stream;
    for (int k = 0; k < 2; k++) CK(cudaEventCreateWithFlags(&I->seg_copied[k], cudaEventDisableTiming));
    CKB(cublasCreate(&I->blas));
    CKB(cublasSetStream(I->blas, I->stream));
    /* reductions (split-K partial sums) in the compute type, fp32, never in
     * a bf16 output's type: bf16 GEMMs accumulate in fp32 throughout */
    cublasMath_t math = prec == PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    CKB(cublasSetMathMode(I->blas, (cublasMath_t)(math | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    lt_create(I);
    return I;
}

/* the op table of ops.h over I, name for name with the CPU backend's */
static Backend *op_table(CudaImpl *I, bool fused_attention)
{
    Precision prec = I->precision;
    Backend *be = (Backend *)calloc(1, sizeof *be);
    if (!be) die(1, "out of memory");
    be->name = prec == PRECISION_BF16 ? "cuda-bf16" : prec == PRECISION_TF32 ? "cuda-tf32"
             : prec == PRECISION_FP16 ? "cuda-fp16" : "cuda";
    be->impl = I;
    be->alloc = cuda_alloc;
    be->alloc_act = cuda_alloc_act;
    be->act_dtype = I->act_dtype;
    be->set_params = cuda_set_params;
    be->free = cuda_free;
    be->device_free = cuda_device_free;
    be->device_uuid = cuda_device_uuid;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->zero = cuda_zero;
    be->copy = cuda_copy;
    be->sync = cuda_sync;
    be->upload_act = cuda_upload_act;
    be->download_act = cuda_download_act;
    be->zero_act = cuda_zero_act;
    be->copy_act = cuda_copy_act;
    be->gemm = cuda_gemm;
    be->gemm_batched = cuda_gemm_batched;
    be->bias_forward = cuda_bias_forward;
    be->relu_mask_bytes = I->relu_mask ? cuda_relu_mask_bytes : NULL;   /* no mask kept: none allocated */
    be->linear_bias_forward = cuda_linear_bias_forward;
    be->linear_relu_backward = cuda_linear_relu_backward;
    be->bias_backward = cuda_bias_backward;
    be->softmax_forward = cuda_softmax_forward;
    be->softmax_backward = cuda_softmax_backward;
    be->attention_forward = fused_attention ? cuda_attention_forward : NULL;
    be->attention_backward = fused_attention ? cuda_attention_backward : NULL;
    be->residual_ln_forward = cuda_residual_ln_forward;
    be->residual_ln_backward = cuda_residual_ln_backward;
    be->defer_sums = cuda_defer_sums;
    be->embed_forward = cuda_embed_forward;
    be->embed_backward = cuda_embed_backward;
    be->head_gate_forward = cuda_head_gate_forward;
    be->head_gate_backward = cuda_head_gate_backward;
    be->xent_forward_backward = cuda_xent_forward_backward;
    be->adam = cuda_adam;
    be->log_softmax = cuda_log_softmax;
    be->any_nonfinite = cuda_any_nonfinite;
    be->allreduce_init = cuda_allreduce_init;
    be->allreduce_start = cuda_allreduce_start;
    be->allreduce_wait = cuda_allreduce_wait;
    be->graph_begin = cuda_graph_begin;
    be->graph_break = cuda_graph_break;
    be->graph_end = cuda_graph_end;
    be->graph_reset = cuda_graph_reset;
    be->graph_stats = cuda_graph_stats;
    be->destroy = cuda_destroy;
    return be;
}

extern "C" int backend_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" Backend *backend_cuda_create(Precision prec, Allreduce allreduce, int local_rank)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        fprintf(stderr, "error: device=cuda: no usable CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (allreduce == ALLREDUCE_NCCL && !USE_NCCL) {   /* never ignored silently */
        fprintf(stderr, "error: device=cuda: allreduce=nccl, but this build has no NCCL (nccl.h was not found: "
                        "rebuild with make NCCL_HOME=DIR, or set allreduce=mpi)\n");
        return NULL;
    }
    bool fused_attention, relu_mask;
    if (!env_switches(&fused_attention, &relu_mask)) return NULL;
    int dev = pick_device(local_rank, n);
    if (dev < 0) return NULL;
    if ((e = cudaSetDevice(dev)) != cudaSuccess) {
        fprintf(stderr, "error: device=cuda: cannot use GPU %d: %s\n", dev, cudaGetErrorString(e));
        return NULL;
    }
    if (!kernels_run(dev) || !precision_supported(dev, prec)) return NULL;
    return op_table(impl_create(dev, prec, allreduce, relu_mask), fused_attention);
}

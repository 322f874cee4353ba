/* Communication: the data-parallel gradient allreduce, NCCL on its own
 * stream or MPI on host copies. */
#pragma once

#include "memory.cuh"

/* ------------------------------------------------- gradient allreduce */

#if USE_NCCL
#define CKN(call)                                                                                        \
    do {                                                                                                 \
        ncclResult_t r_ = (call);                                                                        \
        if (r_ != ncclSuccess) die(1, "nccl: %s:%d: %s: %s", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
    } while (0)
#endif

/* MPI fallback: bucket k's pinned staging holds n floats.  The old staging
 * is freed only when nothing uses it: MPI let go of it when the last
 * update's request completed (allreduce_wait), and its last reader, the
 * upload back to the device, was queued on comm_stream before ev_done. */
static CudaImpl::Staged &stage_slot(CudaImpl *I, size_t k, size_t n)
{
    if (I->staged.size() <= k) {
        I->staged.push_back(CudaImpl::Staged{});
        I->reqs.push_back(MPI_REQUEST_NULL);
        CK(cudaEventCreateWithFlags(&I->staged[k].copied, cudaEventDisableTiming));
    }
    CudaImpl::Staged &s = I->staged[k];
    if (n > s.cap) {
        CK(cudaEventSynchronize(I->ev_done));   /* returns at once if never recorded */
        CK(cudaFreeHost(s.host));
        CK(cudaMallocHost((void **)&s.host, n * sizeof(float)));
        s.cap = n;
    }
    return s;
}

/* the next bucket's download into its staging, queued on comm_stream after
 * the work issued so far on the compute stream (which made the gradients
 * final): backward goes on, allreduce_progress posts the sum once the copy
 * is done */
static void stage_download(CudaImpl *I, float *p, size_t n)
{
    CudaImpl::Staged &s = stage_slot(I, I->n_staged, n);
    s.n = n;
    s.dst = p;
    CK(cudaEventRecord(I->ev_ready, I->stream));
    CK(cudaStreamWaitEvent(I->comm_stream, I->ev_ready, 0));
    copy_on(I->comm_stream, COST_COMM, "allreduce", s.host, p, n * sizeof(float), cudaMemcpyDeviceToHost);
    CK(cudaEventRecord(s.copied, I->comm_stream));
    I->n_staged++;
}

/* MPI fallback: post the sums of the buckets whose download is done, in
 * bucket order (every rank must start the collectives in the same order),
 * and test those posted; 1 once every staged bucket is summed.  The calling
 * thread may be gradsync's progress thread: its first runtime call would
 * otherwise make a context on device 0, another rank's GPU. */
static int cuda_allreduce_progress(Backend *be)
{
    CudaImpl *I = IMPL(be);
    static thread_local int current = -1;
    if (current != I->device) CK(cudaSetDevice(current = I->device));
    while (I->n_posted < I->n_staged) {
        CudaImpl::Staged &s = I->staged[I->n_posted];
        if (!event_ready(s.copied)) break;
        MPI_Iallreduce(MPI_IN_PLACE, s.host, (int)s.n, MPI_FLOAT, MPI_SUM, I->comm, &I->reqs[I->n_posted]);
        I->n_posted++;
    }
    int done = 0;
    MPI_Testall((int)I->n_posted, I->reqs.data(), &done, MPI_STATUSES_IGNORE);
    return done && I->n_posted == I->n_staged;
}

/* Do some ranks of I->comm share a GPU (TRANSFORMER_SHARE_GPU=1)?  NCCL
 * does not support two ranks of one communicator on one device ("may lead
 * to hangs", its user guide; since 2.5 ncclCommInitRank refuses it with
 * ncclInvalidUsage, "Duplicate GPU detected"): allreduce=auto then takes
 * the MPI fallback, and allreduce=nccl ends the job with one line, from
 * the higher rank of the first pair (the others wait for the abort).
 * Collective over I->comm. */
static bool nccl_shared_gpu(CudaImpl *I, int rank)
{
    cudaDeviceProp prop;
    bool known = cudaGetDeviceProperties(&prop, I->device) == cudaSuccess;
    if (!known) cudaGetLastError();   /* unknown: compared with nobody */
    DevicePeers p = device_peers(I->comm, known ? (const unsigned char *)prop.uuid.bytes : NULL, NULL);
    if (!p.any_shared || !I->need_nccl) return p.any_shared;
    if (p.first_other >= 0 && p.first_other < rank)
        die(1, "device=cuda: allreduce=nccl, but ranks %d and %d share GPU %d, which NCCL does not support: use "
               "allreduce=mpi (or auto), or one rank per GPU", p.first_other, rank, I->device);
    MPI_Barrier(I->comm);
    die(1, "device=cuda: allreduce=nccl with ranks sharing a GPU");   /* not reached */
}

/* NCCL on its own stream (so that the sums overlap the rest of backward),
 * its unique id broadcast over MPI.  allreduce=mpi (or the older switch
 * TRANSFORMER_NCCL=0), or a build without NCCL, sums through MPI on host
 * copies instead. */
static void cuda_allreduce_init(Backend *be, const void *mpi_comm)
{
    CudaImpl *I = IMPL(be);
    I->comm = *(const MPI_Comm *)mpi_comm;
    int rank;
    MPI_Comm_size(I->comm, &I->nranks);
    MPI_Comm_rank(I->comm, &rank);
    const char *env = getenv("TRANSFORMER_NCCL");
    I->use_nccl = USE_NCCL && I->want_nccl && !(env && !strcmp(env, "0"));
    bool shared = I->use_nccl && nccl_shared_gpu(I, rank);
    I->use_nccl = I->use_nccl && !shared;
    /* the path, said once at start-up (train prints it) */
    be->allreduce_path = I->use_nccl ? "nccl (device buffers, own stream)"
                       : !USE_NCCL ? "mpi on host copies (this build has no NCCL)"
                       : !I->want_nccl ? "mpi on host copies (allreduce=mpi)"
                       : shared ? "mpi on host copies (ranks share a GPU, which NCCL does not support)"
                                : "mpi on host copies (TRANSFORMER_NCCL=0)";
    CK(cudaStreamCreateWithFlags(&I->comm_stream, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&I->ev_ready, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&I->ev_done, cudaEventDisableTiming));
    /* the MPI fallback's sums move only inside MPI calls: polled */
    be->allreduce_progress = I->use_nccl ? NULL : cuda_allreduce_progress;
#if USE_NCCL
    if (I->use_nccl) {
        ncclUniqueId id;
        if (rank == 0) CKN(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, I->comm);
        CKN(ncclCommInitRank(&I->nccl, I->nranks, id, rank));
    }
#endif
}

static void cuda_allreduce_start(Backend *be, float *p, size_t n)
{
    CudaImpl *I = IMPL(be);
    if (!n) return;
    GraphEager eager;   /* a bucket starts between the step graph's segments */
#if USE_NCCL
    if (I->use_nccl) {
        /* the bucket's gradients are final once the compute stream gets here */
        CK(cudaEventRecord(I->ev_ready, I->stream));
        CK(cudaStreamWaitEvent(I->comm_stream, I->ev_ready, 0));
        /* on its own stream, overlapping backward; priced by the model's
         * bus bandwidth (ring: 2 (N-1)/N x the bytes per rank) */
        declare("allreduce", "ncclAllReduce", COST_COMM, n * sizeof(float), n * sizeof(float), 0, (double)n, TC_NONE);
        CKN(ncclAllReduce(p, p, n, ncclFloat32, ncclSum, I->nccl, I->comm_stream));
        return;
    }
#endif
    stage_download(I, p, n);
}

static int comm_rank(CudaImpl *I)
{
    int rank;
    MPI_Comm_rank(I->comm, &rank);
    return rank;
}

#if USE_NCCL
/* An error NCCL meets while its kernels run (a peer that died, a network
 * failure) is not returned by any call: it is polled.  Fatal, one line. */
static void nccl_check_async(CudaImpl *I)
{
    ncclResult_t st = ncclSuccess;
    CKN(ncclCommGetAsyncError(I->nccl, &st));
    if (st != ncclSuccess && st != ncclInProgress) {
        int rank;
        MPI_Comm_rank(I->comm, &rank);
        die(1, "nccl: rank %d: asynchronous error in the gradient allreduce: %s", rank, ncclGetErrorString(st));
    }
}
#endif

static void cuda_allreduce_wait(Backend *be)
{
    CudaImpl *I = IMPL(be);
#if USE_NCCL
    if (I->use_nccl) {
        /* later work on the compute stream (Adam) waits for the sums */
        CK(cudaEventRecord(I->ev_done, I->comm_stream));
        CK(cudaStreamWaitEvent(I->stream, I->ev_done, 0));
        /* the host waits too, so that gradsync's timers see the
         * communication backward did not hide (nothing else is queued);
         * polling NCCL's asynchronous error meanwhile: an allreduce that
         * failed may never complete */
        double t0 = now_seconds();
        while (!event_ready(I->ev_done)) {
            nccl_check_async(I);
            watchdog_check(t0, be->allreduce_timeout_s, comm_rank(I), "the NCCL gradient allreduce");
            sched_yield();
        }
        nccl_check_async(I);
        return;
    }
#endif
    double t0 = now_seconds();
    while (!cuda_allreduce_progress(be))   /* MPI_Waitall with the watchdog */
        watchdog_check(t0, be->allreduce_timeout_s, comm_rank(I), "the MPI gradient allreduce");
    /* the sums back on comm_stream; later work on the compute stream (Adam)
     * waits for them there, the host does not */
    for (size_t k = 0; k < I->n_staged; k++) {
        const CudaImpl::Staged &s = I->staged[k];
        copy_on(I->comm_stream, COST_COMM, "allreduce", s.dst, s.host, s.n * sizeof(float), cudaMemcpyHostToDevice);
    }
    CK(cudaEventRecord(I->ev_done, I->comm_stream));
    CK(cudaStreamWaitEvent(I->stream, I->ev_done, 0));
    I->n_staged = I->n_posted = 0;
}

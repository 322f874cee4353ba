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
    /* the path, said once at start-up (train prints it) */
    be->allreduce_path = I->use_nccl ? "nccl (device buffers, own stream)"
                       : !USE_NCCL ? "mpi on host copies (this build has no NCCL)"
                       : !I->want_nccl ? "mpi on host copies (allreduce=mpi)"
                                       : "mpi on host copies (TRANSFORMER_NCCL=0)";
    CK(cudaStreamCreateWithFlags(&I->comm_stream, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&I->ev_ready, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&I->ev_done, cudaEventDisableTiming));
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
    size_t k = I->reqs.size();
    if (I->stage.size() <= k) I->stage.resize(k + 1);
    I->stage[k].resize(n);
    cuda_download(be, I->stage[k].data(), p, n * sizeof(float));
    I->stage_dst.push_back(p);
    I->reqs.push_back(MPI_REQUEST_NULL);
    MPI_Iallreduce(MPI_IN_PLACE, I->stage[k].data(), (int)n, MPI_FLOAT, MPI_SUM, I->comm, &I->reqs[k]);
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
        cudaError_t q;
        double t0 = now_seconds();
        while ((q = cudaEventQuery(I->ev_done)) == cudaErrorNotReady) {
            nccl_check_async(I);
            watchdog_check(t0, be->allreduce_timeout_s, comm_rank(I), "the NCCL gradient allreduce");
            sched_yield();
        }
        CK(q);
        nccl_check_async(I);
        return;
    }
#endif
    double t0 = now_seconds();
    for (int done = 0; !done;) {   /* MPI_Waitall with the watchdog */
        MPI_Testall((int)I->reqs.size(), I->reqs.data(), &done, MPI_STATUSES_IGNORE);
        if (!done) watchdog_check(t0, be->allreduce_timeout_s, comm_rank(I), "the MPI gradient allreduce");
    }
    for (size_t k = 0; k < I->reqs.size(); k++)
        copy_async(I, "allreduce", I->stage_dst[k], I->stage[k].data(), I->stage[k].size() * sizeof(float),
                   cudaMemcpyHostToDevice);
    stream_sync(I, "allreduce");
    I->reqs.clear();
    I->stage_dst.clear();
}

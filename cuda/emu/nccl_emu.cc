/* NCCL for the CUDA emulator: the calls the backend uses, compiled against
 * the real nccl.h, mapped onto MPI.  A communicator is MPI_COMM_WORLD
 * checked against the (nranks, rank) the caller passes; the unique id must
 * be the same on every rank (it is broadcast over MPI by the backend, and
 * the emulator checks that it arrived).  Buffers must be device memory. */
#include "emu.h"

#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <memory>

struct ncclComm {
    int nranks, rank;
    MPI_Comm mpi;   /* a duplicate of MPI_COMM_WORLD: the collectives' own channel */
    long allreduces;   /* calls so far */
    ncclResult_t async_error;
};

/* CUDA_EMU_NCCL_ASYNC_ERROR=N: from the N-th ncclAllReduce of a
 * communicator on, ncclCommGetAsyncError reports ncclRemoteError (a peer
 * or the network failing while the collective runs) */
static long async_error_after()
{
    const char *s = getenv("CUDA_EMU_NCCL_ASYNC_ERROR");
    return s && *s ? atol(s) : 0;
}

static const char ID_MAGIC[] = "cuda-emu nccl unique id";

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
    return ncclSuccess;
}

/* CUDA_EMU_STRICT_NCCL_SAMEDEV: two ranks of one communicator on one device
 * (the same host and device UUID) are refused as NCCL 2.5 and later do:
 * ncclInvalidUsage, and with NCCL_DEBUG=WARN the line "Duplicate GPU
 * detected : rank R and rank S both on CUDA device ..." (NVIDIA/nccl#418:
 * the topology search cannot work with it).  NCCL's user guide: using one
 * device as several ranks of a communicator "is not supported and may lead
 * to hangs".  Collective over MPI_COMM_WORLD, as ncclCommInitRank is. */
static ncclResult_t check_duplicate_gpu(int rank, int nranks)
{
    struct Key {
        char host[64];
        char uuid[16];
    } me, *all = new Key[nranks];
    memset(&me, 0, sizeof me);
    gethostname(me.host, sizeof me.host - 1);
    int dev = 0;
    cudaDeviceProp prop;
    cudaGetDevice(&dev);
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) cuda_emu::fail("ncclCommInitRank: device %d has no properties", dev);
    memcpy(me.uuid, prop.uuid.bytes, sizeof me.uuid);
    MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, MPI_COMM_WORLD);
    int other = -1;
    for (int r = 0; r < nranks && other < 0; r++)
        if (r != rank && !memcmp(&all[r], &me, sizeof me)) other = r;
    delete[] all;
    if (other < 0) return ncclSuccess;
    if (getenv("NCCL_DEBUG"))
        fprintf(stderr, "%s: NCCL WARN Duplicate GPU detected : rank %d and rank %d both on CUDA device %.16s\n",
                me.host, rank, other, me.uuid);
    return ncclInvalidUsage;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    if (memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC))
        cuda_emu::fail("ncclCommInitRank: rank %d holds a unique id that ncclGetUniqueId did not make (not broadcast?)", rank);
    int size, me;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (size != nranks || me != rank)
        cuda_emu::fail("ncclCommInitRank(nranks %d, rank %d) on MPI rank %d of %d", nranks, rank, me, size);
    if (cuda_emu::strict("NCCL_SAMEDEV")) {
        ncclResult_t r = check_duplicate_gpu(rank, nranks);
        if (r != ncclSuccess) return r;
    }
    MPI_Comm mc;
    MPI_Comm_dup(MPI_COMM_WORLD, &mc);
    *comm = new ncclComm{ nranks, rank, mc, 0, ncclSuccess };
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (comm) MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream)
{
    if (!comm) return ncclInvalidArgument;
    if (dt != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;   /* all the backend uses */
    if (!cuda_emu::is_device_range(recv, count * 4) || !cuda_emu::is_device_range(send, count * 4))
        cuda_emu::fail("ncclAllReduce: buffer %p (+%zu floats) is not device memory", recv, count);
    /* started when the stream gets there and complete some time later
     * (rule STREAMS), as NCCL's kernels: the caller must wait for the
     * stream before it reads the sums.  A nonblocking MPI sum on the
     * communicator's own MPI communicator, so that it progresses while the
     * host sits in its own MPI calls, as NCCL's kernels do on a GPU */
    auto req = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
    MPI_Comm mc = comm->mpi;
    cuda_emu::enqueue(
        stream, "ncclAllReduce",
        [=] {
            if (cuda_emu::tracking) {
                cuda_emu::access(send, count * 4, false);
                cuda_emu::access(recv, count * 4, true);
            }
            MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, mc, req.get());
        },
        [req] {
            int done = 0;
            MPI_Test(req.get(), &done, MPI_STATUS_IGNORE);
            return done != 0;
        });
    long n = async_error_after();
    if (n > 0 && ++comm->allreduces >= n) comm->async_error = ncclRemoteError;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError) return ncclInvalidArgument;
    *asyncError = comm->async_error;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated)";
    default: return "emulated NCCL error";
    }
}

/* HDF5 files that are written whole or not at all.
 *
 * A file written in place on a disk that fills up is lost twice over: the
 * half-written file is corrupt, and HDF5 1.10 keeps the file open after a
 * failed H5Fclose, so its handler at exit crashes on it.  Files that must
 * survive (checkpoints, the metrics log, the attention probe) are therefore
 * built in memory with HDF5's core driver and written by us, in one pass:
 * the image goes to a hidden temporary next to the target, is fsync'ed and
 * renamed over it, and the directory is fsync'ed.  A failure (ENOSPC,
 * EDQUOT, EIO) costs the temporary only, and is reported with its errno. */
#ifndef H5IO_H
#define H5IO_H

#include <hdf5.h>
#include <stddef.h>

/* HDF5 is not thread-safe in this (parallel) build: every HDF5 call made
 * while a background checkpoint write may be running holds this lock. */
void hdf5_lock(void);
int hdf5_trylock(void);   /* 0 if acquired */
void hdf5_unlock(void);

/* H5open and silence the library's error-stack printing (we report failures
 * in one line ourselves); call on the main thread before any other. */
void h5io_init(void);

/* A new, empty file in memory; size_hint is the expected size in bytes
 * (the memory grows in steps of it).  -1 on failure. */
hid_t h5io_create(size_t size_hint);
/* An existing file loaded into memory to be modified and written back with
 * h5io_commit.  Returns the file, or -1 with msg set; if the file does not
 * exist, -1 with *missing = 1 (msg empty). */
hid_t h5io_open_update(const char *path, int *missing, char *msg, int cap);

/* path's temporary: DIR/.NAME.tmp */
void h5io_tmp_name(const char *path, char *tmp, size_t cap);
/* Close the in-memory file f and write its image to tmp, fsync'ed.  f is
 * closed in every case.  0, or -1 with msg "TMP: ...: <strerror>" and tmp
 * removed. */
int h5io_save(hid_t f, const char *tmp, char *msg, int cap);
/* rename tmp over path and fsync the directory.  0, or -1 with msg. */
int h5io_publish(const char *tmp, const char *path, char *msg, int cap);
/* h5io_save to path's temporary, then h5io_publish */
int h5io_commit(hid_t f, const char *path, char *msg, int cap);

#endif

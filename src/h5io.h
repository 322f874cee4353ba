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
#include <stdint.h>

/* HDF5 is not thread-safe in this (parallel) build: every HDF5 call made
 * while a background checkpoint write may be running holds this lock. */
void hdf5_lock(void);
int hdf5_trylock(void);   /* 0 if acquired */
void hdf5_unlock(void);

/* Attributes, one convention: 0, or -1 where HDF5 fails (reading: also
 * where the attribute is missing).  Scalars: h5io_attr_write (file type
 * ftype, memory type mtype) and its int64, uint64 and double forms;
 * strings: variable-length UTF-8 (vstr: checkpoints, datasets; h5py reads
 * them as str) or fixed-length UTF-8 (str: the attention and head files);
 * 1-D arrays of n strings or int64s. */
int h5io_attr_write(hid_t o, const char *name, hid_t ftype, hid_t mtype, const void *val);
int h5io_attr_i64(hid_t o, const char *name, int64_t v);
int h5io_attr_u64(hid_t o, const char *name, uint64_t v);
int h5io_attr_f64(hid_t o, const char *name, double v);
int h5io_attr_str(hid_t o, const char *name, const char *s);
int h5io_attr_vstr(hid_t o, const char *name, const char *s);
int h5io_attr_vstrs(hid_t o, const char *name, const char **vals, int n);
int h5io_attr_i64s(hid_t o, const char *name, const int64_t *vals, int n);
/* the variable-length UTF-8 string type (close it with H5Tclose): h5py
 * reads it as str, h5dump prints it */
hid_t h5io_vstr_type(void);
/* read a scalar attribute into val as mtype */
int h5io_attr_read(hid_t o, const char *name, hid_t mtype, void *val);
/* a string attribute (variable or fixed length) as a malloc'ed string, or NULL */
char *h5io_attr_read_str(hid_t o, const char *name);
/* a dataset created and written whole (file type ftype, memory type mtype,
 * nd dimensions): 0, or -1 */
int h5io_write_ds(hid_t g, const char *name, hid_t ftype, hid_t mtype, int nd, const hsize_t *dims,
                  const void *data);

/* H5open and silence the library's error-stack printing (we report failures
 * in one line ourselves); call on the main thread before any other. */
void h5io_init(void);

/* Open a file read-only without HDF5's file locking.  Where flock fails
 * (NFS without lockd: ENOLCK; some FUSE and Lustre mounts: ENOSYS) a locking
 * open fails, and intact checkpoints and datasets looked damaged.  The files
 * read here are never written in place (h5io writes a temporary and renames
 * it), so a lock would protect nothing.  File id, or < 0. */
hid_t h5io_open_read(const char *path);
/* After an open failed: 0 if every byte of path can be read (its content
 * is what HDF5 rejects: damage), -1 with errno if not (an I/O error that may
 * be transient, not damage). */
int h5io_read_all(const char *path);

/* Memory kept from one in-memory file to the next.  A checkpoint written
 * every few minutes would otherwise page-fault its whole size in again each
 * time: on the development VM, touching a fresh 790 MB buffer took 1.6 s,
 * a reused one 0.1 s. */
typedef struct {
    void *p;
    size_t size;
} H5Buffer;
void h5io_buffer_free(H5Buffer *b);

/* An HDF5 file in memory: id for the HDF5 calls, im for h5io. */
typedef struct {
    hid_t id;
    struct Image *im;
} H5Mem;

/* A new, empty file in memory; size_hint is the expected size in bytes
 * (the memory grows in steps of it).  With reuse (may be NULL), the memory
 * is taken from it if large enough, and given back to it by h5io_save.
 * 0, or -1. */
int h5io_create(H5Mem *m, size_t size_hint, H5Buffer *reuse);
/* An existing file loaded into memory to be modified and written back with
 * h5io_commit.  0; -1 with msg set if it cannot be read (*missing = 1 and
 * msg empty if it does not exist); -2 with msg set if it is not a readable
 * HDF5 file (truncated, damaged). */
int h5io_open_update(H5Mem *m, const char *path, int *missing, char *msg, int cap);
/* A log appended to over a run (metrics, attention probe): path loaded
 * into memory, or a new file if there is none (*created = 1), with the
 * root attribute "format" = format.  An existing file is the log if its
 * "format" is format or, without a "format" (a log written before it
 * was), if its root holds only objects named in legacy (NULL-terminated,
 * legacy[0] among them; NULL: no such file is taken).  One that is not a
 * readable HDF5 file, or another HDF5 file (a dataset copied there), is
 * kept as path.bad (path.bad.1, ... when taken), with one warning line,
 * and a new one started: never silently truncated nor written into.  0,
 * or -1 with msg set. */
int h5io_open_log(H5Mem *m, const char *path, const char *format, const char *const *legacy, int *created, char *msg,
                  int cap);
/* close without writing (error paths) */
void h5io_discard(H5Mem *m);

/* path's temporary: DIR/.NAME.HOST.PID.tmp (unique per process) */
void h5io_tmp_name(const char *path, char *tmp, size_t cap);
/* Close the in-memory file m and write its image to tmp, fsync'ed.  m is
 * closed in every case.  0, or -1 with msg "TMP: ...: <strerror>" and tmp
 * removed.  The same in two parts, so that the disk write can run without
 * holding hdf5_lock(): h5io_close_image (HDF5) then h5io_write_image (no
 * HDF5; takes the image and gives its memory back to the reuse buffer). */
int h5io_save(H5Mem *m, const char *tmp, char *msg, int cap);
typedef struct {
    char *data;
    size_t size, alloc;
    H5Buffer *reuse;
} H5Image;
int h5io_close_image(H5Mem *m, H5Image *out, char *msg, int cap);
int h5io_write_image(H5Image *img, const char *tmp, char *msg, int cap);
void h5io_release_image(H5Image *img);
/* rename tmp over path and fsync the directory (best effort: the rename
 * is done).  0, or -1 with msg if the rename fails. */
int h5io_publish(const char *tmp, const char *path, char *msg, int cap);
/* h5io_save to path's temporary, then h5io_publish */
int h5io_commit(H5Mem *m, const char *path, char *msg, int cap);

#endif

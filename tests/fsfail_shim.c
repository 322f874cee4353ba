/* LD_PRELOAD shim for tests/test_h5_nolock.sh: a file system where locks
 * fail and reads can fail.
 *   FSFAIL_LOCK=ENOLCK|ENOSYS  flock() and fcntl() record locks fail with it
 *                              (NFS without lockd: ENOLCK; FUSE: ENOSYS)
 *   FSFAIL_EIO=SUBSTRING       open() of a path containing SUBSTRING fails
 *                              with EIO (a transient I/O error) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>

static int lock_errno(void)
{
    const char *e = getenv("FSFAIL_LOCK");
    if (!e || !*e) return 0;
    return strcmp(e, "ENOSYS") ? ENOLCK : ENOSYS;
}

static int eio_path(const char *path)
{
    const char *s = getenv("FSFAIL_EIO");
    return s && *s && path && strstr(path, s);
}

int flock(int fd, int op)
{
    static int (*real)(int, int);
    int e = lock_errno();
    if (e) { errno = e; return -1; }
    if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    return real(fd, op);
}

static int is_lock_cmd(int cmd)
{
    return cmd == F_SETLK || cmd == F_SETLKW || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
}

#define FCNTL_SHIM(name)                                                     \
    int name(int fd, int cmd, ...)                                           \
    {                                                                        \
        static int (*real)(int, int, ...);                                   \
        va_list ap;                                                          \
        va_start(ap, cmd);                                                   \
        void *arg = va_arg(ap, void *);                                      \
        va_end(ap);                                                          \
        int e = lock_errno();                                                \
        if (e && is_lock_cmd(cmd)) { errno = e; return -1; }                 \
        if (!real) real = (int (*)(int, int, ...))dlsym(RTLD_NEXT, #name);   \
        return real(fd, cmd, arg);                                           \
    }
FCNTL_SHIM(fcntl)
FCNTL_SHIM(fcntl64)

#define OPEN_SHIM(name)                                                      \
    int name(const char *path, int flags, ...)                               \
    {                                                                        \
        static int (*real)(const char *, int, ...);                          \
        va_list ap;                                                          \
        va_start(ap, flags);                                                 \
        int mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, int) : 0;    \
        va_end(ap);                                                          \
        if (eio_path(path)) { errno = EIO; return -1; }                      \
        if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        return real(path, flags, mode);                                      \
    }
OPEN_SHIM(open)
OPEN_SHIM(open64)

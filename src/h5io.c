/* HDF5 files written whole or not at all (h5io.h). */
#include "h5io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static pthread_mutex_t g_h5_lock = PTHREAD_MUTEX_INITIALIZER;
void hdf5_lock(void) { pthread_mutex_lock(&g_h5_lock); }
int hdf5_trylock(void) { return pthread_mutex_trylock(&g_h5_lock); }
void hdf5_unlock(void) { pthread_mutex_unlock(&g_h5_lock); }

void h5io_init(void)
{
    static int done;
    if (done) return;
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    done = 1;
}

/* The name HDF5 gives an in-memory file.  It must not exist on disk: the
 * core driver opens a file of that name in preference to a given image. */
static const char MEM_NAME[] = "/dev/null/h5io-image";

static hid_t core_fapl(size_t size_hint)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    /* no backing store: HDF5 never writes to disk itself */
    if (fapl >= 0) H5Pset_fapl_core(fapl, size_hint > (1 << 20) ? size_hint : (1 << 20), 0);
    return fapl;
}

hid_t h5io_create(size_t size_hint)
{
    h5io_init();
    hid_t fapl = core_fapl(size_hint);
    hid_t f = H5Fcreate(MEM_NAME, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    return f;
}

hid_t h5io_open_update(const char *path, int *missing, char *msg, int cap)
{
    h5io_init();
    *missing = 0;
    msg[0] = '\0';
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (errno == ENOENT) *missing = 1;
        else snprintf(msg, cap, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fileno(fp), &sb) || !S_ISREG(sb.st_mode)) {
        snprintf(msg, cap, "%s: not a regular file", path);
        fclose(fp);
        return -1;
    }
    size_t n = (size_t)sb.st_size;
    char *buf = xmalloc(n ? n : 1);
    int rd = fread(buf, 1, n, fp) == n;
    fclose(fp);
    hid_t f = -1;
    if (rd && n) {
        hid_t fapl = core_fapl(n);
        H5Pset_file_image(fapl, buf, n);   /* copied */
        f = H5Fopen(MEM_NAME, H5F_ACC_RDWR, fapl);
        H5Pclose(fapl);
    }
    free(buf);
    if (f < 0) snprintf(msg, cap, "%s: %s", path, rd ? "not a readable HDF5 file (truncated or corrupt)" : "read failed");
    return f;
}

void h5io_tmp_name(const char *path, char *tmp, size_t cap)
{
    const char *s = strrchr(path, '/');
    if (s) snprintf(tmp, cap, "%.*s/.%s.tmp", (int)(s - path), path, s + 1);
    else snprintf(tmp, cap, ".%s.tmp", path);
}

static int write_all_fd(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int h5io_save(hid_t f, const char *tmp, char *msg, int cap)
{
    ssize_t n = H5Fflush(f, H5F_SCOPE_GLOBAL) < 0 ? -1 : H5Fget_file_image(f, NULL, 0);
    char *img = n > 0 ? malloc((size_t)n) : NULL;
    if (img && H5Fget_file_image(f, img, (size_t)n) != n) { free(img); img = NULL; }
    H5Fclose(f);
    if (!img) {
        snprintf(msg, cap, "%s: HDF5 could not build the file in memory (%s)", tmp,
                 n > 0 ? "out of memory?" : "library error");
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0 || write_all_fd(fd, img, (size_t)n) || fsync(fd);
    int err = errno;
    if (fd >= 0 && close(fd) && !bad) { bad = 1; err = errno; }
    free(img);
    if (bad) {
        snprintf(msg, cap, "%s: cannot write %.1f MB: %s", tmp, n / 1e6, strerror(err));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int h5io_publish(const char *tmp, const char *path, char *msg, int cap)
{
    if (rename(tmp, path)) {
        snprintf(msg, cap, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    /* the rename itself is durable once the directory is */
    char dir[4096];
    const char *s = strrchr(path, '/');
    if (!s) snprintf(dir, sizeof dir, ".");
    else if (s == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(s - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { fsync(fd); close(fd); }
    return 0;
}

int h5io_commit(hid_t f, const char *path, char *msg, int cap)
{
    char tmp[4200];
    h5io_tmp_name(path, tmp, sizeof tmp);
    if (h5io_save(f, tmp, msg, cap)) return -1;
    return h5io_publish(tmp, path, msg, cap);
}

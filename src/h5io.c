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

/* The core driver's memory comes from these callbacks, so that h5io_save
 * can take the finished image from it when the file closes instead of
 * copying it out first (H5Fget_file_image): for a checkpoint that copy and
 * its page faults took longer than writing it to disk.  One Image per file,
 * reference-counted over the property lists that hold it. */
typedef struct Image {
    int refs;
    int keep;     /* set by h5io_save just before closing */
    void *kept;   /* the image, handed over at close */
    size_t size;  /* bytes of the image the driver has asked for */
    size_t alloc; /* bytes allocated */
    H5Buffer *reuse;
} Image;

void h5io_buffer_free(H5Buffer *b)
{
    free(b->p);
    b->p = NULL;
    b->size = 0;
}

static void *im_malloc(size_t n, H5FD_file_image_op_t op, void *u)
{
    (void)op;
    Image *im = u;
    im->size = n;
    if (im->reuse && im->reuse->p && im->reuse->size >= n) {
        void *p = im->reuse->p;
        im->alloc = im->reuse->size;
        im->reuse->p = NULL;
        im->reuse->size = 0;
        return p;
    }
    im->alloc = n;
    return malloc(n);
}
static void *im_memcpy(void *d, const void *s, size_t n, H5FD_file_image_op_t op, void *u)
{
    (void)op; (void)u;
    return memcpy(d, s, n);
}
static void *im_realloc(void *p, size_t n, H5FD_file_image_op_t op, void *u)
{
    Image *im = u;
    if (!p) return im_malloc(n, op, u);   /* the core driver's first allocation comes here */
    im->size = n;
    if (n <= im->alloc) return p;   /* a reused buffer may be larger already */
    im->alloc = n;
    return realloc(p, n);
}
static herr_t im_free(void *p, H5FD_file_image_op_t op, void *u)
{
    Image *im = u;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && im && im->keep && !im->kept) im->kept = p;
    else free(p);
    return 0;
}
static void *im_udata_copy(void *u) { ((Image *)u)->refs++; return u; }
static herr_t im_udata_free(void *u)
{
    Image *im = u;
    if (--im->refs == 0) { free(im->kept); free(im); }
    return 0;
}

/* a file access list for the core driver; m->im gets our reference */
static hid_t core_fapl(H5Mem *m, size_t size_hint, H5Buffer *reuse)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    /* no backing store: HDF5 never writes to disk itself */
    H5Pset_fapl_core(fapl, size_hint > (1 << 20) ? size_hint : (1 << 20), 0);
    Image *im = xcalloc(1, sizeof *im);
    im->refs = 1;
    im->reuse = reuse;
    H5FD_file_image_callbacks_t cb = { im_malloc, im_memcpy, im_realloc, im_free, im_udata_copy, im_udata_free, im };
    H5Pset_file_image_callbacks(fapl, &cb);   /* the list holds a counted copy */
    m->im = im;
    return fapl;
}

static void release(H5Mem *m)
{
    if (m->im) im_udata_free(m->im);
    m->im = NULL;
    m->id = -1;
}

void h5io_discard(H5Mem *m)
{
    if (m->id >= 0) H5Fclose(m->id);
    release(m);
}

int h5io_create(H5Mem *m, size_t size_hint, H5Buffer *reuse)
{
    h5io_init();
    m->im = NULL;
    hid_t fapl = core_fapl(m, size_hint, reuse);
    m->id = fapl < 0 ? -1 : H5Fcreate(MEM_NAME, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (m->id < 0) release(m);
    return m->id < 0 ? -1 : 0;
}

int h5io_open_update(H5Mem *m, const char *path, int *missing, char *msg, int cap)
{
    h5io_init();
    m->id = -1;
    m->im = NULL;
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
    if (rd && n) {
        hid_t fapl = core_fapl(m, n, NULL);
        H5Pset_file_image(fapl, buf, n);   /* copied */
        m->id = H5Fopen(MEM_NAME, H5F_ACC_RDWR, fapl);
        H5Pclose(fapl);
    }
    free(buf);
    if (m->id >= 0) return 0;
    release(m);
    snprintf(msg, cap, "%s: %s", path, rd ? "not a readable HDF5 file (truncated or corrupt)" : "read failed");
    return -1;
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

int h5io_save(H5Mem *m, const char *tmp, char *msg, int cap)
{
    ssize_t n = H5Fflush(m->id, H5F_SCOPE_GLOBAL) < 0 ? -1 : H5Fget_file_image(m->id, NULL, 0);
    /* take the image from the core driver as the file closes (above) */
    Image *im = m->im;
    im->keep = 1;
    H5Fclose(m->id);
    char *img = NULL;
    size_t alloc = im->alloc;
    H5Buffer *reuse = im->reuse;
    {
        img = im->kept;
        /* the image ends at HDF5's end of allocation; the driver's memory
         * may stop short of it, and reads beyond it as zeros */
        if (img && n > 0 && (size_t)n > im->size) {
            char *g = (size_t)n <= alloc ? img : realloc(img, (size_t)n);
            if (g) memset(g + im->size, 0, (size_t)n - im->size);
            else free(img);
            if ((size_t)n > alloc) alloc = (size_t)n;
            img = g;
        }
        im->kept = NULL;
    }
    release(m);
    if (!img) n = -1;
    if (!img) {
        snprintf(msg, cap, "%s: HDF5 could not build the file in memory (%s)", tmp,
                 n > 0 ? "out of memory?" : "library error");
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int bad = fd < 0 || write_all_fd(fd, img, (size_t)n) || fsync(fd);
    int err = errno;
    if (fd >= 0 && close(fd) && !bad) { bad = 1; err = errno; }
    if (reuse) {   /* keep the memory for the next file */
        h5io_buffer_free(reuse);
        reuse->p = img;
        reuse->size = alloc;
    } else free(img);
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

int h5io_commit(H5Mem *m, const char *path, char *msg, int cap)
{
    char tmp[4200];
    h5io_tmp_name(path, tmp, sizeof tmp);
    if (h5io_save(m, tmp, msg, cap)) return -1;
    return h5io_publish(tmp, path, msg, cap);
}

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
    /* no file locks (h5io_open_read); older HDF5 reads only this variable */
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    done = 1;
}

hid_t h5io_open_read(const char *path)
{
    h5io_init();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, 0, 1);
#endif
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

int h5io_read_all(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[1 << 16];
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0) {}
    int e = errno;
    close(fd);
    errno = e;
    return k < 0 ? -1 : 0;
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

/* the driver's own memory (not the copies property lists make of an image) */
static int file_op(H5FD_file_image_op_t op)
{
    return op == H5FD_FILE_IMAGE_OP_FILE_OPEN || op == H5FD_FILE_IMAGE_OP_FILE_RESIZE;
}

static void *im_malloc(size_t n, H5FD_file_image_op_t op, void *u)
{
    Image *im = u;
    if (!file_op(op)) return malloc(n);
    if (im->reuse && im->reuse->p && im->reuse->size >= n) {
        void *p = im->reuse->p;
        im->size = n;
        im->alloc = im->reuse->size;
        im->reuse->p = NULL;
        im->reuse->size = 0;
        return p;
    }
    void *p = malloc(n);
    if (p) { im->size = n; im->alloc = n; }
    return p;
}
static void *im_memcpy(void *d, const void *s, size_t n, H5FD_file_image_op_t op, void *u)
{
    (void)op; (void)u;
    return memcpy(d, s, n);
}
static void *im_realloc(void *p, size_t n, H5FD_file_image_op_t op, void *u)
{
    Image *im = u;
    if (!file_op(op)) return realloc(p, n);
    if (!p) return im_malloc(n, op, u);   /* the core driver's first allocation comes here */
    if (n <= im->alloc) { im->size = n; return p; }   /* a reused buffer may be larger already */
    void *q = realloc(p, n);
    if (q) { im->size = n; im->alloc = n; }
    return q;
}
static herr_t im_free(void *p, H5FD_file_image_op_t op, void *u)
{
    Image *im = u;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && im->keep && !im->kept) im->kept = p;
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
    /* H5Fclose closes the file now, objects left open or not: the driver
     * must not outlive the Image it calls back into */
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    Image *im = xcalloc(1, sizeof *im);
    im->refs = 1;
    im->reuse = reuse;
    H5FD_file_image_callbacks_t cb = { im_malloc, im_memcpy, im_realloc, im_free, im_udata_copy, im_udata_free, im };
    H5Pset_file_image_callbacks(fapl, &cb);   /* the list holds a counted copy */
    m->im = im;
    return fapl;
}

/* Close the file.  The driver holds a plain pointer to the Image (HDF5
 * counts no reference for it), so ours is dropped only once the file is
 * closed; if it is not (HDF5 1.10 may fail a close and keep the file), the
 * Image is left to it. */
static int close_file(H5Mem *m)
{
    int rc = 0;
    if (m->id >= 0) rc = H5Fclose(m->id) < 0 ? -1 : 0;
    if (m->im && !rc) im_udata_free(m->im);
    m->im = NULL;
    m->id = -1;
    return rc;
}

void h5io_discard(H5Mem *m)
{
    close_file(m);
}

int h5io_create(H5Mem *m, size_t size_hint, H5Buffer *reuse)
{
    h5io_init();
    m->im = NULL;
    hid_t fapl = core_fapl(m, size_hint, reuse);
    m->id = fapl < 0 ? -1 : H5Fcreate(MEM_NAME, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (m->id < 0) close_file(m);
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
    close_file(m);
    if (!rd) {
        snprintf(msg, cap, "%s: read failed", path);
        return -1;
    }
    snprintf(msg, cap, "%s: not a readable HDF5 file (truncated or corrupt)", path);
    return -2;
}

/* the log opened in m is one of ours: its root attribute "format" is
 * format, or, without one (a log of a version before the attribute), its
 * root holds only objects named in legacy (NULL-terminated; NULL: none
 * accepted), legacy[0] among them.  1, or 0 with why set. */
static int log_is_ours(hid_t f, const char *format, const char *const *legacy, char *why, int cap)
{
    char *have = h5io_attr_read_str(f, "format");
    if (have) {
        int ok = !strcmp(have, format);
        snprintf(why, cap, "format '%.64s'", have);
        free(have);
        return ok;
    }
    snprintf(why, cap, "no format attribute");
    H5G_info_t gi;
    if (!legacy || H5Gget_info(f, &gi) < 0 || H5Lexists(f, legacy[0], H5P_DEFAULT) <= 0) return 0;
    hsize_t known = 0;
    for (int i = 0; legacy[i]; i++) known += H5Lexists(f, legacy[i], H5P_DEFAULT) > 0;
    if (known == gi.nlinks) return 1;
    int n = snprintf(why, cap, "no format attribute, and objects other than");
    for (int i = 0; legacy[i] && n > 0 && n < cap; i++) n += snprintf(why + n, cap - n, "%s %s", i ? "," : "", legacy[i]);
    return 0;
}

int h5io_open_log(H5Mem *m, const char *path, const char *format, const char *const *legacy, int *created, char *msg,
                  int cap)
{
    int missing;
    int rc = h5io_open_update(m, path, &missing, msg, cap);
    *created = 0;
    char why[160] = "";
    if (rc == 0) {
        if (log_is_ours(m->id, format, legacy, why, sizeof why)) return 0;
        h5io_discard(m);   /* some other HDF5 file: never written into */
        rc = -3;
    }
    if (rc == -1 && !missing) return -1;   /* unreadable for another reason: left alone */
    if (rc == -2 || rc == -3) {
        char bad[4300];
        const char *what = rc == -2 ? "not a readable HDF5 file" : "not a log of this kind";
        if (file_move_aside(path, bad, sizeof bad)) {
            snprintf(msg, cap, "%s: %s, and cannot be moved aside: %s", path, what, strerror(errno));
            return -1;
        }
        if (rc == -2) fprintf(stderr, "warning: %s: %s; moved to %s, starting a new one\n", path, what, bad);
        else
            fprintf(stderr, "warning: %s: an HDF5 file but not a %s log (%s); moved to %s, starting a new one\n", path,
                    format, why, bad);
    }
    if (h5io_create(m, 1 << 20, NULL) || h5io_attr_str(m->id, "format", format)) {
        if (m->id >= 0) h5io_discard(m);
        snprintf(msg, cap, "%s: cannot create the file in memory", path);
        return -1;
    }
    *created = 1;
    return 0;
}

void h5io_tmp_name(const char *path, char *tmp, size_t cap)
{
    /* unique per process: two writers on a shared file system (a node whose
     * lock the file server still holds, Lustre's node-local locks) never
     * write into one temporary */
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[strcspn(host, ".")] = '\0';
    const char *s = strrchr(path, '/');
    if (s) snprintf(tmp, cap, "%.*s/.%s.%.32s.%d.tmp", (int)(s - path), path, s + 1, host, (int)getpid());
    else snprintf(tmp, cap, ".%s.%.32s.%d.tmp", path, host, (int)getpid());
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

int h5io_close_image(H5Mem *m, H5Image *out, char *msg, int cap)
{
    memset(out, 0, sizeof *out);
    Image *im = m->im;
    ssize_t n = H5Fflush(m->id, H5F_SCOPE_GLOBAL) < 0 ? -1 : H5Fget_file_image(m->id, NULL, 0);
    /* take the image from the core driver as the file closes (above) */
    im->keep = 1;
    out->reuse = im->reuse;
    if (H5Fclose(m->id) < 0) {
        m->id = -1;
        m->im = NULL;   /* the driver may still use it: left to it */
        snprintf(msg, cap, "HDF5 could not close the in-memory file");
        return -1;
    }
    char *img = im->kept;
    size_t alloc = im->alloc, size = im->size;
    im->kept = NULL;
    m->id = -1;
    close_file(m);   /* drops our reference */
    if (img && n > 0 && (size_t)n > size) {
        /* the image ends at HDF5's end of allocation; the driver's memory
         * may stop short of it, and reads beyond it as zeros */
        char *g = (size_t)n <= alloc ? img : realloc(img, (size_t)n);
        if (g) {
            memset(g + size, 0, (size_t)n - size);
            if ((size_t)n > alloc) alloc = (size_t)n;
        } else free(img);
        img = g;
    }
    if (!img || n <= 0) {
        if (img) h5io_release_image(&(H5Image){ img, 0, alloc, out->reuse });
        snprintf(msg, cap, "HDF5 could not build the file in memory (%s)", n > 0 ? "out of memory" : "library error");
        return -1;
    }
    out->data = img;
    out->size = (size_t)n;
    out->alloc = alloc;
    return 0;
}

void h5io_release_image(H5Image *img)
{
    if (img->reuse && img->data) {   /* keep the memory for the next file */
        h5io_buffer_free(img->reuse);
        img->reuse->p = img->data;
        img->reuse->size = img->alloc;
    } else free(img->data);
    img->data = NULL;
}

int h5io_write_image(H5Image *img, const char *tmp, char *msg, int cap)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(msg, cap, "%s: cannot create: %s", tmp, strerror(errno));
        h5io_release_image(img);
        return -1;
    }
    int bad = write_all_fd(fd, img->data, img->size) || fsync(fd);
    int err = errno;
    if (close(fd) && !bad) { bad = 1; err = errno; }
    double mb = img->size / 1e6;
    h5io_release_image(img);
    if (bad) {
        snprintf(msg, cap, "%s: cannot write %.1f MB: %s", tmp, mb, strerror(err));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int h5io_save(H5Mem *m, const char *tmp, char *msg, int cap)
{
    H5Image img;
    char why[256];
    if (h5io_close_image(m, &img, why, sizeof why)) {
        snprintf(msg, cap, "%s: %s", tmp, why);
        return -1;
    }
    return h5io_write_image(&img, tmp, msg, cap);
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
    if (fd >= 0) { fsync(fd); close(fd); }   /* best effort: the rename has happened */
    return 0;
}

int h5io_commit(H5Mem *m, const char *path, char *msg, int cap)
{
    char tmp[4200];
    h5io_tmp_name(path, tmp, sizeof tmp);
    if (h5io_save(m, tmp, msg, cap)) return -1;
    return h5io_publish(tmp, path, msg, cap);
}

/* ------------------------------------------------------ small writers */

/* an attribute on space sp (closed here) written from val */
static int attr_create(hid_t o, const char *name, hid_t ftype, hid_t mtype, hid_t sp, const void *val)
{
    hid_t a = H5Acreate2(o, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mtype, val) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}

int h5io_attr_write(hid_t o, const char *name, hid_t ftype, hid_t mtype, const void *val)
{
    return attr_create(o, name, ftype, mtype, H5Screate(H5S_SCALAR), val);
}

int h5io_attr_i64(hid_t o, const char *name, int64_t v) { return h5io_attr_write(o, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v); }
int h5io_attr_u64(hid_t o, const char *name, uint64_t v) { return h5io_attr_write(o, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v); }
int h5io_attr_f64(hid_t o, const char *name, double v) { return h5io_attr_write(o, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v); }

hid_t h5io_vstr_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

int h5io_attr_vstr(hid_t o, const char *name, const char *s)
{
    hid_t t = h5io_vstr_type();
    int rc = h5io_attr_write(o, name, t, t, &s);
    H5Tclose(t);
    return rc;
}

/* a 1-D attribute of n elements */
static int attr_array(hid_t o, const char *name, hid_t ftype, hid_t mtype, const void *vals, int n)
{
    hsize_t dim = (hsize_t)n;
    return attr_create(o, name, ftype, mtype, H5Screate_simple(1, &dim, NULL), vals);
}

int h5io_attr_vstrs(hid_t o, const char *name, const char **vals, int n)
{
    hid_t t = h5io_vstr_type();
    int rc = attr_array(o, name, t, t, vals, n);
    H5Tclose(t);
    return rc;
}

int h5io_attr_i64s(hid_t o, const char *name, const int64_t *vals, int n)
{
    return attr_array(o, name, H5T_STD_I64LE, H5T_NATIVE_INT64, vals, n);
}

int h5io_attr_str(hid_t o, const char *name, const char *s)
{
    /* fixed length, as the attention and head files have always stored them */
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(s) + 1);
    H5Tset_cset(t, H5T_CSET_UTF8);
    int rc = h5io_attr_write(o, name, t, t, s);
    H5Tclose(t);
    return rc;
}

int h5io_attr_read(hid_t obj, const char *name, hid_t mtype, void *val)
{
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    int rc = H5Aread(a, mtype, val) < 0 ? -1 : 0;
    H5Aclose(a);
    return rc;
}

/* a string attribute (variable or fixed length) as a malloc'ed string */
char *h5io_attr_read_str(hid_t obj, const char *name)
{
    if (H5Aexists(obj, name) <= 0) return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return NULL;
    hid_t ft = H5Aget_type(a);
    char *out = NULL;
    if (H5Tget_class(ft) == H5T_STRING) {
        if (H5Tis_variable_str(ft) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(ft));
            char *s = NULL;
            if (H5Aread(a, mt, &s) >= 0 && s) {
                out = strdup(s);
                H5free_memory(s);
            }
            H5Tclose(mt);
        } else {
            size_t n = H5Tget_size(ft);
            out = xcalloc(n + 1, 1);
            if (H5Aread(a, ft, out) < 0) { free(out); out = NULL; }
        }
    }
    H5Tclose(ft);
    H5Aclose(a);
    return out;
}

int h5io_write_ds(hid_t g, const char *name, hid_t ftype, hid_t mtype, int nd, const hsize_t *dims,
                  const void *data)
{
    hid_t sp = H5Screate_simple(nd, dims, NULL);
    hid_t d = H5Dcreate2(g, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0) { H5Sclose(sp); return -1; }
    int rc = H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(d);
    H5Sclose(sp);
    return rc < 0 ? -1 : 0;
}

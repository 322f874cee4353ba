/* HDF5 reader/writer of binarized datasets (docs/dataset.md).  HDF5's own
 * error stack printing is switched off around our calls so that every
 * failure is reported as one line naming the file. */
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "h5io.h"
#include "util.h"

/* ---------- helpers ---------- */

typedef struct { H5E_auto2_t fn; void *data; } ErrSave;

static void quiet_on(ErrSave *s)
{
    H5Eget_auto2(H5E_DEFAULT, &s->fn, &s->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}
static void quiet_off(const ErrSave *s) { H5Eset_auto2(H5E_DEFAULT, s->fn, s->data); }

/* 1-D dataset, chunked + deflate from 4096 elements: the vocabulary's pieces
 * and the SentencePiece model (the id arrays are flat: write_flat) */
static int write_1d(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *data, size_t n)
{
    hsize_t dim = n;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (n >= 4096) {
        hsize_t chunk = n < (1u << 20) ? n : (1u << 20);
        H5Pset_chunk(dcpl, 1, &chunk);
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, 1);
    }
    hid_t ds = H5Dcreate2(loc, name, file_type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = ds < 0 || (n > 0 && H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0);
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return rc;
}

/* 1-D dataset stored contiguous and uncompressed, so that a reader can map
 * it from the file (dataset_map); the file's alignment (dataset_write) puts
 * every such array of 4 KiB or more on a page boundary */
static int write_flat(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *data, size_t n)
{
    hsize_t dim = n;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);   /* an address even when empty */
    hid_t ds = H5Dcreate2(loc, name, file_type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = ds < 0 || (n > 0 && H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0);
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return rc;
}

/* ---------- writing ---------- */

int dataset_id_bits(int vocab_size, int requested)
{
    if (requested) return requested;
    return vocab_size <= 65536 ? 16 : 32;   /* ids 0 .. vocab_size-1 */
}

static int write_split(hid_t splits, const DatasetSplit *s, int id_bits)
{
    hid_t g = H5Gcreate2(splits, s->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return 1;
    const Corpus *c = &s->corpus;
    hid_t id_type = id_bits == 16 ? H5T_STD_U16LE : H5T_STD_I32LE;   /* HDF5 converts int32 ids */
    int rc = 0;
    rc |= write_flat(g, "src_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, c->src_off, (size_t)c->n + 1);
    rc |= write_flat(g, "tgt_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, c->tgt_off, (size_t)c->n + 1);
    /* the corpus's ids are int32, or uint16 (prepare, for a 16-bit file) */
    rc |= write_flat(g, "src_ids", id_type, c->src_tok ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT16,
                     c->src_tok ? (const void *)c->src_tok : (const void *)c->src_tok16, (size_t)c->src_off[c->n]);
    rc |= write_flat(g, "tgt_ids", id_type, c->tgt_tok ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT16,
                     c->tgt_tok ? (const void *)c->tgt_tok : (const void *)c->tgt_tok16, (size_t)c->tgt_off[c->n]);
    rc |= h5io_attr_i64(g, "n_pairs", c->n);
    rc |= h5io_attr_i64(g, "n_input_pairs", s->n_lines);
    rc |= h5io_attr_i64(g, "n_dropped", s->n_dropped);
    int nf = s->n_files;
    const char **names = xmalloc(sizeof(char *) * 2 * nf);
    int64_t *num = xmalloc(sizeof(int64_t) * 2 * nf);
    for (int side = 0; side < 2; side++) {
        const DatasetFile *f = side ? s->tgt : s->src;
        const char *pre = side ? "tgt" : "src";
        char key[32];
        for (int k = 0; k < nf; k++) names[k] = f[k].path;
        snprintf(key, sizeof key, "%s_files", pre);
        rc |= h5io_attr_vstrs(g, key, names, nf);
        for (int k = 0; k < nf; k++) names[k] = f[k].sha256;
        snprintf(key, sizeof key, "%s_sha256", pre);
        rc |= h5io_attr_vstrs(g, key, names, nf);
        for (int k = 0; k < nf; k++) num[k] = f[k].bytes;
        snprintf(key, sizeof key, "%s_bytes", pre);
        rc |= h5io_attr_i64s(g, key, num, nf);
        for (int k = 0; k < nf; k++) num[k] = f[k].lines;
        snprintf(key, sizeof key, "%s_lines", pre);
        rc |= h5io_attr_i64s(g, key, num, nf);
    }
    free(names); free(num);
    H5Gclose(g);
    return rc;
}

/* the file's provenance and token ids (docs/dataset.md) */
static int write_root_attrs(hid_t f, const DatasetWrite *d)
{
    int rc = 0;
    rc |= h5io_attr_vstr(f, "format", DATASET_FORMAT);
    rc |= h5io_attr_i64(f, "format_version", DATASET_FORMAT_VERSION);
    rc |= h5io_attr_i64(f, "vocab_size", d->vocab.vocab_size);
    rc |= h5io_attr_i64(f, "id_bits", dataset_id_bits(d->vocab.vocab_size, d->id_bits));
    rc |= h5io_attr_i64(f, "max_len", d->max_len);
    rc |= h5io_attr_vstr(f, "spm_options", d->spm_options);
    rc |= h5io_attr_vstr(f, "command", d->command);
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    rc |= h5io_attr_vstr(f, "created", when);
    rc |= h5io_attr_i64(f, "pad_id", TOK_PAD);
    rc |= h5io_attr_i64(f, "bos_id", TOK_BOS);
    rc |= h5io_attr_i64(f, "eos_id", TOK_EOS);
    rc |= h5io_attr_i64(f, "unk_id", TOK_UNK);
    return rc;
}

/* /vocab (pieces, SentencePiece model) and /splits */
static int write_groups(hid_t f, const DatasetWrite *d)
{
    int rc = 0;
    hid_t vg = H5Gcreate2(f, "vocab", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (vg >= 0) {
        hid_t t = h5io_vstr_type();
        rc |= write_1d(vg, "pieces", t, t, d->vocab.pieces, (size_t)d->vocab.vocab_size);
        H5Tclose(t);
        rc |= write_1d(vg, "spm_model", H5T_STD_U8LE, H5T_NATIVE_UCHAR, d->vocab.spm_model, d->vocab.spm_model_len);
        H5Gclose(vg);
    } else rc = 1;
    hid_t sg = H5Gcreate2(f, "splits", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (sg >= 0) {
        const char **names = xmalloc(sizeof(char *) * (d->n_splits ? d->n_splits : 1));
        for (int i = 0; i < d->n_splits; i++) {
            rc |= write_split(sg, &d->splits[i], dataset_id_bits(d->vocab.vocab_size, d->id_bits));
            names[i] = d->splits[i].name;
        }
        rc |= h5io_attr_vstrs(f, "split_names", names, d->n_splits);
        free(names);
        H5Gclose(sg);
    } else rc = 1;
    return rc;
}

int dataset_write(const char *path, const DatasetWrite *d)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        fprintf(stderr, "error: %s: path too long\n", path);
        return 2;
    }
    ErrSave es;
    quiet_on(&es);
    int rc = 1;
    int bits = dataset_id_bits(d->vocab.vocab_size, d->id_bits);
    if ((bits != 16 && bits != 32) || (bits == 16 && d->vocab.vocab_size > 65536)) {
        quiet_off(&es);
        fprintf(stderr, "error: %s: ids of a vocabulary of %d cannot be stored in %d bits\n", path,
                d->vocab.vocab_size, bits);
        return 2;
    }
    /* objects of 4 KiB or more start on a page: the id and offset arrays
     * can be mapped in place (dataset_map) */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_alignment(fapl, 4096, 4096);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        quiet_off(&es);
        fprintf(stderr, "error: %s: cannot create (%s)\n", tmp, strerror(errno ? errno : EIO));
        return 2;
    }
    rc = write_root_attrs(f, d);
    rc |= write_groups(f, d);
    if (H5Fclose(f) < 0) rc = 1;
    quiet_off(&es);
    if (rc) {
        unlink(tmp);
        fprintf(stderr, "error: %s: writing the HDF5 dataset failed (disk full?)\n", tmp);
        return 2;
    }
    /* fsync the data, rename, fsync the directory: all or nothing */
    int fd = open(tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        fprintf(stderr, "error: %s: fsync failed: %s\n", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        unlink(tmp);
        return 2;
    }
    close(fd);
    char msg[8400];
    if (h5io_publish(tmp, path, msg, sizeof msg)) {
        fprintf(stderr, "error: %s\n", msg);
        return 2;
    }
    return 0;
}

/* ---------- reading ---------- */

/* the datasets that input/prepare.sh NAME makes, by default as data/NAME.h5 */
static const char *const PREPARE_NAMES[] = { "multi30k", "wmt14", "wmt14-offline", "wmt14-enfr" };

/* how to make a missing dataset file: input/prepare.sh NAME when its file
 * name is NAME.h5 of a known dataset (with the path as OUT, and an empty
 * ROOT for the default data root, unless it is the default data/NAME.h5),
 * else a pointer to the list of datasets */
static void missing_dataset_hint(const char *path, char *buf, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    for (size_t i = 0; i < sizeof PREPARE_NAMES / sizeof PREPARE_NAMES[0]; i++) {
        const char *name = PREPARE_NAMES[i];
        size_t nl = strlen(name);
        if (bl != nl + 3 || strncmp(base, name, nl) || strcmp(base + nl, ".h5")) continue;
        int is_default = base - path == 5 && !strncmp(path, "data/", 5);
        if (is_default) snprintf(buf, cap, "make it with: input/prepare.sh %s", name);
        else snprintf(buf, cap, "make it with: input/prepare.sh %s '' %s", name, path);
        return;
    }
    snprintf(buf, cap, "make a dataset with input/prepare.sh NAME or transformer prepare: see docs/dataset.md");
}

/* Open path and check that it is one of our datasets; returns the file id
 * or -1 after a one-line error.  Must be called with HDF5 errors quiet. */
static hid_t open_ours(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) {
            char hint[4400];
            missing_dataset_hint(path, hint, sizeof hint);
            fprintf(stderr, "error: %s: no such file (%s)\n", path, hint);
            return -1;
        }
        fprintf(stderr, "error: %s: cannot open dataset: %s\n", path, strerror(errno));
        return -1;
    }
    hid_t f = h5io_open_read(path);
    if (f < 0) {
        if (h5io_read_all(path)) {   /* an I/O error, not a damaged file */
            fprintf(stderr, "error: %s: cannot read dataset: %s\n", path, strerror(errno));
            return -1;
        }
        /* the HDF5 signature is at the start; a cut file still has it but
         * its end-of-address lies past the end of the file */
        FILE *fp = fopen(path, "rb");
        unsigned char magic[8] = {0};
        size_t got = fp ? fread(magic, 1, 8, fp) : 0;
        if (fp) fclose(fp);
        if (got == 8 && !memcmp(magic, "\211HDF\r\n\032\n", 8))
            fprintf(stderr, "error: %s: truncated or corrupt HDF5 file (cannot be opened)\n", path);
        else
            fprintf(stderr, "error: %s: not an HDF5 file%s\n", path, st.st_size == 0 ? " (empty)" : "");
        return -1;
    }
    char *fmt = h5io_attr_read_str(f, "format");
    int ok = fmt && !strcmp(fmt, DATASET_FORMAT);
    free(fmt);
    if (!ok) {
        fprintf(stderr, "error: %s: HDF5 file is not a transformer dataset (no format=\"%s\" attribute)\n", path,
                DATASET_FORMAT);
        H5Fclose(f);
        return -1;
    }
    long long ver = 0;
    if (h5io_attr_read(f, "format_version", H5T_NATIVE_LLONG, &ver) || ver != DATASET_FORMAT_VERSION) {
        fprintf(stderr, "error: %s: dataset format version %lld, this build reads version %d\n", path, ver,
                DATASET_FORMAT_VERSION);
        H5Fclose(f);
        return -1;
    }
    return f;
}

/* 0, or 2 after the one-line error of a split that cannot be read (why),
 * the corpus freed: dataset_load and dataset_map say it alike */
static int split_result(const char *path, const char *split, const char *why, Corpus *out)
{
    if (!why) return 0;
    if (!strcmp(why, "no such split"))
        fprintf(stderr, "error: %s: dataset has no split '%s'\n", path, split);
    else
        fprintf(stderr, "error: %s: split '%s': %s\n", path, split, why);
    corpus_free(out);
    return 2;
}

/* read a whole 1-D dataset of n_expect elements (n_expect < 0: any; the
 * length is returned in *n) into a fresh buffer */
static void *read_1d(hid_t loc, const char *name, hid_t mem_type, size_t elem, long long n_expect, long long *n)
{
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0) return NULL;
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (ds < 0) return NULL;
    hid_t sp = H5Dget_space(ds);
    hsize_t dim = 0;
    void *buf = NULL;
    /* an allocation is bounded by what the file stores: a damaged or
     * crafted file can declare 2^40 elements in a few bytes (chunks never
     * written read as fill values); deflate expands at most ~1032x */
    int plausible = H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, &dim, NULL) == 1 &&
                    (double)dim * elem <= 1100.0 * (double)H5Dget_storage_size(ds) + 65536.0;
    if (plausible && (n_expect < 0 || (long long)dim == n_expect)) {
        buf = xmalloc(elem * (dim ? dim : 1));
        if (dim && H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) { free(buf); buf = NULL; }
        if (n) *n = (long long)dim;
    }
    H5Sclose(sp);
    H5Dclose(ds);
    return buf;
}

static int check_offsets(const int64_t *off, int n, long long n_ids)
{
    if (off[0] != 0 || off[n] != n_ids) return 1;
    for (int i = 0; i < n; i++)
        if (off[i + 1] < off[i]) return 1;
    return 0;
}

/* the split group of f and its vocab_size and n_pairs, or the reason not */
static const char *open_split(hid_t f, const char *split, long long *vocab, long long *n, hid_t *g)
{
    char gname[512];
    snprintf(gname, sizeof gname, "splits/%s", split);
    *g = -1;
    if (h5io_attr_read(f, "vocab_size", H5T_NATIVE_LLONG, vocab)) return "missing vocab_size attribute";
    if (strchr(split, '/') || H5Lexists(f, "splits", H5P_DEFAULT) <= 0 || H5Lexists(f, gname, H5P_DEFAULT) <= 0)
        return "no such split";
    if ((*g = H5Gopen2(f, gname, H5P_DEFAULT)) < 0 || h5io_attr_read(*g, "n_pairs", H5T_NATIVE_LLONG, n) || *n < 0 || *n > INT32_MAX)
        return "split has no valid n_pairs attribute";
    return NULL;
}

/* every id of one side within [TOK_FIRST_SYMBOL - 1, vocab) */
static int ids_ok(const int32_t *w, const uint16_t *h, long long n, long long vocab)
{
    if (w) {
        for (long long i = 0; i < n; i++)
            if (w[i] < TOK_FIRST_SYMBOL - 1 || w[i] >= vocab) return 0;
    } else {
        for (long long i = 0; i < n; i++)
            if (h[i] < TOK_FIRST_SYMBOL - 1 || h[i] >= vocab) return 0;
    }
    return 1;
}

/* the offsets and ids of split group g (n pairs) read into out, 32-bit
 * whatever the file stores, then checked as map_split checks them */
static const char *read_split(hid_t g, long long n, long long vocab, Corpus *out)
{
    long long ns = 0, nt = 0;
    out->n = (int)n;
    out->src_off = read_1d(g, "src_offsets", H5T_NATIVE_INT64, 8, n + 1, NULL);
    out->tgt_off = read_1d(g, "tgt_offsets", H5T_NATIVE_INT64, 8, n + 1, NULL);
    out->src_tok = read_1d(g, "src_ids", H5T_NATIVE_INT32, 4, -1, &ns);
    out->tgt_tok = read_1d(g, "tgt_ids", H5T_NATIVE_INT32, 4, -1, &nt);
    if (!out->src_off || !out->tgt_off || !out->src_tok || !out->tgt_tok)
        return "cannot read the split's ids/offsets (corrupt file?)";
    if (check_offsets(out->src_off, out->n, ns) || check_offsets(out->tgt_off, out->n, nt))
        return "offsets do not match the ids (corrupt file)";
    if (!ids_ok(out->src_tok, NULL, ns, vocab)) return "source id out of vocabulary range";
    if (!ids_ok(out->tgt_tok, NULL, nt, vocab)) return "target id out of vocabulary range";
    return NULL;
}

int dataset_vocab_size(const char *path)
{
    ErrSave es;
    quiet_on(&es);
    hid_t f = open_ours(path);
    long long v = 0;
    if (f >= 0) {
        if (h5io_attr_read(f, "vocab_size", H5T_NATIVE_LLONG, &v) || v <= 0) {
            fprintf(stderr, "error: %s: missing vocab_size attribute\n", path);
            v = 0;
        }
        H5Fclose(f);
    }
    quiet_off(&es);
    return (int)v;
}

int dataset_load_vocab(const char *path, DatasetVocab *v)
{
    memset(v, 0, sizeof *v);
    ErrSave es;
    quiet_on(&es);
    hid_t f = open_ours(path);
    if (f < 0) { quiet_off(&es); return 2; }
    const char *why = NULL;
    long long vs = 0, ml = 0;
    hid_t t = h5io_vstr_type();
    char **pieces = NULL;
    if (h5io_attr_read(f, "vocab_size", H5T_NATIVE_LLONG, &vs) || vs <= 0 || vs > INT32_MAX) why = "missing vocab_size attribute";
    else if (H5Lexists(f, "vocab", H5P_DEFAULT) <= 0) why = "no vocab group";
    else {
        hid_t g = H5Gopen2(f, "vocab", H5P_DEFAULT);
        pieces = read_1d(g, "pieces", t, sizeof(char *), vs, NULL);
        v->spm_model = read_1d(g, "spm_model", H5T_NATIVE_UCHAR, 1, -1, &ml);
        H5Gclose(g);
        if (!pieces || !v->spm_model) why = "cannot read vocab/pieces and vocab/spm_model";
    }
    if (pieces) {
        /* copy out of HDF5's allocations so that the caller frees with free() */
        v->pieces = xmalloc(sizeof(char *) * vs);
        for (long long i = 0; i < vs; i++) v->pieces[i] = strdup(pieces[i] ? pieces[i] : "");
        hsize_t dim = (hsize_t)vs;
        hid_t sp = H5Screate_simple(1, &dim, NULL);
        H5Dvlen_reclaim(t, sp, H5P_DEFAULT, pieces);
        H5Sclose(sp);
        free(pieces);
    }
    H5Tclose(t);
    H5Fclose(f);
    quiet_off(&es);
    v->vocab_size = (int)vs;
    v->spm_model_len = (size_t)ml;
    if (why) {
        fprintf(stderr, "error: %s: %s\n", path, why);
        dataset_vocab_free(v);
        return 2;
    }
    return 0;
}

uint64_t dataset_vocab_hash(const DatasetVocab *v)
{
    uint64_t h = fnv1a64(&v->vocab_size, sizeof v->vocab_size, 0);
    for (int i = 0; i < v->vocab_size; i++) h = fnv1a64(v->pieces[i], strlen(v->pieces[i]) + 1, h);
    return h ? h : 1;
}

int dataset_vocab_hash_of(const char *path, uint64_t *hash)
{
    DatasetVocab v;
    if (dataset_load_vocab(path, &v)) return 2;
    *hash = dataset_vocab_hash(&v);
    dataset_vocab_free(&v);
    return 0;
}

void dataset_vocab_free(DatasetVocab *v)
{
    if (v->pieces)
        for (int i = 0; i < v->vocab_size; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->spm_model);
    memset(v, 0, sizeof *v);
}

/* ---------- mapping the training split (dataset_map) ---------- */

/* the whole file mapped read-only and shared (the page cache holds one copy
 * per node), or NULL where arrays cannot be used in place: a host that is
 * not little-endian (the file's types are LE), a file with a user block
 * (dataset addresses are then relative to it), mmap failing */
static void *map_file(hid_t f, const char *path, size_t *len)
{
    const uint16_t one = 1;
    hid_t fcpl = H5Fget_create_plist(f);
    hsize_t ub = 1;
    if (fcpl >= 0) { H5Pget_userblock(fcpl, &ub); H5Pclose(fcpl); }
    if (*(const unsigned char *)&one != 1 || ub != 0) return NULL;
    int fd = open(path, O_RDONLY);
    struct stat st;
    void *p = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0)
        p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);   /* the mapping keeps the file (even if it is replaced) */
    if (p == MAP_FAILED) return NULL;
    *len = (size_t)st.st_size;
    return p;
}

/* 1 if the 1-D dataset name of g holds unsigned 16-bit integers */
static int is_u16(hid_t g, const char *name)
{
    if (H5Lexists(g, name, H5P_DEFAULT) <= 0) return 0;
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) return 0;
    hid_t t = H5Dget_type(ds);
    int r = H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 2 && H5Tget_sign(t) == H5T_SGN_NONE;
    H5Tclose(t);
    H5Dclose(ds);
    return r;
}

/* the array name of g (n_expect elements, or any when < 0; count in *n) in
 * place in the mapping when it is stored there contiguous, unfiltered, of
 * exactly file_type and aligned for elem; else read into private memory */
static void *map_or_read(hid_t g, const char *name, hid_t file_type, hid_t mem_type, size_t elem, long long n_expect,
                         long long *n, const Corpus *c)
{
    if (H5Lexists(g, name, H5P_DEFAULT) <= 0) return NULL;
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) return NULL;
    void *p = NULL;
    hid_t dcpl = H5Dget_create_plist(ds), t = H5Dget_type(ds), sp = H5Dget_space(ds);
    hsize_t dim = 0;
    haddr_t at = H5Dget_offset(ds);
    int flat = c->map && dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0 &&
               H5Tequal(t, file_type) > 0 && H5Sget_simple_extent_ndims(sp) == 1 &&
               H5Sget_simple_extent_dims(sp, &dim, NULL) == 1 && dim > 0 && (n_expect < 0 || (long long)dim == n_expect) &&
               at != HADDR_UNDEF && at % elem == 0 && at <= c->map_len && dim * elem <= c->map_len - at;
    if (flat) {
        p = (char *)c->map + at;
        if (n) *n = (long long)dim;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Tclose(t); H5Sclose(sp);
    H5Dclose(ds);
    return p ? p : read_1d(g, name, mem_type, elem, n_expect, n);
}

/* the offsets and ids of split group g (n pairs) into out, then checked */
static const char *map_split(hid_t g, long long n, long long vocab, Corpus *out)
{
    long long ns = 0, nt = 0;
    out->n = (int)n;
    out->src_off = map_or_read(g, "src_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, 8, n + 1, NULL, out);
    out->tgt_off = map_or_read(g, "tgt_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, 8, n + 1, NULL, out);
    if (is_u16(g, "src_ids")) out->src_tok16 = map_or_read(g, "src_ids", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2, -1, &ns, out);
    else out->src_tok = map_or_read(g, "src_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, -1, &ns, out);
    if (is_u16(g, "tgt_ids")) out->tgt_tok16 = map_or_read(g, "tgt_ids", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2, -1, &nt, out);
    else out->tgt_tok = map_or_read(g, "tgt_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, -1, &nt, out);
    if (!out->src_off || !out->tgt_off || !(out->src_tok || out->src_tok16) || !(out->tgt_tok || out->tgt_tok16))
        return "cannot read the split's ids/offsets (corrupt file?)";
    if (check_offsets(out->src_off, out->n, ns) || check_offsets(out->tgt_off, out->n, nt))
        return "offsets do not match the ids (corrupt file)";
    if (!ids_ok(out->src_tok, out->src_tok16, ns, vocab)) return "source id out of vocabulary range";
    if (!ids_ok(out->tgt_tok, out->tgt_tok16, nt, vocab)) return "target id out of vocabulary range";
    return NULL;
}

/* open a split of the dataset at path into out: mapped in place where
 * its arrays allow (map_split), else read and widened to 32 bits
 * (read_split); 0, or 2 after one line, out freed */
static int split_from_file(const char *path, const char *split, Corpus *out, int in_place)
{
    memset(out, 0, sizeof *out);
    ErrSave es;
    quiet_on(&es);
    hid_t f = open_ours(path);
    if (f < 0) { quiet_off(&es); return 2; }
    long long vocab = 0, n = 0;
    hid_t g = -1;
    const char *why = open_split(f, split, &vocab, &n, &g);
    if (!why && in_place) {
        out->map = map_file(f, path, &out->map_len);
        why = map_split(g, n, vocab, out);
    } else if (!why) {
        why = read_split(g, n, vocab, out);
    }
    if (g >= 0) H5Gclose(g);
    H5Fclose(f);
    quiet_off(&es);
    return split_result(path, split, why, out);
}

int dataset_load(const char *path, const char *split, Corpus *out)
{
    return split_from_file(path, split, out, 0);
}

int dataset_map(const char *path, const char *split, Corpus *out)
{
    return split_from_file(path, split, out, 1);
}

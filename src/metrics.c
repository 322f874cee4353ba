/* HDF5 metrics log (docs/metrics.md). */
#include "metrics.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "run_files.h"
#include "util.h"

#define MAXCOL 6
#define METRICS_FORMAT "transformer-metrics"   /* the root attribute "format" */

typedef struct {
    const char *group;
    int ncol;
    const char *col[MAXCOL];
    int is_int[MAXCOL];
    double *rows;     /* buffered, ncol per row */
    int n, cap;
    int optional;     /* the group is created with its first row, not before */
    long last_step;   /* the step of the last row, logged or buffered; -1: none known */
} Table;

struct Metrics {
    char path[4200];
    Table train, dev, loss_scale;
    int broken;       /* a write failed: warned once, stop trying */
    char stopped_by[16]; /* metrics_end: how the run ended ("": not yet) */
    long stop_step, best_step;
    double best_nll;
    int end_dirty;    /* the end attributes to (re)write at the next flush */
};

static const char *const END_ATTRS[] = { "stopped_by", "stop_step", "best_step", "best_dev_nll" };

/* the end attributes: removed (a run that resumes has not ended), or
 * written after metrics_end */
static int write_end(hid_t f, const Metrics *m)
{
    for (int i = 0; i < 4; i++)
        if (H5Aexists(f, END_ATTRS[i]) > 0 && H5Adelete(f, END_ATTRS[i]) < 0) return -1;
    if (!m->stopped_by[0]) return 0;
    int bad = h5io_attr_vstr(f, "stopped_by", m->stopped_by) | h5io_attr_i64(f, "stop_step", m->stop_step);
    if (m->best_step > 0) bad |= h5io_attr_i64(f, "best_step", m->best_step) | h5io_attr_f64(f, "best_dev_nll", m->best_nll);
    return bad ? -1 : 0;
}

static void table_add(Table *t, const double *row)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->rows = xrealloc(t->rows, sizeof(double) * t->ncol * t->cap);
    }
    memcpy(t->rows + (size_t)t->n * t->ncol, row, sizeof(double) * t->ncol);
    t->n++;
    t->last_step = (long)row[0];
}

static hid_t col_type(const Table *t, int c, int mem)
{
    if (t->is_int[c]) return mem ? H5T_NATIVE_INT64 : H5T_STD_I64LE;
    return mem ? H5T_NATIVE_DOUBLE : H5T_IEEE_F64LE;
}

/* open or create the column dataset (extendible, chunked) */
static hid_t col_open(hid_t g, const Table *t, int c)
{
    if (H5Lexists(g, t->col[c], H5P_DEFAULT) > 0) return H5Dopen2(g, t->col[c], H5P_DEFAULT);
    hsize_t dim = 0, maxd = H5S_UNLIMITED, chunk = 1024;
    hid_t sp = H5Screate_simple(1, &dim, &maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    /* a column added after a log was begun (a run resumed by a newer
     * version) reads NaN in the rows before it */
    double nan = NAN;
    if (!t->is_int[c]) H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan);
    hid_t d = H5Dcreate2(g, t->col[c], col_type(t, c, 0), sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return d;
}

/* append the buffered rows of t; with keep_upto >= 0 first cut rows whose
 * step exceeds it */
static int table_write(hid_t f, Table *t, long keep_upto)
{
    if (t->optional && t->n == 0 && H5Lexists(f, t->group, H5P_DEFAULT) <= 0) return 0;
    hid_t g = H5Lexists(f, t->group, H5P_DEFAULT) > 0 ? H5Gopen2(f, t->group, H5P_DEFAULT)
                                                       : H5Gcreate2(f, t->group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return -1;
    int bad = 0;
    hsize_t keep = (hsize_t)-1, rows = 0;   /* rows: column 0's, kept */
    if (keep_upto >= 0) {   /* column 0 is the step, ascending */
        hid_t d = col_open(g, t, 0);
        hid_t sp = H5Dget_space(d);
        hsize_t n = 0;
        H5Sget_simple_extent_dims(sp, &n, NULL);
        H5Sclose(sp);
        int64_t *st = xmalloc(sizeof(int64_t) * (n ? n : 1));
        if (n && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, st) < 0) bad = 1;
        keep = 0;
        while (keep < n && st[keep] <= keep_upto) keep++;
        if (!bad) t->last_step = keep ? (long)st[keep - 1] : -1;
        free(st);
        H5Dclose(d);
    }
    for (int c = 0; c < t->ncol && !bad; c++) {
        hid_t d = col_open(g, t, c);
        if (d < 0) { bad = 1; break; }
        hid_t sp = H5Dget_space(d);
        hsize_t n = 0;
        H5Sget_simple_extent_dims(sp, &n, NULL);
        H5Sclose(sp);
        if (keep != (hsize_t)-1 && keep < n) n = keep;
        if (c == 0) rows = n;
        else if (n < rows) n = rows;   /* a column newer than the log: fill */
        hsize_t add = (hsize_t)t->n, total = n + add;
        if (H5Dset_extent(d, &total) < 0) bad = 1;
        if (!bad && add) {
            void *buf = xmalloc(8 * add);
            for (hsize_t i = 0; i < add; i++) {
                double v = t->rows[i * t->ncol + c];
                if (t->is_int[c]) ((int64_t *)buf)[i] = (int64_t)v;
                else ((double *)buf)[i] = v;
            }
            hid_t fs = H5Dget_space(d);
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, &n, NULL, &add, NULL);
            hid_t ms = H5Screate_simple(1, &add, NULL);
            if (H5Dwrite(d, col_type(t, c, 1), ms, fs, H5P_DEFAULT, buf) < 0) bad = 1;
            H5Sclose(ms);
            H5Sclose(fs);
            free(buf);
        }
        H5Dclose(d);
    }
    H5Gclose(g);
    if (!bad) t->n = 0;
    return bad ? -1 : 0;
}

/* the whole log is rewritten and renamed into place (h5io.h): a full disk
 * or a kill leaves the previous complete log */
static int write_all(Metrics *m, long keep_upto, char *msg, int cap)
{
    int created;
    H5Mem mem;
    /* logs before the format attribute hold these groups only */
    static const char *const LEGACY[] = { "train", "dev", "loss_scale", NULL };
    if (h5io_open_log(&mem, m->path, METRICS_FORMAT, LEGACY, &created, msg, cap)) return -1;
    if (table_write(mem.id, &m->train, keep_upto) | table_write(mem.id, &m->dev, keep_upto) |
        table_write(mem.id, &m->loss_scale, keep_upto) || ((keep_upto >= 0 || m->end_dirty) && write_end(mem.id, m))) {
        h5io_discard(&mem);
        snprintf(msg, cap, "%s: HDF5 could not append to the metrics log", m->path);
        return -1;
    }
    int rc = h5io_commit(&mem, m->path, msg, cap);
    if (!rc) m->end_dirty = 0;
    return rc;
}

Metrics *metrics_open(const char *run_dir, long keep_upto)
{
    h5io_init();
    Metrics *m = xcalloc(1, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s/" RUN_FILE_METRICS, run_dir);
    m->train = (Table){ "train", 6, { "step", "loss", "lr", "tokens_per_s", "elapsed_s", "tokens" },
                        { 1, 0, 0, 0, 0, 0 }, NULL, 0, 0, 0, -1 };
    m->dev = (Table){ "dev", 5, { "step", "loss", "ppl", "tokens", "elapsed_s" }, { 1, 0, 0, 1, 0 }, NULL, 0, 0, 0, -1 };
    m->loss_scale = (Table){ "loss_scale", 3, { "step", "scale", "skipped" }, { 1, 0, 1 }, NULL, 0, 0, 1, -1 };
    char msg[4400];
    hdf5_lock();
    if (write_all(m, keep_upto, msg, sizeof msg)) {
        fprintf(stderr, "warning: %s (metrics are not logged from here on)\n", msg);
        m->broken = 1;
    }
    hdf5_unlock();
    return m;
}

void metrics_train(Metrics *m, long step, double loss, double lr, double tokens, double tokens_per_s, double elapsed)
{
    double row[6] = { (double)step, loss, lr, tokens_per_s, elapsed, tokens };
    table_add(&m->train, row);
}

/* a run restarted after its last step evaluates that step again: the same
 * parameters give the same figures, and the row is there already */
void metrics_dev(Metrics *m, long step, double loss, double ppl, long tokens, double elapsed)
{
    if (step == m->dev.last_step) return;
    double row[5] = { (double)step, loss, ppl, (double)tokens, elapsed };
    table_add(&m->dev, row);
}

void metrics_loss_scale(Metrics *m, long step, double scale, long skipped)
{
    double row[3] = { (double)step, scale, (double)skipped };
    table_add(&m->loss_scale, row);
}

void metrics_end(Metrics *m, const char *stopped_by, long stop_step, long best_step, double best_nll)
{
    snprintf(m->stopped_by, sizeof m->stopped_by, "%s", stopped_by);
    m->stop_step = stop_step;
    m->best_step = best_step;
    m->best_nll = best_nll;
    m->end_dirty = 1;
}

void metrics_flush(Metrics *m, int block)
{
    if (!m || m->broken || (m->train.n == 0 && m->dev.n == 0 && m->loss_scale.n == 0 && !m->end_dirty)) return;
    if (block) hdf5_lock();
    else if (hdf5_trylock()) return;   /* a checkpoint is being written: next time */
    char msg[4400];
    if (write_all(m, -1, msg, sizeof msg)) {
        fprintf(stderr, "warning: %s (metrics are not logged from here on)\n", msg);
        m->broken = 1;
    }
    hdf5_unlock();
}

void metrics_close(Metrics *m)
{
    if (!m) return;
    metrics_flush(m, 1);
    free(m->train.rows);
    free(m->dev.rows);
    free(m->loss_scale.rows);
    free(m);
}

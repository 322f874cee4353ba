/* HDF5 checkpoints: layout in docs/checkpoint.md. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "corpus.h"
#include "dataset.h"
#include "h5io.h"
#include "run_files.h"
#include "util.h"

/* --------------------------------------------------------------- writing */

static int write_group(hid_t f, const char *group, const ParamTable *pt, const float *buf, hid_t lcpl)
{
    char name[PARAM_NAME + 32];
    for (int i = 0; i < pt->n; i++) {
        const ParamInfo *p = &pt->t[i];
        hsize_t dims[2] = { (hsize_t)p->rows, (hsize_t)p->cols };
        hid_t sp = H5Screate_simple(p->cols == 1 ? 1 : 2, dims, NULL);
        snprintf(name, sizeof name, "%s/%s", group, p->name);
        hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        int bad = d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf + p->offset) < 0;
        /* a flipped byte must be a read error, not silently damaged weights
         * to resume from or average */
        if (!bad) bad = h5io_attr_u64(d, "checksum", checksum64(buf + p->offset, sizeof(float) * p->rows * p->cols)) < 0;
        if (d >= 0) H5Dclose(d);
        H5Sclose(sp);
        if (bad) return -1;
    }
    return 0;
}

/* test hook TRANSFORMER_CKPT_SLOW=STEP:MS: the write of checkpoint STEP
 * (every checkpoint for STEP *) takes MS ms longer, as on a slow file
 * system (test_ckpt_skip); results are unchanged */
static void slow_write_hook(int64_t step)
{
    const char *v = getenv("TRANSFORMER_CKPT_SLOW");
    long long s, ms;
    if (v && sscanf(v, "*:%lld", &ms) == 1) s = step;
    else if (!v || sscanf(v, "%lld:%lld", &s, &ms) != 2) return;
    if (s != step || ms <= 0) return;
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

/* the checkpoint's attributes (docs/checkpoint.md): format, provenance and
 * the training state a resume restores; nonzero if HDF5 refused one */
static int write_state_attrs(hid_t f, const ParamTable *pt, const char *cfg_text, const CkptState *st, int has_adam)
{
    int bad = 0;
    bad |= h5io_attr_vstr(f, "format", CKPT_FORMAT);
    bad |= h5io_attr_i64(f, "format_version", CKPT_FORMAT_VERSION);
    bad |= h5io_attr_vstr(f, "version", PROJECT_VERSION);
    bad |= h5io_attr_vstr(f, "config", cfg_text);
    bad |= h5io_attr_i64(f, "step", st->step);
    bad |= h5io_attr_f64(f, "elapsed_seconds", st->elapsed);
    bad |= h5io_attr_u64(f, "seed", st->seed);
    bad |= h5io_attr_i64(f, "ranks", st->ranks);
    bad |= h5io_attr_i64(f, "update_freq", st->update_freq);
    bad |= h5io_attr_i64(f, "data_position", st->data_position);
    bad |= h5io_attr_u64(f, "batch_plan_hash", st->plan_hash);
    bad |= h5io_attr_i64(f, "batches_per_epoch", st->n_batches);
    bad |= h5io_attr_i64(f, "param_count", (int64_t)pt->total);
    bad |= h5io_attr_i64(f, "has_adam", has_adam);
    if (st->averaged_from) bad |= h5io_attr_vstr(f, "averaged_from", st->averaged_from);
    if (st->vocab_hash) bad |= h5io_attr_u64(f, "vocab_hash", st->vocab_hash);
    if (st->loss_scale > 0)
        bad |= h5io_attr_f64(f, "loss_scale", st->loss_scale) | h5io_attr_i64(f, "loss_scale_good_steps", st->loss_scale_good)
             | h5io_attr_i64(f, "loss_scale_skipped", st->loss_scale_skipped);
    if (st->best_step > 0)
        bad |= h5io_attr_i64(f, "best_step", st->best_step) | h5io_attr_f64(f, "best_dev_nll", st->best_nll)
             | h5io_attr_i64(f, "patience_bad_evals", st->bad_evals);
    if (st->log_tokens > 0)
        bad |= h5io_attr_f64(f, "log_interval_loss", st->log_loss) | h5io_attr_f64(f, "log_interval_tokens", st->log_tokens);
    return bad;
}

int checkpoint_write(const char *path, const ParamTable *pt, const float *params, const float *adam_m,
                     const float *adam_v, const char *cfg_text, const CkptState *st, H5Buffer *reuse, char *msg,
                     int cap)
{
    int has_adam = adam_m && adam_v;
    /* built in memory, then written in one pass and renamed (h5io.h): a
     * full disk costs the temporary, never the previous checkpoint */
    H5Mem mem;
    char tmp[4200];
    h5io_tmp_name(path, tmp, sizeof tmp);
    /* HDF5 (not thread-safe here) only while the file is built in memory;
     * the disk write below runs without the lock */
    hdf5_lock();
    if (h5io_create(&mem, sizeof(float) * pt->total * (has_adam ? 3 : 1) + (1 << 20), reuse)) {
        hdf5_unlock();
        snprintf(msg, cap, "%s: cannot create the checkpoint in memory", tmp);
        return -1;
    }
    hid_t f = mem.id, lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    int bad = write_state_attrs(f, pt, cfg_text, st, has_adam);
    if (!bad) bad |= write_group(f, "params", pt, params, lcpl);
    if (!bad && has_adam) bad |= write_group(f, "adam_m", pt, adam_m, lcpl) | write_group(f, "adam_v", pt, adam_v, lcpl);
    H5Pclose(lcpl);
    H5Image img;
    char why[256] = "";
    if (bad) h5io_discard(&mem);
    else bad = h5io_close_image(&mem, &img, why, sizeof why);
    hdf5_unlock();
    if (bad) {
        snprintf(msg, cap, "%s: HDF5 could not build the checkpoint in memory%s%s", tmp, why[0] ? ": " : "", why);
        return -1;
    }
    if (h5io_write_image(&img, tmp, msg, cap)) return -1;
    slow_write_hook(st->step);
    /* fault injection for tests: die between the write and the rename */
    const char *fault = getenv("TRANSFORMER_CKPT_FAULT_STEP");
    if (fault && atoll(fault) == st->step) raise(SIGKILL);
    if (h5io_publish(tmp, path, msg, cap)) return -1;
    if (checkpoint_test_stop_step(st->step)) raise(SIGSTOP);
    return 0;
}

int checkpoint_test_stop_step(int64_t step)
{
    const char *stop = getenv("TRANSFORMER_CKPT_STOP_STEP");
    return stop && atoll(stop) == step;
}

/* --------------------------------------------------------------- reading */

/* Open path as one of our checkpoints: file id, or -1 after a one-line error
 * with *rc = CKPT_DAMAGED (not HDF5, truncated) or 2 (unreadable, foreign,
 * another format version) */
static hid_t open_ckpt(const char *path, int *rc)
{
    *rc = 2;
    h5io_init();
    struct stat sb;
    if (stat(path, &sb)) {
        fprintf(stderr, "error: %s: cannot open checkpoint: %s\n", path, strerror(errno));
        return -1;
    }
    hid_t f = h5io_open_read(path);
    if (f < 0) {
        /* damage only if every byte reads and HDF5 still refuses them: an
         * I/O error may pass, and must not get an intact file renamed .bad */
        if (h5io_read_all(path)) {
            fprintf(stderr, "error: %s: cannot read checkpoint: %s\n", path, strerror(errno));
            return -1;
        }
        if (H5Fis_hdf5(path) <= 0)   /* e.g. cut short before its superblock */
            fprintf(stderr, "error: %s: not a checkpoint (not an HDF5 file)\n", path);
        else
            fprintf(stderr, "error: %s: cannot read checkpoint (truncated or corrupt HDF5 file)\n", path);
        *rc = CKPT_DAMAGED;
        return -1;
    }
    char *fmt = h5io_attr_read_str(f, "format");
    int ok = fmt && !strcmp(fmt, CKPT_FORMAT);
    free(fmt);
    if (!ok) {
        fprintf(stderr, "error: %s: not a transformer checkpoint (no format=\"%s\" attribute)\n", path, CKPT_FORMAT);
        H5Fclose(f);
        return -1;
    }
    int64_t v = 0;
    if (h5io_attr_read(f, "format_version", H5T_NATIVE_INT64, &v) || v != CKPT_FORMAT_VERSION) {
        fprintf(stderr, "error: %s: checkpoint format version %lld is not %d\n", path, (long long)v, CKPT_FORMAT_VERSION);
        H5Fclose(f);
        return -1;
    }
    return f;
}

static int config_from_text(Config *c, const char *text, const char *origin)
{
    config_defaults(c);
    char *buf = strdup(text), *save = NULL;
    int rc = 0, line = 0;
    for (char *l = strtok_r(buf, "\n", &save); l && !rc; l = strtok_r(NULL, "\n", &save)) {
        line++;
        char *eq = strstr(l, " = ");
        if (!eq) {
            fprintf(stderr, "error: %s: config line %d malformed\n", origin, line);
            rc = 2;
            break;
        }
        *eq = '\0';
        rc = config_set(c, origin, line, l, eq + 3);
    }
    free(buf);
    return rc ? 2 : config_validate(c, origin);
}

/* the loss scaler's state (loss_scale.h), present only in checkpoints of
 * runs with loss scaling: older files and runs without it leave 0 */
static int read_loss_scale(hid_t f, const char *path, CkptState *st)
{
    if (H5Aexists(f, "loss_scale") <= 0) return 0;
    int bad = h5io_attr_read(f, "loss_scale", H5T_NATIVE_DOUBLE, &st->loss_scale);
    bad |= h5io_attr_read(f, "loss_scale_good_steps", H5T_NATIVE_INT64, &st->loss_scale_good);
    bad |= h5io_attr_read(f, "loss_scale_skipped", H5T_NATIVE_INT64, &st->loss_scale_skipped);
    if (bad || !isfinite(st->loss_scale) || st->loss_scale <= 0 || st->loss_scale_good < 0 || st->loss_scale_skipped < 0) {
        fprintf(stderr, "error: %s: loss_scale attributes unreadable or out of range (loss_scale %g, good steps %lld, "
                "skipped %lld)\n", path, st->loss_scale, (long long)st->loss_scale_good, (long long)st->loss_scale_skipped);
        return 1;
    }
    return 0;
}

/* the best dev evaluation (run.h DevBest), present once a run has
 * evaluated on dev: older files and runs without eval_steps leave 0 */
static int read_dev_best(hid_t f, const char *path, CkptState *st)
{
    if (H5Aexists(f, "best_step") <= 0) return 0;
    int bad = h5io_attr_read(f, "best_step", H5T_NATIVE_INT64, &st->best_step);
    bad |= h5io_attr_read(f, "best_dev_nll", H5T_NATIVE_DOUBLE, &st->best_nll);
    bad |= h5io_attr_read(f, "patience_bad_evals", H5T_NATIVE_INT64, &st->bad_evals);
    if (bad || st->best_step < 1 || st->best_step > st->step || !isfinite(st->best_nll) || st->bad_evals < 0
        || st->bad_evals > INT32_MAX) {
        fprintf(stderr, "error: %s: best_step attributes unreadable or out of range (best_step %lld, best_dev_nll %g, "
                "patience_bad_evals %lld)\n", path, (long long)st->best_step, st->best_nll, (long long)st->bad_evals);
        return 1;
    }
    return 0;
}

/* the log interval's sums, present when the checkpoint was written between
 * two log lines: older files and checkpoints on a log line leave 0 */
static int read_log_interval(hid_t f, const char *path, CkptState *st)
{
    if (H5Aexists(f, "log_interval_tokens") <= 0) return 0;
    int bad = h5io_attr_read(f, "log_interval_loss", H5T_NATIVE_DOUBLE, &st->log_loss);
    bad |= h5io_attr_read(f, "log_interval_tokens", H5T_NATIVE_DOUBLE, &st->log_tokens);
    if (bad || !isfinite(st->log_loss) || !isfinite(st->log_tokens) || st->log_tokens <= 0) {
        fprintf(stderr, "error: %s: log_interval attributes unreadable or out of range (loss %g, tokens %g)\n", path,
                st->log_loss, st->log_tokens);
        return 1;
    }
    return 0;
}

static int read_config_f(hid_t f, const char *path, Config *cfg, CkptState *st)
{
    char *text = h5io_attr_read_str(f, "config");
    if (!text) {
        fprintf(stderr, "error: %s: checkpoint has no config attribute\n", path);
        return CKPT_DAMAGED;
    }
    char origin[4200];
    snprintf(origin, sizeof origin, "%s (config attribute)", path);
    int rc = config_from_text(cfg, text, origin);
    free(text);
    if (rc) return 2;
    if (st) {
        memset(st, 0, sizeof *st);
        int64_t ranks = 0, update_freq = 0, n_batches = 0;
        int bad = h5io_attr_read(f, "step", H5T_NATIVE_INT64, &st->step);
        bad |= h5io_attr_read(f, "elapsed_seconds", H5T_NATIVE_DOUBLE, &st->elapsed);
        bad |= h5io_attr_read(f, "seed", H5T_NATIVE_UINT64, &st->seed);
        bad |= h5io_attr_read(f, "ranks", H5T_NATIVE_INT64, &ranks);
        bad |= h5io_attr_read(f, "update_freq", H5T_NATIVE_INT64, &update_freq);
        bad |= h5io_attr_read(f, "data_position", H5T_NATIVE_INT64, &st->data_position);
        bad |= h5io_attr_read(f, "batch_plan_hash", H5T_NATIVE_UINT64, &st->plan_hash);
        bad |= h5io_attr_read(f, "batches_per_epoch", H5T_NATIVE_INT64, &n_batches);
        if (bad) {
            fprintf(stderr, "error: %s: checkpoint lacks run-state attributes (step, seed, ...)\n", path);
            return CKPT_DAMAGED;
        }
        if (H5Aexists(f, "vocab_hash") > 0 && h5io_attr_read(f, "vocab_hash", H5T_NATIVE_UINT64, &st->vocab_hash)) {
            fprintf(stderr, "error: %s: cannot read its vocab_hash attribute\n", path);
            return CKPT_DAMAGED;
        }
        if (read_loss_scale(f, path, st) || read_dev_best(f, path, st) || read_log_interval(f, path, st))
            return CKPT_DAMAGED;
        if (st->step < 0 || st->step > INT32_MAX || !isfinite(st->elapsed) || st->elapsed < 0 || ranks < 1
            || ranks > INT32_MAX || update_freq < 1 || update_freq > INT32_MAX || st->data_position < 0 || n_batches < 0
            || n_batches > INT32_MAX) {
            fprintf(stderr, "error: %s: checkpoint run state out of range (step %lld, elapsed %g s, ranks %lld, "
                    "update_freq %lld, data_position %lld, batches_per_epoch %lld)\n", path, (long long)st->step,
                    st->elapsed, (long long)ranks, (long long)update_freq, (long long)st->data_position,
                    (long long)n_batches);
            return CKPT_DAMAGED;
        }
        st->ranks = (int)ranks;
        st->update_freq = (int)update_freq;
        st->n_batches = (int)n_batches;
    }
    return 0;
}

int checkpoint_check_vocab(const char *ckpt_path, const CkptState *st, const char *data_path)
{
    if (!st->vocab_hash || corpus_is_synthetic(data_path)) return 0;
    uint64_t h;
    if (dataset_vocab_hash_of(data_path, &h)) return 2;
    if (h == st->vocab_hash) return 0;
    fprintf(stderr, "error: %s: its vocabulary is not the one %s was trained with (same ids, other pieces): "
            "the model would read and write the wrong words\n", data_path, ckpt_path);
    return 2;
}

int checkpoint_read_config(const char *path, Config *cfg_out, CkptState *st)
{
    int rc;
    hid_t f = open_ckpt(path, &rc);
    if (f < 0) return rc;
    rc = read_config_f(f, path, cfg_out, st);
    H5Fclose(f);
    return rc;
}

static int read_group(hid_t f, const char *path, const char *group, const ParamTable *pt, float *buf)
{
    char name[PARAM_NAME + 32];
    for (int i = 0; i < pt->n; i++) {
        const ParamInfo *p = &pt->t[i];
        snprintf(name, sizeof name, "%s/%s", group, p->name);
        hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
        if (d < 0) {
            fprintf(stderr, "error: %s: checkpoint is missing tensor %s\n", path, name);
            return CKPT_DAMAGED;
        }
        hid_t sp = H5Dget_space(d);
        hsize_t dims[3] = { 0, 0, 0 };
        int nd = H5Sget_simple_extent_ndims(sp);
        if (nd >= 1 && nd <= 2) H5Sget_simple_extent_dims(sp, dims, NULL);
        H5Sclose(sp);
        int ok = (nd == 1 && p->cols == 1 && dims[0] == (hsize_t)p->rows)
                 || (nd == 2 && dims[0] == (hsize_t)p->rows && dims[1] == (hsize_t)p->cols);
        if (!ok) {
            fprintf(stderr, "error: %s: tensor %s has shape [%llu, %llu], expected [%d, %d]\n", path, name,
                    (unsigned long long)dims[0], (unsigned long long)dims[1], p->rows, p->cols);
            H5Dclose(d);
            return CKPT_DAMAGED;
        }
        if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf + p->offset) < 0) {
            fprintf(stderr, "error: %s: cannot read tensor %s (truncated or corrupt file)\n", path, name);
            H5Dclose(d);
            return CKPT_DAMAGED;
        }
        uint64_t want;
        int has = H5Aexists(d, "checksum") > 0;   /* absent in older files */
        if (has && (h5io_attr_read(d, "checksum", H5T_NATIVE_UINT64, &want)
                    || want != checksum64(buf + p->offset, sizeof(float) * p->rows * p->cols))) {
            fprintf(stderr, "error: %s: tensor %s fails its checksum (the file is damaged)\n", path, name);
            H5Dclose(d);
            return CKPT_DAMAGED;
        }
        H5Dclose(d);
    }
    return 0;
}

int checkpoint_read_tensors(const char *path, const ParamTable *pt, float *params, float *m_out, float *v_out)
{
    int rc;
    hid_t f = open_ckpt(path, &rc);
    if (f < 0) return rc;
    rc = read_group(f, path, "params", pt, params);
    if (!rc && (m_out || v_out)) {
        int64_t has = 0;
        if (h5io_attr_read(f, "has_adam", H5T_NATIVE_INT64, &has) || !has) {
            fprintf(stderr, "error: %s: checkpoint has no Adam moments (an average?): cannot resume training from it\n", path);
            rc = 2;
        }
        if (!rc && m_out) rc = read_group(f, path, "adam_m", pt, m_out);
        if (!rc && v_out) rc = read_group(f, path, "adam_v", pt, v_out);
    }
    H5Fclose(f);
    return rc;
}

int checkpoint_open_model(const char *path, Config *cfg_out, CkptState *st, Model *m, Backend *be)
{
    int rc;
    hid_t f = open_ckpt(path, &rc);
    if (f < 0) return 2;
    rc = read_config_f(f, path, cfg_out, st);
    H5Fclose(f);
    if (rc) return 2;
    if (model_init(m, &cfg_out->model, be)) {
        fprintf(stderr, "error: %s: out of device memory for the parameters\n", path);
        return 2;
    }
    size_t bytes = sizeof(float) * m->pt.total;
    float *host = xmalloc(bytes);
    rc = checkpoint_read_tensors(path, &m->pt, host, NULL, NULL);
    if (!rc) be->upload(be, m->params, host, bytes);
    free(host);
    if (rc) model_free(m);
    return rc ? 2 : 0;
}

/* ------------------------------------------------------- run directories */

void checkpoint_path(char *buf, size_t cap, const char *run_dir, int64_t step)
{
    snprintf(buf, cap, "%s/ckpt_%08lld.h5", run_dir, (long long)step);
}

static int is_ckpt_name(const char *name, int64_t *step)
{
    long long s;
    char chk[64];
    if (sscanf(name, "ckpt_%lld.h5", &s) != 1 || s < 0) return 0;
    snprintf(chk, sizeof chk, "ckpt_%08lld.h5", s);
    if (strcmp(chk, name)) return 0;
    *step = s;
    return 1;
}

/* a name training reads or writes in a run directory (checkpoint.h), or
 * one of them moved aside as NAME.bad or NAME.bad.N (resume.c, h5io_open_log) */
/* NAME.bad and NAME.bad.N (file_move_aside's names for a file moved
 * aside) cut to NAME; any other name left as it is */
static void cut_moved_aside_suffix(char *name)
{
    char *bad = strstr(name, ".bad");
    if (!bad) return;
    const char *tail = bad + strlen(".bad");
    if (*tail == '.') {   /* .bad.N: N is one or more digits */
        tail++;
        if (!*tail || strspn(tail, "0123456789") != strlen(tail)) return;
    } else if (*tail) {
        return;
    }
    *bad = '\0';
}

static int is_run_file(const char *name)
{
    static const char *const OWN[] = { RUN_FILE_BEST, RUN_FILE_METRICS, RUN_FILE_PROBE, RUN_FILE_LOCK };
    char base[256];
    size_t n = strlen(name);
    if (n >= sizeof base) return 0;
    memcpy(base, name, n + 1);
    cut_moved_aside_suffix(base);
    int64_t step;
    if (is_ckpt_name(base, &step)) return 1;
    for (size_t i = 0; i < sizeof OWN / sizeof OWN[0]; i++)
        if (!strcmp(base, OWN[i])) return 1;
    return 0;
}

int checkpoint_check_run_output(const char *opt, const char *out, const char *run_dir)
{
    char dir[4096];
    const char *name = cli_path_dir(out, dir, sizeof dir);
    if (is_run_file(name) && cli_in_dir(out, run_dir)) {
        fprintf(stderr, "error: %s: %s is a file of the run directory %s: choose another name\n", out, opt, run_dir);
        return 2;
    }
    return 0;
}

int checkpoint_check_output_beside(const char *opt, const char *out, const char *ckpt)
{
    char dir[4096];
    if (!out) return 0;
    cli_path_dir(ckpt, dir, sizeof dir);
    return checkpoint_check_run_output(opt, out, dir);
}

int checkpoint_list(const char *run_dir, char ***paths, int64_t **steps)
{
    *paths = NULL;
    *steps = NULL;
    DIR *d = opendir(run_dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        if (!is_ckpt_name(e->d_name, &s)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *paths = xrealloc(*paths, sizeof(char *) * cap);
            *steps = xrealloc(*steps, sizeof(int64_t) * cap);
        }
        size_t L = strlen(run_dir) + strlen(e->d_name) + 2;
        (*paths)[n] = xmalloc(L);
        snprintf((*paths)[n], L, "%s/%s", run_dir, e->d_name);
        (*steps)[n] = s;
        n++;
    }
    closedir(d);
    /* insertion sort by step (few files) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
            int64_t ts = (*steps)[j]; (*steps)[j] = (*steps)[j - 1]; (*steps)[j - 1] = ts;
            char *tp = (*paths)[j]; (*paths)[j] = (*paths)[j - 1]; (*paths)[j - 1] = tp;
        }
    return n;
}

int checkpoint_on_interval(int64_t step, int ckpt_steps, int train_steps)
{
    return ckpt_steps <= 0 || step % ckpt_steps == 0 || step == train_steps;
}

int checkpoint_upto_best(int64_t step, int64_t best_step, int ckpt_steps, int train_steps)
{
    return best_step > 0 && step <= best_step && (step == best_step || checkpoint_on_interval(step, ckpt_steps, train_steps));
}

void checkpoint_prune(const char *run_dir, int keep, int ckpt_steps, int train_steps, int64_t best_step)
{
    char **paths;
    int64_t *steps;
    int n = checkpoint_list(run_dir, &paths, &steps);
    /* newest first: the newest file is the resume point whatever its kind */
    for (int i = n - 1, kept = 0, kept_best = 0; i >= 0; i--) {
        int interval = checkpoint_on_interval(steps[i], ckpt_steps, train_steps);
        int upto_best = checkpoint_upto_best(steps[i], best_step, ckpt_steps, train_steps);
        if ((interval && kept < keep) || i == n - 1 || (upto_best && kept_best < keep)) {
            kept += interval;
            kept_best += upto_best;
        } else unlink(paths[i]);
        free(paths[i]);
    }
    free(paths);
    free(steps);
    /* temporaries left by a crash in the middle of a write */
    DIR *d = opendir(run_dir);
    if (!d) return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d))) {
        size_t L = strlen(e->d_name);
        if (!strncmp(e->d_name, ".ckpt_", 6) && L > 4 && !strcmp(e->d_name + L - 4, ".tmp")) {
            snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
}

/* ------------------------------------------------------ background writer */

struct CkptWriter {
    const ParamTable *pt;
    char run_dir[CFG_STR];
    int keep, ckpt_steps, train_steps;   /* what checkpoint_prune keeps */
    int keep_best;        /* keep the best dev checkpoint, linked as best.h5 */
    float *host;          /* params | adam_m | adam_v */
    H5Buffer image;       /* the file's memory, kept for the next write */
    char *cfg_text;
    CkptState st;
    pthread_t thread;
    int started;          /* a thread exists that has not been joined */
    atomic_int done;
    atomic_int failed;    /* a write failed (sticky): training must stop */
    double t_snapshot;    /* seconds the training thread spent copying */
    double t_write;       /* seconds the last complete write took (0: none yet) */
};

CkptWriter *checkpoint_writer_create(const ParamTable *pt, const Config *c)
{
    h5io_init();   /* on the main thread: the library sets up MPI hooks here */
    CkptWriter *w = xcalloc(1, sizeof *w);
    w->pt = pt;
    snprintf(w->run_dir, sizeof w->run_dir, "%s", c->run_dir);
    w->keep = c->keep_ckpts;
    w->ckpt_steps = c->ckpt_steps;
    w->train_steps = c->train_steps;
    w->keep_best = c->keep_best;
    /* the snapshot buffer, allocated and touched now: first-touch page
     * faults would otherwise land on the step of the first checkpoint */
    w->host = xmalloc(3 * sizeof(float) * pt->total);
    memset(w->host, 0, 3 * sizeof(float) * pt->total);
    return w;
}

/* run_dir/best.h5: a hard link to the checkpoint just written, which is
 * that of the best dev evaluation; replaced atomically (rename) */
static void link_best(const CkptWriter *w, const char *path)
{
    char best[CFG_STR + 16], tmp[CFG_STR + 24];
    snprintf(best, sizeof best, "%s/" RUN_FILE_BEST, w->run_dir);
    snprintf(tmp, sizeof tmp, "%s/.best.h5.tmp", w->run_dir);
    unlink(tmp);
    if (link(path, tmp) || rename(tmp, best)) {
        fprintf(stderr, "warning: %s: cannot link it to %s (%s); it is kept under its own name\n", path, best, strerror(errno));
        unlink(tmp);
    }
}

static void *writer_main(void *arg)
{
    CkptWriter *w = arg;
    char path[4200], msg[4400];
    checkpoint_path(path, sizeof path, w->run_dir, w->st.step);
    size_t n = w->pt->total;
    double t0 = now_seconds();
    /* a diverged state is not saved: the run stops instead (the loss check
     * of the training loop misses an update that makes the weights inf or
     * NaN at a step whose loss was still finite) */
    const char *bad_tensor = NULL;
    for (int i = 0; i < w->pt->n && !bad_tensor; i++) {
        const ParamInfo *p = &w->pt->t[i];
        const float *x = w->host + p->offset;
        for (size_t k = 0; k < (size_t)p->rows * p->cols; k++)
            if (!isfinite(x[k])) { bad_tensor = p->name; break; }
    }
    int rc;
    if (bad_tensor) {
        snprintf(msg, sizeof msg, "%s: not written: parameter %s is not finite (the run diverged; a lower lr_factor "
                 "or a longer warmup may help)", path, bad_tensor);
        rc = -1;
    } else
        rc = checkpoint_write(path, w->pt, w->host, w->host + n, w->host + 2 * n, w->cfg_text, &w->st, &w->image, msg,
                              sizeof msg);
    double t = now_seconds() - t0;
    int64_t best = w->keep_best ? w->st.best_step : 0;
    if (!rc && best == w->st.step) link_best(w, path);
    if (!rc) checkpoint_prune(w->run_dir, w->keep, w->ckpt_steps, w->train_steps, best);
    if (rc) fprintf(stderr, "error: %s\n", msg);
    else {
        struct stat sb;
        double mb = stat(path, &sb) ? 0 : sb.st_size / 1e6;
        printf("checkpoint %s: %.1f MB in %.2fs (%.0f MB/s, written and fsync'ed in the background; "
               "%.3fs on the training thread)\n", path, mb, t, mb / (t > 0 ? t : 1e-9), w->t_snapshot);
        fflush(stdout);
    }
    if (rc) atomic_store(&w->failed, 1);
    else w->t_write = t;   /* read only once done is seen (seq_cst below) */
    atomic_store(&w->done, 1);
    return NULL;
}

int checkpoint_writer_busy(CkptWriter *w)
{
    return w->started && !atomic_load(&w->done);
}

int checkpoint_writer_wait_for(CkptWriter *w, double seconds)
{
    double deadline = now_seconds() + seconds;
    struct timespec poll = { 0, 2000000L };   /* 2 ms */
    while (checkpoint_writer_busy(w) && now_seconds() < deadline) nanosleep(&poll, NULL);
    return checkpoint_writer_busy(w);
}

double checkpoint_writer_last_seconds(CkptWriter *w)
{
    return checkpoint_writer_busy(w) ? 0.0 : w->t_write;
}

int checkpoint_writer_failed(CkptWriter *w)
{
    return atomic_load(&w->failed);
}

int checkpoint_writer_wait(CkptWriter *w)
{
    if (w->started) {
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
    return checkpoint_writer_failed(w) ? -1 : 0;
}

int checkpoint_writer_start(CkptWriter *w, const Model *m, const char *cfg_text, const CkptState *st)
{
    checkpoint_writer_wait(w);
    if (checkpoint_writer_failed(w)) return -1;
    size_t n = w->pt->total, bytes = sizeof(float) * n;
    if (!w->host) w->host = xmalloc(3 * bytes);
    /* the only part on the training thread: a device -> host copy */
    double t0 = now_seconds();
    m->be->sync(m->be);
    m->be->download(m->be, w->host, m->params, bytes);
    m->be->download(m->be, w->host + n, m->adam_m, bytes);
    m->be->download(m->be, w->host + 2 * n, m->adam_v, bytes);
    w->t_snapshot = now_seconds() - t0;
    free(w->cfg_text);
    w->cfg_text = strdup(cfg_text);
    w->st = *st;
    atomic_store(&w->done, 0);
    if (pthread_create(&w->thread, NULL, writer_main, w)) {
        writer_main(w);   /* no thread: write synchronously */
        return checkpoint_writer_failed(w) ? -1 : 0;
    }
    w->started = 1;
    return 0;
}

void checkpoint_writer_free(CkptWriter *w)
{
    if (!w) return;
    checkpoint_writer_wait(w);
    free(w->host);
    h5io_buffer_free(&w->image);
    free(w->cfg_text);
    free(w);
}

/* dataset.{h,c} and sha256.c without SentencePiece:
 * - SHA-256 against the FIPS 180-4 test vectors (empty, "abc", the 448-bit
 *   message, one million 'a' fed in odd-sized pieces);
 * - dataset_write -> dataset_load / dataset_load_vocab round trip, exact;
 * - 16-bit ids (vocab <= 65536), 32-bit ids (--id-bits 32) and a file of
 *   the old layout (chunked, deflated int32) read the same through
 *   dataset_load (widened) and dataset_map (mapped in place where stored
 *   flat, 16-bit ids kept narrow);
 * - errors (return 2, file left alone): unknown split, missing file, a file
 *   cut short, offsets that do not match the ids, ids out of vocabulary;
 * - dataset_write leaves no temporary file and replaces atomically. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "sha256.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static void test_sha256(void)
{
    char hex[65];
    sha256_hex("", 0, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "empty: %s", hex);
    sha256_hex("abc", 3, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "abc: %s", hex);
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(m, strlen(m), hex);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "448-bit: %s", hex);
    Sha256 s;
    sha256_init(&s);
    char a[1000];
    memset(a, 'a', sizeof a);
    size_t done = 0, step = 1;
    while (done < 1000000) {
        size_t k = step < 1000000 - done ? step : 1000000 - done;
        if (k > sizeof a) k = sizeof a;
        sha256_update(&s, a, k);
        done += k;
        step = step * 7 % 997 + 1;
    }
    unsigned char d[32];
    sha256_final(&s, d);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", d[i]);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "million a: %s", hex);
}

static void make_corpus(Corpus *c, int n, int vocab, int seed)
{
    c->n = n;
    c->src_off = malloc(sizeof(int64_t) * (n + 1));
    c->tgt_off = malloc(sizeof(int64_t) * (n + 1));
    c->src_tok = malloc(sizeof(int32_t) * n * 30 + 4);
    c->tgt_tok = malloc(sizeof(int32_t) * n * 30 + 4);
    c->src_off[0] = c->tgt_off[0] = 0;
    unsigned x = (unsigned)seed;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        int ls = (int)(x >> 16) % 30, lt = (int)(x >> 8) % 30;
        c->src_off[i + 1] = c->src_off[i] + ls;
        c->tgt_off[i + 1] = c->tgt_off[i] + lt;
        for (int k = 0; k < ls; k++) c->src_tok[c->src_off[i] + k] = 3 + (int)((x >> 3) + k * 17) % (vocab - 3);
        for (int k = 0; k < lt; k++) c->tgt_tok[c->tgt_off[i] + k] = 3 + (int)((x >> 5) + k * 31) % (vocab - 3);
    }
}

static int same(const Corpus *a, const Corpus *b)
{
    return a->n == b->n && !memcmp(a->src_off, b->src_off, 8 * (a->n + 1)) && !memcmp(a->tgt_off, b->tgt_off, 8 * (a->n + 1))
        && !memcmp(a->src_tok, b->src_tok, 4 * a->src_off[a->n]) && !memcmp(a->tgt_tok, b->tgt_tok, 4 * a->tgt_off[a->n]);
}

/* a and b hold the same pairs, whatever the width or place of their ids */
static int same_ids(const Corpus *a, const Corpus *b)
{
    if (a->n != b->n || memcmp(a->src_off, b->src_off, 8 * (a->n + 1)) || memcmp(a->tgt_off, b->tgt_off, 8 * (a->n + 1)))
        return 0;
    for (int64_t k = 0; k < a->src_off[a->n]; k++) if (corpus_src_id(a, k) != corpus_src_id(b, k)) return 0;
    for (int64_t k = 0; k < a->tgt_off[a->n]; k++) if (corpus_tgt_id(a, k) != corpus_tgt_id(b, k)) return 0;
    return 1;
}

/* every array of c lies in its file mapping (shared, not a private copy) */
static int all_mapped(const Corpus *c)
{
    const void *arr[4] = { c->src_off, c->tgt_off, c->src_tok ? (void *)c->src_tok : (void *)c->src_tok16,
                           c->tgt_tok ? (void *)c->tgt_tok : (void *)c->tgt_tok16 };
    for (int k = 0; k < 4; k++)
        if (!c->map || (const char *)arr[k] < (const char *)c->map || (const char *)arr[k] >= (const char *)c->map + c->map_len)
            return 0;
    return 1;
}

/* a dataset as format version 1 wrote it before 16-bit ids: int32 ids and
 * int64 offsets chunked and deflated (they cannot be mapped), no id_bits */
static void write_old_file(const char *path, const Corpus *c, int V)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t st = H5Tcopy(H5T_C_S1), sc = H5Screate(H5S_SCALAR);
    H5Tset_size(st, H5T_VARIABLE);
    const char *fmt = DATASET_FORMAT;
    long long one = 1, v = V, n = c->n;
    hid_t a = H5Acreate2(f, "format", st, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, st, &fmt); H5Aclose(a);
    a = H5Acreate2(f, "format_version", H5T_STD_I64LE, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &one); H5Aclose(a);
    a = H5Acreate2(f, "vocab_size", H5T_STD_I64LE, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &v); H5Aclose(a);
    hid_t s = H5Gcreate2(f, "splits", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(s, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    a = H5Acreate2(g, "n_pairs", H5T_STD_I64LE, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &n); H5Aclose(a);
    const char *names[4] = { "src_offsets", "tgt_offsets", "src_ids", "tgt_ids" };
    const void *data[4] = { c->src_off, c->tgt_off, c->src_tok, c->tgt_tok };
    hsize_t dims[4] = { (hsize_t)n + 1, (hsize_t)n + 1, (hsize_t)c->src_off[n], (hsize_t)c->tgt_off[n] };
    for (int k = 0; k < 4; k++) {
        hid_t sp = H5Screate_simple(1, &dims[k], NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 1, &dims[k]); H5Pset_shuffle(dcpl); H5Pset_deflate(dcpl, 1);
        hid_t ft = k < 2 ? H5T_STD_I64LE : H5T_STD_I32LE, mt = k < 2 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32;
        hid_t d = H5Dcreate2(g, names[k], ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data[k]);
        H5Dclose(d); H5Pclose(dcpl); H5Sclose(sp);
    }
    H5Gclose(g); H5Gclose(s); H5Sclose(sc); H5Tclose(st); H5Fclose(f);
}

/* the type of a stored id array: 16 (uint16 LE), 32 (int32 LE) or 0 */
static int stored_bits(const char *path, const char *dset)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, dset, H5P_DEFAULT), t = H5Dget_type(d);
    int bits = H5Tequal(t, H5T_STD_U16LE) > 0 ? 16 : H5Tequal(t, H5T_STD_I32LE) > 0 ? 32 : 0;
    H5Tclose(t); H5Dclose(d); H5Fclose(f);
    return bits;
}

/* 16-bit and 32-bit files of the same corpus, and a file of the old
 * layout: dataset_load widens, dataset_map keeps 16-bit ids narrow and maps
 * what the file stores flat; every way gives the same pairs */
static void test_widths(const char *dir, DatasetWrite *dw, const Corpus *ref)
{
    char p16[256], p32[256], pold[256];
    snprintf(p16, sizeof p16, "%s/w16.h5", dir);
    snprintf(p32, sizeof p32, "%s/w32.h5", dir);
    snprintf(pold, sizeof pold, "%s/old.h5", dir);
    Corpus c;
    dw->id_bits = 0;
    CHECK(dataset_write(p16, dw) == 0 && stored_bits(p16, "/splits/train/src_ids") == 16, "vocab 500: 16-bit ids");
    CHECK(dataset_map(p16, "train", &c) == 0 && c.src_tok16 && c.tgt_tok16 && !c.src_tok && all_mapped(&c)
          && same_ids(&c, ref), "16-bit file: mapped in place, narrow, same pairs");
    corpus_free(&c);
    CHECK(dataset_load(p16, "train", &c) == 0 && c.src_tok && same_ids(&c, ref), "16-bit file: dataset_load widens");
    corpus_free(&c);
    dw->id_bits = 32;
    CHECK(dataset_write(p32, dw) == 0 && stored_bits(p32, "/splits/train/tgt_ids") == 32, "--id-bits 32");
    CHECK(dataset_map(p32, "train", &c) == 0 && c.src_tok && all_mapped(&c) && same_ids(&c, ref), "32-bit file mapped");
    corpus_free(&c);
    dw->id_bits = 0;
    write_old_file(pold, ref, dw->vocab.vocab_size);
    CHECK(dataset_map(pold, "train", &c) == 0 && c.src_tok && !all_mapped(&c) && same_ids(&c, ref),
          "old (chunked, deflated, 32-bit) file: read privately, same pairs");
    corpus_free(&c);
    CHECK(dataset_load(pold, "train", &c) == 0 && same_ids(&c, ref), "old file: dataset_load");
    corpus_free(&c);
    printf("(expected error lines follow)\n");
    fflush(stdout);
    dw->vocab.vocab_size = 70000;
    dw->id_bits = 16;
    CHECK(dataset_write(p16, dw) == 2, "16-bit ids of a 70000 vocabulary accepted");
    dw->vocab.vocab_size = 500;
    dw->id_bits = 0;
}

/* overwrite one element of an int64 dataset in place */
static void poke(const char *path, const char *dset, long idx, long long v)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    hid_t fs = H5Dget_space(d);
    hsize_t start = (hsize_t)idx, one = 1;
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL);
    hid_t ms = H5Screate_simple(1, &one, NULL);
    hid_t t = H5Dget_type(d);
    int is64 = H5Tget_size(t) == 8;
    int32_t v32 = (int32_t)v;
    H5Dwrite(d, is64 ? H5T_NATIVE_LLONG : H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, is64 ? (void *)&v : (void *)&v32);
    H5Tclose(t); H5Sclose(ms); H5Sclose(fs); H5Dclose(d); H5Fclose(f);
}

/* a two-split dataset (train 3000 pairs, dev 77) over a V-piece vocabulary
 * with a 300-byte stand-in SentencePiece model */
static void make_dataset(DatasetWrite *dw, DatasetSplit sp[2], DatasetFile fs[2], unsigned char model[300], int V)
{
    DatasetFile f0 = { "a.en", 10, 3, "" }, f1 = { "a.de", 11, 3, "" };
    fs[0] = f0; fs[1] = f1;
    sha256_hex("x", 1, fs[0].sha256);
    sha256_hex("y", 1, fs[1].sha256);
    memset(sp, 0, 2 * sizeof *sp);
    sp[0].name = "train"; make_corpus(&sp[0].corpus, 3000, V, 1); sp[0].n_files = 1; sp[0].src = &fs[0]; sp[0].tgt = &fs[1];
    sp[1].name = "dev"; make_corpus(&sp[1].corpus, 77, V, 2); sp[1].n_files = 1; sp[1].src = &fs[0]; sp[1].tgt = &fs[1];
    DatasetWrite w = { .n_splits = 2, .splits = sp, .spm_options = "spm_train --x", .command = "prepare", .max_len = 64 };
    *dw = w;
    dw->vocab.vocab_size = V;
    dw->vocab.pieces = malloc(sizeof(char *) * V);
    for (int i = 0; i < V; i++) { dw->vocab.pieces[i] = malloc(16); snprintf(dw->vocab.pieces[i], 16, "\xe2\x96\x81p%d", i); }
    for (int i = 0; i < 300; i++) model[i] = (unsigned char)(i * 7);
    dw->vocab.spm_model = model;
    dw->vocab.spm_model_len = 300;
}

/* write, no temporary file left, every split and the vocabulary read back */
static void test_round_trip(const char *dir, const char *path, const DatasetWrite *dw, const DatasetSplit sp[2])
{
    char cmd[600];
    int V = dw->vocab.vocab_size;
    CHECK(dataset_write(path, dw) == 0, "write");
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -q tmp", dir);
    CHECK(system(cmd) != 0, "temporary file left");
    Corpus c;
    CHECK(dataset_load(path, "train", &c) == 0 && same(&c, &sp[0].corpus), "train round trip");
    corpus_free(&c);
    CHECK(dataset_load(path, "dev", &c) == 0 && same(&c, &sp[1].corpus), "dev round trip");
    corpus_free(&c);
    DatasetVocab v;
    CHECK(dataset_load_vocab(path, &v) == 0 && v.vocab_size == V && !strcmp(v.pieces[123], "\xe2\x96\x81p123")
          && v.spm_model_len == dw->vocab.spm_model_len
          && !memcmp(v.spm_model, dw->vocab.spm_model, dw->vocab.spm_model_len), "vocab round trip");
    dataset_vocab_free(&v);
    CHECK(dataset_vocab_size(path) == V, "vocab size");
}

/* unknown or unsafe split names, a missing or truncated file, offsets and
 * ids out of range (a damaged copy of path, bad), each refused with 2 */
static void test_errors(const char *dir, const char *path, const char *bad, int V)
{
    char cmd[600];
    Corpus c;
    DatasetVocab v;
    printf("(expected error lines follow)\n");
    fflush(stdout);
    CHECK(dataset_load(path, "test", &c) == 2, "unknown split");
    CHECK(dataset_load(path, "../train", &c) == 2, "split with a slash");
    snprintf(cmd, sizeof cmd, "%s/none.h5", dir);
    CHECK(dataset_load(cmd, "train", &c) == 2, "missing file");
    snprintf(cmd, sizeof cmd, "head -c 20000 %s > %s", path, bad);
    CHECK(system(cmd) == 0 && dataset_load(bad, "train", &c) == 2 && dataset_load_vocab(bad, &v) == 2, "truncated");
    snprintf(cmd, sizeof cmd, "cp %s %s", path, bad);
    CHECK(system(cmd) == 0, "cp");
    poke(bad, "/splits/dev/src_offsets", 5, 1000000);
    CHECK(dataset_load(bad, "dev", &c) == 2, "bad offsets accepted");
    CHECK(dataset_load(bad, "train", &c) == 0, "other split should still load");
    corpus_free(&c);
    system(cmd);
    poke(bad, "/splits/dev/tgt_ids", 3, V);
    CHECK(dataset_load(bad, "dev", &c) == 2, "id out of vocabulary accepted");
    CHECK(dataset_map(bad, "dev", &c) == 2, "dataset_map: id out of vocabulary accepted");
    system(cmd);
    poke(bad, "/splits/train/tgt_offsets", 7, 1000000);
    CHECK(dataset_map(bad, "train", &c) == 2, "dataset_map: bad offsets accepted");
    CHECK(dataset_map(bad, "nope", &c) == 2, "dataset_map: unknown split");
}

int main(void)
{
    test_sha256();
    char dir[] = "/tmp/test_dataset.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char path[256], bad[256], cmd[600];
    snprintf(path, sizeof path, "%s/d.h5", dir);
    snprintf(bad, sizeof bad, "%s/bad.h5", dir);
    int V = 500;
    DatasetWrite dw;
    DatasetSplit sp[2];
    DatasetFile fs[2];
    unsigned char model[300];
    make_dataset(&dw, sp, fs, model, V);
    test_round_trip(dir, path, &dw, sp);
    test_widths(dir, &dw, &sp[0].corpus);
    test_errors(dir, path, bad, V);

    /* atomic replace: writing again over an existing file gives the new content */
    Corpus c;
    sp[1].corpus.tgt_tok[0] = 4 + (sp[1].corpus.tgt_tok[0] + 1) % (V - 5);
    CHECK(dataset_write(path, &dw) == 0 && dataset_load(path, "dev", &c) == 0 && same(&c, &sp[1].corpus), "rewrite");
    corpus_free(&c);

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    system(cmd);
    for (int i = 0; i < V; i++) free(dw.vocab.pieces[i]);
    free(dw.vocab.pieces);
    corpus_free(&sp[0].corpus);
    corpus_free(&sp[1].corpus);
    if (failures) { printf("%d failures\n", failures); return 1; }
    printf("test_dataset: all checks passed\n");
    return 0;
}

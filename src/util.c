#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void (*util_abort_hook)(int code) = NULL;
void (*util_cleanup_hook)(void) = NULL;
int util_die_fd = -1;

void die(int code, const char *fmt, ...)
{
    /* one write: under mpirun the line must not be split by other output */
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "error: ");
    vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    fflush(stdout);
    if (util_die_fd >= 0) {
        ssize_t w = write(util_die_fd, line, strlen(line));
        (void)w;
    } else {
        fputs(line, stderr);
        fflush(stderr);
    }
    if (util_cleanup_hook) util_cleanup_hook();
    if (util_abort_hook) util_abort_hook(code);
    exit(code);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) die(1, "out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die(1, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) die(1, "out of memory allocating %zu bytes", n);
    return q;
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

void watchdog_check(double t0, int timeout_s, int rank, const char *what)
{
    if (timeout_s <= 0 || now_seconds() - t0 <= timeout_s) return;
    die(1, "rank %d: %s made no progress for %d s (allreduce_timeout): another rank is stuck or dead; "
           "ending the job", rank, what, timeout_s);
}

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t checksum64(const void *data, size_t n)
{
    /* odd 64-bit constants with well-mixed bits (those of xxHash) */
    const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull;
    const unsigned char *p = data;
    uint64_t a0 = P1 + P2, a1 = P2, a2 = 0, a3 = -P1;
    size_t i = 0;
    /* four lanes with no dependence between them: the loop runs at the
     * multiplier's throughput, not its latency */
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        memcpy(w, p + i, 32);
        a0 = rotl64(a0 + w[0] * P2, 31) * P1;
        a1 = rotl64(a1 + w[1] * P2, 31) * P1;
        a2 = rotl64(a2 + w[2] * P2, 31) * P1;
        a3 = rotl64(a3 + w[3] * P2, 31) * P1;
    }
    uint64_t h = rotl64(a0, 1) + rotl64(a1, 7) + rotl64(a2, 12) + rotl64(a3, 18) + (uint64_t)n;
    for (; i < n; i++) h = rotl64(h ^ (p[i] * P3), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t fnv1a64(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;
    if (!h) h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
    return h;
}

int stderr_divert(int fd)
{
    if (fd < 0) return -1;
    fflush(stderr);
    int saved = dup(2);
    if (saved < 0 || dup2(fd, 2) < 0) {
        if (saved >= 0) close(saved);
        return -1;
    }
    return saved;
}

int stderr_quiet(void)
{
    int nul = open("/dev/null", O_WRONLY);
    int saved = stderr_divert(nul);
    if (nul >= 0) close(nul);
    return saved;
}

void stderr_restore(int saved)
{
    if (saved < 0) return;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

long peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (kb < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) != 1) kb = -1;
    fclose(f);
    return kb;
}

int peak_rss_reset(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) return -1;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok ? 0 : -1;
}

/* first byte offset of invalid UTF-8 in s[0..n) (or n): rejects overlong
 * forms, surrogates, code points > U+10FFFF and NUL */
size_t utf8_bad(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c == 0) return i;
        if (c < 0x80) { i++; continue; }
        int k;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return i;
        for (int j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return i;
        i += k + 1;
    }
    return n;
}

int file_move_aside(const char *path, char *bad, size_t cap)
{
    struct stat sb;
    for (int k = 0; k < 1000; k++) {
        if (k) snprintf(bad, cap, "%s.bad.%d", path, k);
        else snprintf(bad, cap, "%s.bad", path);
        if (lstat(bad, &sb) && errno == ENOENT) return rename(path, bad);
    }
    errno = EEXIST;
    return -1;
}

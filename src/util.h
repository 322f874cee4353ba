/* Small helpers shared by the host code: checked allocation, timing, fatal
 * errors.  die() prints one line and exits with the given code; under MPI it
 * aborts the whole job (see dist.c) so that no rank hangs. */
#ifndef UTIL_H
#define UTIL_H

#include <stddef.h>
#include <stdint.h>

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
double now_seconds(void);
/* the allreduce watchdog: past timeout_s (> 0) seconds since t0, a rank that
 * still waits for its peers ends the job with one line (die -> MPI_Abort)
 * instead of blocking until the time limit with no checkpoint */
void watchdog_check(double t0, int timeout_s, int rank, const char *what);
/* one-line error "error: ..." on stderr, then exit(code) (MPI_Abort under MPI) */
void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* set by dist.c: called by die() instead of exit() when MPI is running */
extern void (*util_abort_hook)(int code);
/* set by a command that leaves files to remove: die() calls it before the
 * abort hook, whose MPI_Abort skips atexit's handlers */
extern void (*util_cleanup_hook)(void);
/* -1, or the descriptor die() writes its line to while stderr is captured
 * into a file (resume.c's StderrCapture), so that the line reaches the user */
extern int util_die_fd;
/* stderr to the file descriptor fd (or to /dev/null: stderr_quiet) until
 * stderr_restore(saved) with the value returned; -1 where it could not be
 * diverted (stderr stays as it was, and stderr_restore(-1) does nothing).
 * For the ranks whose errors would repeat rank 0's. */
int stderr_divert(int fd);
int stderr_quiet(void);
void stderr_restore(int saved);
/* The process's peak resident memory in kB (VmHWM of /proc/self/status),
 * -1 where it cannot be read.  peak_rss_reset() restarts the peak from the
 * current resident size (Linux's /proc/self/clear_refs "5"; 0 on success,
 * -1 where refused), so that a stage can report its own peak rather than
 * start-up's, exactly, where sampling from outside can miss it. */
long peak_rss_kb(void);
int peak_rss_reset(void);
uint64_t fnv1a64(const void *data, size_t n, uint64_t h);
/* A 64-bit checksum at memory speed (4 independent multiply-rotate lanes
 * over 64-bit words, then an avalanche), for detecting damaged checkpoint
 * tensors; not cryptographic.  Hashes bytes as little-endian words. */
uint64_t checksum64(const void *data, size_t n);

/* first byte offset of invalid UTF-8 in s[0..n) (or n): rejects overlong
 * forms, surrogates, code points > U+10FFFF and NUL */
size_t utf8_bad(const unsigned char *s, size_t n);

/* path moved aside to path.bad (path.bad.1, ... if taken: an earlier one
 * is kept), its name in bad.  0, or -1 with errno. */
int file_move_aside(const char *path, char *bad, size_t cap);

#endif

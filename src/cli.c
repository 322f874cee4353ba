/* Command-line handling shared by the commands (cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_wants_help(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

int cli_is_setting(const char *word)
{
    return word[0] != '-' && strchr(word, '=') != NULL;
}

int cli_set(Config *c, const char *cmd, const char *word, const char *arch_from)
{
    const char *eq = strchr(word, '=');
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(eq - word), word);   /* a longer key: cut, then unknown */
    if (arch_from && config_is_arch_key(key)) {
        fprintf(stderr, "error: %s: key '%s' is an architecture key; it comes from %s\n", cmd, key, arch_from);
        return 2;
    }
    return config_set(c, "command line", 0, key, eq + 1);
}

int cli_option(const char *cmd, int argc, char **argv, int *i, const char **slot)
{
    const char *opt = argv[*i];
    if (*i + 1 >= argc) { fprintf(stderr, "error: %s: %s needs a value\n", cmd, opt); return 2; }
    const char *v = argv[*i + 1];
    if (!strncmp(v, "--", 2)) {
        fprintf(stderr, "error: %s: %s needs a value, not the option '%s'\n", cmd, opt, v);
        return 2;
    }
    if (*slot) { fprintf(stderr, "error: %s: %s given twice ('%s', '%s')\n", cmd, opt, *slot, v); return 2; }
    *slot = v;
    ++*i;
    return 0;
}

int cli_int(const char *cmd, const char *opt, const char *v, long long lo, long long hi, long long *x)
{
    char *end;
    errno = 0;
    *x = strtoll(v, &end, 10);
    if (end == v || *end || errno || *x < lo || *x > hi) {
        fprintf(stderr, "error: %s: %s '%s' must be an integer from %lld to %lld\n", cmd, opt, v, lo, hi);
        return 2;
    }
    return 0;
}

int parse_config_words(Config *c, int argc, char **argv, int first, const char *cmd,
                       int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx, const char **origin)
{
    config_defaults(c);
    const char *file = NULL;
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--config") && cli_option(cmd, argc, argv, &i, &file)) return 2;
    if (file && config_load_file(c, file)) return 2;
    for (int i = first; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--config")) { i++; continue; }
        if (extra) {
            int rc = extra(ctx, argc, argv, &i);
            if (rc == 1) continue;      /* consumed */
            if (rc > 1) return rc;
        }
        if (cli_is_setting(a)) {
            if (cli_set(c, cmd, a, NULL)) return 2;
            continue;
        }
        fprintf(stderr, "error: %s: unknown argument '%s' (see '%s --help')\n", cmd, a, cmd);
        return 2;
    }
    *origin = file ? file : "command line";
    return 0;
}

int parse_config_args(Config *c, int argc, char **argv, int first, const char *cmd,
                      int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx)
{
    const char *origin;
    return parse_config_words(c, argc, argv, first, cmd, extra, ctx, &origin) ? 2 : config_validate(c, origin);
}

const char *cli_path_dir(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash) { snprintf(dir, n, "."); return path; }
    snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return slash + 1;
}

int cli_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cli_in_dir(const char *path, const char *dir)
{
    char d[4096];
    cli_path_dir(path, d, sizeof d);
    return dir[0] && cli_same_file(d, dir);
}

/* the output can be placed where it is asked: not over a directory, and
 * in a directory that exists (else the command would find out only at its
 * rename, after all its work) */
static int output_place(const char *cmd, const char *opt, const char *out)
{
    struct stat so, sd;
    if (!stat(out, &so)) {
        if (!S_ISDIR(so.st_mode)) return 0;
        fprintf(stderr, "error: %s: %s of %s is a directory: give a file name\n", out, opt, cmd);
        return 2;
    }
    char dir[4096];
    cli_path_dir(out, dir, sizeof dir);
    if (!stat(dir, &sd) && S_ISDIR(sd.st_mode)) return 0;
    fprintf(stderr, "error: %s: %s of %s: no such directory %s\n", out, opt, cmd, dir);
    return 2;
}

/* the output, where it exists, is a regular file: every command writes a
 * temporary beside it and renames that over it, which would replace a
 * device (/dev/null, /dev/stdout), a FIFO or a socket with a regular file
 * (as root, a system device node), and a symbolic link with a file while
 * its target stays as it was.  A symbolic link is refused rather than
 * followed: following it would write into another directory than the one
 * named (the temporary and the rename must be in the target's, perhaps on
 * another file system or another user's), through every writer, and a link
 * that dangles or is changed between this check and the rename would still
 * be replaced; naming the target is one word for the user.  lstat: the
 * name itself, not what it points to. */
static int output_regular(const char *cmd, const char *opt, const char *out)
{
    struct stat sl;
    if (lstat(out, &sl) || S_ISREG(sl.st_mode)) return 0;   /* new, or a file */
    if (S_ISLNK(sl.st_mode)) {
        char to[4096];
        ssize_t n = readlink(out, to, sizeof to - 1);
        to[n > 0 ? n : 0] = '\0';
        fprintf(stderr, "error: %s: %s of %s is a symbolic link (to %s): give the file it names, or another name\n",
                out, opt, cmd, n > 0 ? to : "?");
        return 2;
    }
    const char *what = S_ISCHR(sl.st_mode) ? "a character device" : S_ISBLK(sl.st_mode) ? "a block device"
                     : S_ISFIFO(sl.st_mode) ? "a FIFO" : S_ISSOCK(sl.st_mode) ? "a socket" : "not a file";
    fprintf(stderr, "error: %s: %s of %s is not a regular file (%s): give a file name\n", out, opt, cmd, what);
    return 2;
}

int cli_check_output(const char *cmd, const char *opt, const char *out, const char *const *in, int n_in)
{
    struct stat so, si;
    if (!out) return 0;
    if (output_place(cmd, opt, out)) return 2;
    if (stat(out, &so)) return output_regular(cmd, opt, out);   /* a new file is nobody's input; a dangling link */
    for (int k = 0; k < n_in; k++)
        if (in[k] && !stat(in[k], &si) && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            fprintf(stderr, "error: %s: %s is also an input of %s (%s): choose another name\n", out, opt, cmd, in[k]);
            return 2;
        }
    return output_regular(cmd, opt, out);
}

int cli_check_outputs_differ(const char *cmd, const char *opt_a, const char *a, const char *opt_b, const char *b)
{
    if (!a || !b) return 0;
    char da[4096], db[4096];
    const char *na = cli_path_dir(a, da, sizeof da), *nb = cli_path_dir(b, db, sizeof db);
    /* files that do not exist yet are the same when their names are, in
     * the same directory however spelt */
    if (!cli_same_file(a, b) && (strcmp(na, nb) || !cli_same_file(da, db))) return 0;
    fprintf(stderr, "error: %s: %s is also the %s of %s (%s): choose another name\n", b, opt_b, opt_a, cmd, a);
    return 2;
}

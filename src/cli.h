/* Command-line handling shared by the commands: --config FILE and
 * key=value overrides into a Config. */
#ifndef CLI_H
#define CLI_H

#include <stddef.h>

#include "config.h"

/* 1 if a word after the command is --help or -h */
int cli_wants_help(int argc, char **argv);
/* 1 if word is a setting KEY=VALUE (not an option --NAME) */
int cli_is_setting(const char *word);
/* Apply the setting word KEY=VALUE to c.  With arch_from (a checkpoint's
 * path) an architecture key is refused, as it comes from that checkpoint:
 * one line "error: CMD: key 'K' is an architecture key; it comes from
 * CKPT".  0, or 2 after a one-line error. */
int cli_set(Config *c, const char *cmd, const char *word, const char *arch_from);
/* The value of the option argv[*i] ("--NAME VALUE") into *slot, which is
 * NULL until then (defaults are applied after parsing), *i advanced past
 * it: every command's one parse of an option's value.  Refused in one
 * line: no value; a value that is itself an option (`--output --recompute`
 * wrote a file named "--recompute"); the option given twice (`--output a
 * --output b` wrote b only).  0, or 2 after "error: CMD: ..." */
int cli_option(const char *cmd, int argc, char **argv, int *i, const char **slot);
/* The integer value v of option opt in [lo, hi] into *x: 0, or 2 after one
 * line "error: CMD: OPT 'V' must be an integer from LO to HI" */
int cli_int(const char *cmd, const char *opt, const char *v, long long lo, long long hi, long long *x);
/* options shared by commands: --config FILE and key=value overrides over
 * config_defaults, the other words of argv[first..] offered to extra
 * first (1 consumed, 0 not its own, 2 an error printed); then
 * config_validate.  0, or 2 after one line */
int parse_config_args(Config *c, int argc, char **argv, int first, const char *cmd,
                      int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx);
/* the same without config_validate; *origin is the config file's name or
 * "command line", for the caller's config_validate */
int parse_config_words(Config *c, int argc, char **argv, int first, const char *cmd,
                       int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx, const char **origin);

/* An output about to be written is none of the command's inputs (the same
 * existing file by device and inode, whatever its path): `translate --input
 * in.txt --output in.txt` or `prepare --out train.en` would overwrite the
 * user's data; nor is it a directory or in a directory that does not exist,
 * which the command would find only when it renames its finished output
 * into place; nor, where it exists, anything but a regular file: the
 * rename would replace a device (/dev/null), a FIFO or a socket with a
 * regular file, and a symbolic link with a file (links are refused, not
 * followed: cli.c says why).  in[] holds n_in paths (NULL entries
 * skipped); opt names the output option.  0, or 2 after one line "error:
 * OUT: OPT is also an input of CMD (IN): choose another name" (or "... is
 * a directory", "... no such directory DIR", "... is not a regular file
 * (a FIFO)", "... is a symbolic link (to TARGET)"). */
int cli_check_output(const char *cmd, const char *opt, const char *out, const char *const *in, int n_in);
/* path's directory (".", "/" or what comes before its last slash) into dir
 * (n bytes); returns its last component */
const char *cli_path_dir(const char *path, char *dir, size_t n);
/* a and b exist and are the same file (device and inode) */
int cli_same_file(const char *a, const char *b);
/* path lies in the directory dir (dir non-empty and path's directory the
 * same directory, by whatever path) */
int cli_in_dir(const char *path, const char *dir);
/* Two outputs of one command are two files, existing or not (`translate
 * --output o.txt --reference o.txt` wrote the references over the
 * translations, and their BLEU was 100).  NULL paths pass.  0, or 2 after
 * one line "error: B: OPT_B is also the OPT_A of CMD (A): choose another
 * name". */
int cli_check_outputs_differ(const char *cmd, const char *opt_a, const char *a, const char *opt_b, const char *b);

#endif

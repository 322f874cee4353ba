"""Shared helpers of the analysis scripts: one-line errors, HDF5 access,
figure style and atomic output (temporary name, fsync, rename)."""

import argparse
import contextlib
import os
import stat
import sys
import tempfile

import numpy as np

# HDF5 locks every file it opens; on a file system without locks (NFS
# without lockd, some Lustre mounts: a login node reading a sweep's result
# files) that open fails and h5py reports a valid file as unreadable.  Set
# before h5py is first imported (every script imports this module first),
# as src/h5io.c does for bin/transformer; a user's own setting stands.
os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed: batch jobs, CI).
    Imported on first use: the scripts that draw nothing start faster."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class AnalysisError(Exception):
    """A user-facing problem: printed as one line 'error: THING: PROBLEM', exit 2."""

    def __init__(self, thing, problem):
        super().__init__(f"{thing}: {problem}")
        self.thing = thing
        self.problem = problem


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the project's one-line error: a bad option is
    "error: PROG: argument --tol: 'nan': not a finite number (see 'PROG
    --help')", exit 2, not a usage block above argparse's own line.
    Sub-commands' parsers are of this class too (add_subparsers)."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)


def main_wrapper(main):
    """Run main(argv); turn AnalysisError (and unreadable files) into the one-line error."""
    try:
        rc = main(sys.argv[1:])
    except AnalysisError as e:
        print(f"error: {e.thing}: {e.problem}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(1)
    sys.exit(rc or 0)


def open_h5(path):
    """Open an HDF5 file read-only, or raise a one-line AnalysisError."""
    import h5py

    if not os.path.exists(path):
        raise AnalysisError(path, "no such file")
    if os.path.isdir(path):
        raise AnalysisError(path, "is a directory, expected an HDF5 file")
    try:
        return h5py.File(path, "r")
    except OSError:
        raise AnalysisError(path, "not an HDF5 file (or truncated)") from None


def h5_array(f, path, name, shape=None, integer=False):
    """Dataset name of the open HDF5 file or group f (of the file path) as
    an array, checked: a deleted dataset, one of another shape (None in
    shape: any length), or text where numbers belong is the one-line error
    naming the file and dataset, not a KeyError, ValueError or TypeError
    further on.  Floats unless integer (then an integer dtype is needed)."""
    full = f"{f.name.rstrip('/')}/{name}".lstrip("/")
    d = f.get(name)
    if d is None or not hasattr(d, "shape"):
        raise AnalysisError(path, f"missing dataset {full}")
    if integer and not np.issubdtype(d.dtype, np.integer) or not np.issubdtype(d.dtype, np.number):
        raise AnalysisError(path, f"{full} has type {d.dtype}, expected {'integers' if integer else 'numbers'}")
    a = np.asarray(d[()]) if integer else np.asarray(d[()], float)
    if shape is not None and (a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape))):
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise AnalysisError(path, f"{full} has shape {a.shape}, expected {want}")
    return a


def check_dataset(f, path):
    """Refuse in one line an open HDF5 file that is not one of our datasets (docs/dataset.md)."""
    if attr_str(f, "format") != "transformer-dataset":
        raise AnalysisError(path, "not a transformer dataset (no format=\"transformer-dataset\" attribute)")


def dataset_pieces(f, path):
    """The SentencePiece pieces (vocab/pieces) of an open dataset file, in id
    order, refused in one line where the file is no dataset or lacks them."""
    check_dataset(f, path)
    if not hasattr(f.get("vocab/pieces"), "shape"):
        raise AnalysisError(path, "missing dataset vocab/pieces")
    return as_strings(f["vocab/pieces"][()])


def dataset_split(f, path, split):
    """The group splits/SPLIT of an open dataset file, refused in one line,
    with the splits it has, if there is no such split."""
    if f"splits/{split}" not in f:
        have = ", ".join(f["splits"]) if "splits" in f else "none"
        raise AnalysisError(path, f"no split '{split}' (splits: {have})")
    return f[f"splits/{split}"]


def split_ids(path, g, side, n_pieces):
    """(ids, offsets) of one side of a split, checked: a damaged dataset was
    a KeyError or IndexError in the middle of reading."""
    ids = h5_array(g, path, f"{side}_ids", (None,), integer=True)
    off = h5_array(g, path, f"{side}_offsets", (None,), integer=True)
    if len(off) < 1 or off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] > len(ids):
        raise AnalysisError(path, f"{g.name}/{side}_offsets: not increasing from 0 to at most {len(ids)}")
    if len(ids) and (ids.min() < 0 or ids.max() >= n_pieces):
        raise AnalysisError(path, f"{g.name}/{side}_ids: ids outside the vocabulary of {n_pieces} pieces")
    return ids, off


def output_not_input(cmd, opt, out, *inputs):
    """Refuse an output that is one of the command's inputs (the same existing
    file, whatever its path; bin/transformer's cli_output_not_input does the
    same): `attention.py summary maps.h5 --out maps.h5` replaced the maps with
    their summary.  None inputs are skipped; raises the one-line AnalysisError."""
    for path in inputs:
        if path and os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path):
            raise AnalysisError(out, f"{opt} is also an input of {cmd} ({path}): choose another name")


def int_at_least(low):
    """An argparse type: an integer >= low, else argparse's one-line usage
    error naming the option ("--top -1" made an empty table, "--levels 0" no
    pruning curve, both without a word)."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not an integer") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"{v}: must be at least {low}")
        return v
    return parse


def finite_float(low=None, above=None, high=None):
    """An argparse type: a finite float, >= low, > above, <= high where
    given, else argparse's one-line usage error naming the option ("--tol
    nan" accepted every setting, "--tflops 0" divided by zero)."""
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a number") from None
        if not np.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r}: not a finite number")
        if low is not None and v < low:
            raise argparse.ArgumentTypeError(f"{v:g}: must be at least {low:g}")
        if above is not None and v <= above:
            raise argparse.ArgumentTypeError(f"{v:g}: must be more than {above:g}")
        if high is not None and v > high:
            raise argparse.ArgumentTypeError(f"{v:g}: must be at most {high:g}")
        return v
    return parse


def attr_str(obj, name, default=None):
    """An attribute as a Python str (h5py returns bytes or str depending on how it was written)."""
    if name not in obj.attrs:
        return default
    v = obj.attrs[name]
    if isinstance(v, np.ndarray):
        if v.size != 1:
            return default
        v = v.reshape(-1)[0]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def attr_float(obj, name, default=float("nan")):
    if name not in obj.attrs:
        return default
    v = obj.attrs[name]
    try:
        return float(np.asarray(v).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return default


def as_strings(v):
    """A list of str from an HDF5 string dataset/attribute (bytes, str, or one joined string)."""
    a = np.asarray(v)
    if a.ndim == 0:
        s = a.item()
        s = s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
        return s.split()
    return [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in a.reshape(-1)]


def umask():
    """The process's umask (os.umask can only be read by setting it)."""
    m = os.umask(0o022)
    os.umask(m)
    return m


def make_public(fd):
    """Give a file made by tempfile.mkstemp (always 0600) the mode a plain
    open() would have given it: 0666 minus the umask, i.e. 0644 usually."""
    os.fchmod(fd, 0o666 & ~umask())


def why_cannot_write(path, e):
    """Why path cannot be created, in words: an ancestor that is a regular
    file ("w/file/out.md": makedirs says only "File exists"), else the OS's."""
    d = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(d) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    if os.path.lexists(d) and not os.path.isdir(d):
        return f"{d} is not a directory"
    return e.strerror or str(e)


def temp_beside(path, suffix=""):
    """(fd, name) of a new temporary file in path's directory, made if
    missing.  An OSError (a parent that is a regular file, no permission)
    becomes the one-line error naming path, not a traceback."""
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, exist_ok=True)
        return tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=suffix, dir=d)
    except OSError as e:
        raise AnalysisError(path, f"cannot create: {why_cannot_write(path, e)}") from None


def temp_dir_beside(path):
    """A new temporary directory in path's parent, made if missing: a
    directory output (the exports) is built there and renamed into place.
    An OSError becomes the one-line error naming path."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
        return tempfile.mkdtemp(prefix="." + os.path.basename(os.path.abspath(path)) + ".", dir=parent)
    except OSError as e:
        raise AnalysisError(path, f"cannot create: {why_cannot_write(path, e)}") from None


def _discard(tmp, path, e):
    """Remove the temporary file of a failed write; an OSError (a full disk,
    an output that is a directory) becomes the one-line error naming path."""
    if os.path.exists(tmp):
        os.unlink(tmp)
    if isinstance(e, OSError):
        raise AnalysisError(path, f"cannot write: {e.strerror or e}") from None


_NOT_REGULAR = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def check_output(path):
    """Check an output name before it is written; returns path unchanged.
    An existing output that is not a regular file is refused in one line,
    as bin/transformer refuses one (src/cli.c cli_check_output): a device
    node, a FIFO or a socket (the rename over it left a regular file in its
    place: heads.py --out over a device node), and a symbolic link, which
    the rename would replace by a file while its target stayed as it was;
    following it would put the temporary file on the target's file system,
    and a dangling or swapped link would still be replaced.  A directory is
    left to the write's own error."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return path   # not there (written), or not reachable (the write names why)
    if stat.S_ISLNK(mode):
        raise AnalysisError(path, f"exists and is a symbolic link (to {os.readlink(path)}), not a regular "
                                  "file: give the file it names, or another name")
    for test, kind in _NOT_REGULAR:
        if test(mode):
            raise AnalysisError(path, f"exists and is {kind}, not a regular file: choose another output name")
    return path


def check_output_dir(path):
    """Check a directory output (the exports) before it is built: new, or an
    empty directory that the finished one replaces.  A symbolic link is
    refused as check_output refuses one: the rename over it failed with
    "Not a directory" once everything was written."""
    if os.path.islink(os.path.normpath(path)):
        raise AnalysisError(path, f"exists and is a symbolic link (to {os.readlink(os.path.normpath(path))}), "
                                  "not a directory: give the directory it names, or another name")
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise AnalysisError(path, "exists and is not an empty directory")
    return path


def check_outputs(paths):
    """check_output on every file of a script's output set, before its first
    write: a bad name among them (the last, say) is refused with none of the
    others replaced yet, where each write's own check (write_atomic,
    h5_atomic, savefig) would find it after the earlier ones.  A figure
    counts as its figure_paths.  Returns the paths as a list."""
    return [check_output(p) for p in paths]


FIGURE_FORMATS = ("png", "pdf")


def figure_paths(prefix):
    """The files savefig(fig, prefix) writes: PREFIX.png and PREFIX.pdf."""
    return [f"{prefix}.{ext}" for ext in FIGURE_FORMATS]


def _write_through_temp(path, write, binary, suffix=""):
    """Call write(f) on a temporary file beside path (check_output: never
    a link, device or FIFO), fsync it and rename it over
    path: a crash never leaves a half-written output."""
    target = check_output(path)
    fd, tmp = temp_beside(target, suffix)
    try:
        make_public(fd)
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        _discard(tmp, path, e)
        raise


def write_atomic(path, data):
    """Write text or bytes to path through a temporary name, fsync and rename:
    a crash never leaves a half-written output."""
    _write_through_temp(path, lambda f: f.write(data), isinstance(data, bytes))


def _fsync_replace(tmp, path):
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@contextlib.contextmanager
def h5_atomic(path, copy_from=None):
    """An HDF5 file for writing under a temporary name next to path (a copy of
    copy_from opened r+, or a new file), fsync'ed and renamed over path when
    the block ends without error: readers never see it half-written.  Path
    as check_output: never a symbolic link, device or FIFO."""
    import shutil

    import h5py

    target = check_output(path)
    fd, tmp = temp_beside(target, ".tmp")
    try:
        try:
            make_public(fd)
        finally:
            os.close(fd)
        if copy_from:
            shutil.copyfile(copy_from, tmp)
        f = h5py.File(tmp, "r+" if copy_from else "w")
    except BaseException as e:
        _discard(tmp, path, e)
        raise
    try:
        # an OSError of the caller's block is its own (an input), not path's
        with f:
            yield f
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        _fsync_replace(tmp, target)
    except BaseException as e:
        _discard(tmp, path, e)
        raise


def savefig(fig, prefix):
    """Save fig as PREFIX.png (200 dpi) and PREFIX.pdf (vector), atomically,
    both names checked before either is written. Returns the paths."""
    out = check_outputs(figure_paths(prefix))
    for ext, path in zip(FIGURE_FORMATS, out):
        # no creation date: the same results give the same file (committed figures)
        meta = {"CreationDate": None} if ext == "pdf" else {}
        _write_through_temp(path, lambda f: fig.savefig(f, format=ext, dpi=200, bbox_inches="tight", metadata=meta),
                            True, "." + ext)
    pyplot().close(fig)
    return out


def paper_style():
    """Figure style for papers: small fonts, no top/right spines, light grid."""
    plt = pyplot()
    plt.rcParams.update({
        "font.size": 9,
        "axes.titlesize": 9,
        "axes.labelsize": 9,
        "xtick.labelsize": 8,
        "ytick.labelsize": 8,
        "legend.fontsize": 8,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "grid.linewidth": 0.5,
        "lines.linewidth": 1.4,
        "savefig.pad_inches": 0.03,
        "pdf.fonttype": 42,  # TrueType in PDF: editable text, accepted by publishers
        "ps.fonttype": 42,
    })


def fmt_num(x, digits=2):
    """Format a float for a table; NaN / None as an en dash."""
    if x is None:
        return "–"
    try:
        xf = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not np.isfinite(xf):
        return "–"
    return f"{xf:.{digits}f}"

"""Atomic file writes: a reader (or a killed writer) never sees half a file; the checks of a path
made before any work (a folder one can write in, a file name, what a non-file is); output
folders a command makes, gone again when the command fails; and the room left on a disk, told in
one line. Folders of several files written whole are `paddle_vit.staged_writes`."""
import contextlib
import errno
import os
import re
import stat
import tempfile

try:
    import fcntl
except ImportError:  # not POSIX: no lock, and no temporary file is taken for abandoned
    fcntl = None

from .errors import ConfigError


def atomic_write(path, write):
    """Call `write(temporary_path)`, flush it to disk, then rename it over `path`.

    The temporary file (``.NAME.XXXXXXXX.tmp``) lives in the same folder, so the rename is
    atomic: after a crash at any moment `path` holds either the old complete file or the new
    complete file. On failure the temporary file is removed and the error propagates; `path` is
    untouched. The temporary file is locked (flock) while it is written, so that the next write of
    `path` tells one a killed writer left (a checkpoint's worth of disk) from one another process
    is writing, and removes the first kind (`remove_abandoned_temporaries`).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        if fcntl is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # until this write ends, with this process or not
        remove_abandoned_temporaries(path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes it private; a weights file is not
        write(temporary)
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    finally:
        os.close(descriptor)
    fsync_folder(folder)  # make the rename itself durable


def remove_abandoned_temporaries(path):
    """Remove the temporary files of `atomic_write(path)` that killed writers left beside `path`:
    named like one, a plain file, and not locked by a living writer. Best effort, silent."""
    if fcntl is None:
        return
    folder, name = os.path.split(os.path.abspath(path))
    pattern = re.compile(r"\." + re.escape(name) + r"\.[A-Za-z0-9_]{8}\.tmp")
    try:
        candidates = [entry for entry in os.listdir(folder) if pattern.fullmatch(entry)]
    except OSError:
        return
    for entry in candidates:
        candidate = os.path.join(folder, entry)
        try:
            descriptor = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # renamed into place meanwhile, or a link
            continue
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                continue
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while its writer lives
            os.remove(candidate)
        except OSError:
            continue
        finally:
            os.close(descriptor)


def kind_of_special_file(path):
    """'a FIFO', 'a device', ... for the thing at `path` that is not a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a dangling or looping symbolic link" if os.path.islink(path) else "unreadable"
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a file"


def nonempty_path(path, what):
    """`path` as a string; an empty one is a ConfigError naming `what`: the path functions take ""
    for the current folder, which no option means."""
    path = os.fspath(path)
    if not path.strip():
        raise ConfigError(f"{what} is an empty path; expected a file or folder name")
    return path


def writable_folder(path, what):
    """`path` as a folder this process can write in, created when missing; checked before any
    work is done, so that a mistake costs no computation. `what` names the option in the error
    (a ConfigError: a file where the folder is meant, a folder that cannot be created or written)."""

    path = os.path.expanduser(nonempty_path(path, what))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{what} {path} is {'a file' if os.path.isfile(path) else kind_of_special_file(path)}; "
                          f"expected a folder")
    try:
        os.makedirs(path, exist_ok=True)
        _probe_write(path)
    except OSError as error:
        raise ConfigError(f"{what} {path} is not a folder this process can write in: "
                          f"{error.strerror or error}") from None
    return path


def _probe_write(folder):
    """Create a file in `folder` and remove it (OSError when this process cannot): unnamed
    (O_TMPFILE) where the file system can make one, so that a kill here leaves nothing; else a
    hidden ``.write-test.XXXXXXXX``, which the next check removes if a kill left it."""
    try:
        os.close(os.open(folder, getattr(os, "O_TMPFILE", 0) | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        if hasattr(os, "O_TMPFILE"):
            return
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
    atomic_write(os.path.join(folder, ".write-test"), lambda temporary: None)
    os.remove(os.path.join(folder, ".write-test"))


def writable_file(path, what, extensions):
    """`path` as a file that can be written, its folder created when missing, its extension one
    of `extensions` (".png", ...): checked before any work is done. ConfigError otherwise."""

    path = os.path.expanduser(nonempty_path(path, what))
    extension = os.path.splitext(path)[1].lower()
    if extension not in extensions:
        raise ConfigError(f"{what} {path} must end in {' or '.join(extensions)}, not {extension or 'no extension'}")
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would be replaced, a folder cannot be
        kind = "a folder" if os.path.isdir(path) else kind_of_special_file(path)
        raise ConfigError(f"{what} {path} is {kind}; expected a file name ending in {' or '.join(extensions)}")
    writable_folder(os.path.dirname(os.path.abspath(path)), f"the folder of {what}")
    return path


def _missing_folders(path):
    """The folders of `path` that do not exist yet, deepest first ([] when `path` exists)."""
    missing, folder = [], os.path.abspath(path)
    while not os.path.lexists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


@contextlib.contextmanager
def provisional_folders(path):
    """Run the block with `path`'s folders made as it needs them; when it raises (a refusal, an
    error, Ctrl-C), remove again the folders of `path` that were missing before it began and are
    still empty, so that a failed command leaves no new folder behind. Nothing written is
    removed: a folder holding a file stays."""
    missing = _missing_folders(path)
    try:
        yield
    except BaseException:
        for folder in missing:
            try:
                os.rmdir(folder)
            except FileNotFoundError:  # never made (the block failed before): its parents may be
                continue
            except OSError:  # something was written there: it stays, and so do the folders above
                break
        raise


@contextlib.contextmanager
def output_folder(path, what):
    """`writable_folder(path, what)` for the block, which writes into the folder: a folder it
    made is removed again when the block fails before anything was written there."""
    path = os.path.expanduser(os.fspath(path))
    with provisional_folders(path):
        yield writable_folder(path, what)


@contextlib.contextmanager
def output_file(path, what, extensions):
    """`writable_file(path, what, extensions)` for the block, which writes the file: the folders
    made for it are removed again when the block fails before the file was written."""
    path = os.path.expanduser(os.fspath(path))
    with provisional_folders(os.path.dirname(os.path.abspath(path))):
        yield writable_file(path, what, extensions)


# ---- room on the disk ---------------------------------------------------------------------------

LOW_SPACE_BYTES = 64 * 1024


def file_system_full(path):
    """Whether the file system holding `path` has (almost) no room left for this process: less
    than 64 KiB (root may also use the blocks reserved for it). Some writers (paddle.jit.save,
    the C++ writers of onnx and ONNX Runtime) leave a truncated file without an error when the
    disk fills up; this is how such a write is recognised afterwards."""
    return short_of_space(path, LOW_SPACE_BYTES)


MIB = 1 << 20


def free_bytes(path):
    """The bytes this process may still write on the file system of `path` (its nearest existing
    folder; root may also use the blocks reserved for it), or None where it cannot be read."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return (stats.f_bfree if os.geteuid() == 0 else stats.f_bavail) * stats.f_frsize


def mount_point(path):
    """The folder the file system of `path` is mounted at."""
    path = os.path.abspath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def no_space(path, needed):
    """'No space left on device: /mnt/disk has 1.2 MiB free, about 4.5 MiB needed' for a write of
    about `needed` bytes on the file system of `path` (mounted at /mnt/disk)."""
    free = free_bytes(path) or 0
    about = f", about {needed / MIB:.1f} MiB needed" if needed else ""
    return f"{os.strerror(errno.ENOSPC)}: {mount_point(path)} has {free / MIB:.1f} MiB free{about}"


def short_of_space(path, needed):
    """Whether the file system of `path` has less room than `needed` bytes (False when unknown)."""
    free = free_bytes(path)
    return free is not None and free < needed


def fsync_folder(path):
    """Flush a folder's entries to disk (as `atomic_write` does), where the file system can."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)

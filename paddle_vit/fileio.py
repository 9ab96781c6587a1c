"""Atomic file writes: a reader (or a killed writer) never sees half a file; and the checks of a
path made before any work (a folder one can write in, a file name, what a non-file is)."""
import os
import stat
import tempfile

from .errors import ConfigError


def atomic_write(path, write):
    """Call `write(temporary_path)`, flush it to disk, then rename it over `path`.

    The temporary file lives in the same folder, so the rename is atomic: after a crash at any
    moment `path` holds either the old complete file or the new complete file. On failure the
    temporary file is removed and the error propagates; `path` is untouched.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    os.close(descriptor)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes it private; a weights file is not
    try:
        write(temporary)
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    try:  # make the rename itself durable
        directory = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError:
        pass


def writable_folder(path, what):
    """`path` as a folder this process can write in, created when missing; checked before any
    work is done, so that a mistake costs no computation. `what` names the option in the error
    (a ConfigError: a file where the folder is meant, a folder that cannot be created or written)."""

    path = os.path.expanduser(os.fspath(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{what} {path} is a file; expected a folder")
    try:
        os.makedirs(path, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(prefix=".write-test.", dir=path)
        os.close(descriptor)
        os.remove(probe)
    except OSError as error:
        raise ConfigError(f"{what} {path} is not a folder this process can write in: "
                          f"{error.strerror or error}") from None
    return path


def writable_file(path, what, extensions):
    """`path` as a file that can be written, its folder created when missing, its extension one
    of `extensions` (".png", ...): checked before any work is done. ConfigError otherwise."""

    path = os.path.expanduser(os.fspath(path))
    extension = os.path.splitext(path)[1].lower()
    if extension not in extensions:
        raise ConfigError(f"{what} {path} must end in {' or '.join(extensions)}, not {extension or 'no extension'}")
    if os.path.isdir(path):
        raise ConfigError(f"{what} {path} is a folder; expected a file name ending in {' or '.join(extensions)}")
    writable_folder(os.path.dirname(os.path.abspath(path)), f"the folder of {what}")
    return path


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

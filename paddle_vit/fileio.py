"""Atomic file writes: a reader (or a killed writer) never sees half a file."""
import os
import tempfile


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

"""Outputs of several files (an export, a published model) written whole into any folder, a mount
point included, and swapped in for the previous one in one step where the file system allows
(`staged_folder`); what a killed run left beside or inside the folder, recognised and removed by
the next one."""
import contextlib
import ctypes
import errno
import os
import platform
import re
import shutil
import stat
import tempfile

try:
    import fcntl
except ImportError:  # not POSIX: no lock, a nest is told by its mark alone
    fcntl = None

from .fileio import file_system_full, fsync_folder, no_space, provisional_folders, short_of_space

NOT_CONTENT = ("lost+found",)  # what mkfs puts at the top of a disk: a mounted volume holds it


def staging_prefix(kind):
    """The name every staging folder of `kind` ("export", "publish") starts with: hidden."""
    return f".{kind}-"


def leftover_staging(folder, kind):
    """The staging folders of `kind` in `folder` (names): left by a run killed before its end."""
    prefix = staging_prefix(kind)
    return sorted(name for name in os.listdir(folder)
                  if name.startswith(prefix) and os.path.isdir(os.path.join(folder, name)))


def output_entries(folder, kind):
    """What `folder` holds besides leftover staging folders of `kind` and a disk's lost+found:
    the names that make it empty or not."""
    leftovers = set(leftover_staging(folder, kind))
    return sorted(name for name in os.listdir(folder)
                  if name not in leftovers and not (name in NOT_CONTENT and os.path.isdir(os.path.join(folder, name))))


def interrupted_output(folder, kind, files):
    """Whether `folder` is what a commit of `staged_folder` killed half-way leaves: a staging
    folder of `kind`, and besides it only names among `files` (the files that kind of output
    writes). Such a folder is a previous output: the next run replaces it."""
    return bool(leftover_staging(folder, kind)) and set(output_entries(folder, kind)) <= set(files)


def describe_os_error(error, staging):
    """`error.strerror`, and the file being written when it is one in `staging`: 'No space left
    on device (writing model.onnx)'."""
    text = error.strerror or str(error)
    name = _staged_name(str(error.filename), staging) if error.filename else None
    return f"{text} (writing {name})" if name else text


def _staged_name(text, staging):
    """The output file a path in `staging` found in `text` stands for (an `atomic_write`
    temporary `.NAME.XXXX.tmp` is NAME), or None."""
    match = re.search(re.escape(staging + os.sep) + r"([^\s:'\"()]+)", text)
    if match is None:
        return None
    name = match.group(1)
    temporary = re.fullmatch(r"\.(.+)\.[^.]+\.tmp", os.path.basename(name))
    return os.path.join(os.path.dirname(name), temporary.group(1)) if temporary else name


@contextlib.contextmanager
def staged_folder(out_dir, kind, marker, *, error_type, description, needed_bytes=0, largest_file_bytes=0):
    """Write an output of several files into the folder `out_dir`, whole or not at all.

    `out_dir` must already have been checked by the caller: absent, empty, or a previous output
    of this kind (`output_entries`, `interrupted_output`). The block gets a staging folder and
    writes there; then the commit puts the new output in the place of the old:

    - **Swapped**, wherever `swap_possible` (`out_dir` absent or a plain folder, not a mount
      point or a link, its parent writable): the block writes into ``NEST/NAME``, where the nest
      ``PARENT/.NAME.KIND-XXXX`` is a hidden sibling of `out_dir` (so on its file system) that
      carries our mark (`StagingNest`). The commit exchanges ``NEST/NAME`` and `out_dir` in one
      system call (``renameat2(RENAME_EXCHANGE)``; a new `out_dir` is a plain rename), then
      removes the nest, the previous output in it. Invariant: at every instant `out_dir` is the
      previous output whole or the new one whole (a predictor on it works throughout), and
      beside it at most one marked nest, which the next run of either kind on `out_dir` removes
      (`remove_leftover_siblings`).
    - **Moved in**, the fallback: where `swap_possible` says no (a mount point, a link, a parent
      one cannot write in) the staging folder is ``out_dir/.KIND-XXXX`` from the start; where
      the exchange itself is refused (a file system without RENAME_EXCHANGE: EINVAL, ENOSYS; a
      bind mount not seen as one: EBUSY, EXDEV) the complete staging folder is moved (or
      copied) there first. The commit then removes the old `marker` (the file that says an
      output is complete: ``preprocess.json``, ``config.json``), then what the new output does
      not have, then moves the new files in one by one, `marker` last. Invariant: `out_dir` is
      the previous output whole (the staging folder inside it aside) until the marker goes;
      during the few renames after, it has no marker and holds the staging folder: not taken for
      an output (predict refuses it), and `interrupted_output` recognises it, so the next run
      replaces it; after the last, the new output whole.

    A failure, or Ctrl-C, before the commit removes the staging folder (its nest) and leaves
    `out_dir` as it was (a folder it made is removed again).

    Space: `needed_bytes` is what the output takes at its largest (with the writers' own
    temporary files); a file system with less room is refused before anything is written. A
    failure of the block when less room is left than `largest_file_bytes` (one file of the
    output could not have been written whole), or than 64 KiB, or that says ENOSPC (a child's
    "[Errno 28]" included), is taken for a full disk: the
    libraries that write for us (paddle.jit.save, paddle2onnx, onnx's and ONNX Runtime's C++
    writers) leave a truncated file without an error, and what fails next says "invalid
    protobuf", "parse error" or "nodes must be topologically sorted".

    Errors, one line each: an OSError is `error_type` "cannot write DESCRIPTION to OUT_DIR:
    <strerror> (writing FILE)"; a full disk is "... No space left on device: MOUNT has N MiB
    free, about M MiB needed"; an `error_type` raised in the block names `out_dir` where it said the
    staging folder."""
    if not os.fspath(out_dir).strip():  # abspath would make it the current folder, then replaced whole
        raise error_type(f"cannot write {description} to an empty path; expected a folder name")
    out_dir = os.path.abspath(os.path.expanduser(os.fspath(out_dir)))

    def failure(reason):
        return error_type(f"cannot write {description} to {out_dir}: {reason}")

    if needed_bytes and short_of_space(out_dir, needed_bytes):
        raise failure(no_space(out_dir, needed_bytes))
    with provisional_folders(out_dir):
        remove_leftover_siblings(out_dir, kind)
        try:
            staging, nest = _make_staging(out_dir, kind)
        except OSError as error:
            raise failure(error.strerror or error) from None
        try:
            try:
                yield staging
                _flush_staged(staging)
            except BaseException as error:
                full = _full_disk(error, staging, largest_file_bytes)  # before the removal frees space
                _discard(staging, nest)
                raise _named_failure(error, staging, out_dir, full and no_space(out_dir, needed_bytes), error_type,
                                     failure) from None
            if nest is not None:
                if _swap_in(staging, nest, out_dir, failure):
                    return
                staging = _move_inside(staging, nest, out_dir, kind, failure)
            try:
                os.makedirs(out_dir, exist_ok=True)
                _commit(staging, out_dir, marker)
            except OSError as error:
                raise failure(f"{describe_os_error(error, staging)}, while moving the new files in; the folder is "
                              f"incomplete: run the command again to replace it") from None
        finally:
            if nest is not None:
                nest.release()


def sibling_prefix(out_dir, kind):
    """The name every staging nest of `out_dir` starts with: hidden, named after it."""
    return f".{os.path.basename(out_dir)}.{kind}-"


STAGING_MARK = ".paddle-vit-staging"  # the file in a nest that says it is ours


class StagingNest:
    """``PARENT/.NAME.KIND-XXXX``, beside `out_dir`: it holds the new output (`output`, named
    NAME) until the exchange, and the previous output after it, until it is removed.

    It carries a file, `STAGING_MARK`, locked (flock) while the process that made it lives. The
    mark is why the next run may remove a nest a kill left (`remove_leftover_siblings`) and
    nothing else: a folder of the user's with a similar name has no mark, and a nest whose mark
    is locked is another run's, still at work. The mark is made before anything is written into
    the nest and removed after everything else, so a nest is at every instant empty or marked;
    and it stays outside the output, which is swapped in without it."""

    def __init__(self, out_dir, kind):
        self.path = tempfile.mkdtemp(prefix=sibling_prefix(out_dir, kind), dir=os.path.dirname(out_dir))
        self._lock = None
        try:
            self._lock = _make_mark(self.path, out_dir)
            self.output = os.path.join(self.path, os.path.basename(out_dir))
            os.mkdir(self.output)  # its mode from the umask, as any folder os.makedirs makes
        except BaseException:
            self.remove()
            raise

    def remove(self):
        """Remove the nest and what it holds (best effort: what stays, marked, is a leftover)."""
        remove_nest(self.path)
        self.release()

    def release(self):
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _make_mark(nest, out_dir):
    """Write the mark of `nest` and lock it; returns the descriptor that holds the lock (not
    inherited by child processes: a child outliving a killed run must not keep it)."""
    descriptor = os.open(os.path.join(nest, STAGING_MARK), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.write(descriptor, f"paddle_vit staging folder of {os.path.basename(out_dir)}: the next export or "
                             f"published folder written there removes it\n".encode())
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def abandoned_nest(path):
    """Whether the folder `path` (named like a nest) is a nest a killed run left: empty (killed
    before its mark was made), or carrying our mark with no living process holding its lock. A
    link, a folder without the mark, a nest still at work are not."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    entries = os.listdir(path)
    if not entries:
        return True
    if STAGING_MARK not in entries:
        return False
    try:
        descriptor = os.open(os.path.join(path, STAGING_MARK), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if fcntl is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:  # another run's lock
        return False
    finally:
        os.close(descriptor)


def remove_nest(path):
    """Remove the nest `path`: what it holds first, its mark last, so that a kill meanwhile leaves
    it marked (a leftover the next run recognises). Best effort: what cannot be removed stays."""
    try:
        for name in os.listdir(path):
            if name != STAGING_MARK:
                _remove(os.path.join(path, name))
        if os.path.lexists(os.path.join(path, STAGING_MARK)):
            os.remove(os.path.join(path, STAGING_MARK))
        os.rmdir(path)
    except OSError:
        pass


def remove_leftover_siblings(out_dir, kind):
    """Remove the nests of `out_dir` a killed run left beside it (`abandoned_nest`): a new output
    not swapped in yet, or a previous output not removed yet. Nothing else is touched."""
    parent, prefix = os.path.dirname(out_dir), sibling_prefix(out_dir, kind)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        path = os.path.join(parent, name)
        try:
            if name.startswith(prefix) and abandoned_nest(path):
                remove_nest(path)
        except OSError:
            continue


def swap_possible(out_dir):
    """Whether `out_dir` can be replaced by swapping a sibling folder in (`staged_folder`): absent
    or a plain folder (not a link, not a mount point, no disk's lost+found in it) whose parent
    this process can write in."""
    if os.path.islink(out_dir) or (os.path.lexists(out_dir) and not os.path.isdir(out_dir)):
        return False
    if os.path.isdir(out_dir) and (os.path.ismount(out_dir)
                                   or any(name in NOT_CONTENT for name in os.listdir(out_dir))):
        return False
    parent = os.path.dirname(out_dir)
    while not os.path.lexists(parent):  # made by provisional_folders: writable if its first existing parent is
        parent = os.path.dirname(parent)
    return os.access(parent, os.W_OK | os.X_OK)


def _make_staging(out_dir, kind):
    """(the folder the block writes into, its `StagingNest`): in a nest beside `out_dir` where a
    swap is possible, else ``out_dir/.KIND-XXXX`` (nest None)."""
    if swap_possible(out_dir):
        os.makedirs(os.path.dirname(out_dir), exist_ok=True)
        try:
            nest = StagingNest(out_dir, kind)
            return nest.output, nest
        except OSError:  # the parent refuses after all (a read-only mount above): inside, as below
            pass
    os.makedirs(out_dir, exist_ok=True)
    return tempfile.mkdtemp(prefix=staging_prefix(kind), dir=out_dir), None


def _discard(staging, nest):
    """Remove what the block wrote (its nest, or the staging folder inside `out_dir`)."""
    if nest is not None:
        nest.remove()
    else:
        shutil.rmtree(staging, ignore_errors=True)


def _swap_in(staging, nest, out_dir, failure):
    """Put the complete folder `staging` (the output of `nest`) in the place of `out_dir` in one
    step: a rename for a new `out_dir`, else an exchange; then the nest, with the previous output
    in it, is removed. False when the file system cannot exchange the two (nothing changed: the
    caller moves the files in instead). Any other failure is `failure`, the previous output
    unchanged and the nest removed."""
    parent = os.path.dirname(out_dir)
    try:
        fsync_folder(staging)
        if not os.path.lexists(out_dir):
            os.rename(staging, out_dir)
        else:
            os.chmod(staging, stat.S_IMODE(os.stat(out_dir).st_mode))
            if not exchange(staging, out_dir):
                return False
    except OSError as error:
        nest.remove()
        raise failure(f"{describe_os_error(error, staging)}, while putting the new folder in place; the "
                      f"previous one is unchanged") from None
    fsync_folder(parent)
    fsync_folder(nest.path)
    nest.remove()  # the previous output, now in the nest; a kill meanwhile leaves it marked
    return True


def _move_inside(staging, nest, out_dir, kind, failure):
    """Where the exchange was refused: the complete folder `staging` moved into `out_dir` as its
    hidden ``out_dir/.KIND-XXXX`` for the commit that moves files in (renamed; copied where
    `out_dir` turns out to be another mount, EXDEV), and `nest` removed. Returns the new path.
    Until the commit begins `out_dir` is the previous output whole, the staging folder in it aside."""
    inside = None
    try:
        inside = tempfile.mkdtemp(prefix=staging_prefix(kind), dir=out_dir)
        try:
            os.rename(staging, inside)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            shutil.copytree(staging, inside, dirs_exist_ok=True)
            _flush_staged(inside)
        fsync_folder(out_dir)
    except OSError as error:
        if inside is not None:
            shutil.rmtree(inside, ignore_errors=True)
        nest.remove()
        raise failure(f"{describe_os_error(error, staging)}, while moving the new folder into {out_dir}; the "
                      f"previous one is unchanged") from None
    nest.remove()
    return inside


RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100
NO_EXCHANGE = (errno.EINVAL, errno.ENOSYS, errno.EXDEV, errno.EBUSY, errno.EPERM, errno.ENOTSUP)
SYS_RENAMEAT2 = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276}  # asm/unistd.h


def exchange(first, second):
    """Swap the names of two paths on one file system atomically (``renameat2`` with
    RENAME_EXCHANGE, Linux 3.15 on); False where this system or file system cannot (then
    nothing changed)."""
    function = _renameat2()
    if function is None:
        return False
    if function(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), second)


def _renameat2(libc=None):
    """renameat2(olddirfd, oldpath, newdirfd, newpath, flags) -> 0, or -1 with the error in
    `ctypes.get_errno()`: the C library's (glibc 2.28 on), else the system call by its number
    (an older glibc, or a C library without it, on x86_64 and aarch64), else None."""
    try:
        libc = libc or ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        function.restype = ctypes.c_int
        return function
    number, syscall = SYS_RENAMEAT2.get(platform.machine().lower()), getattr(libc, "syscall", None)
    if number is None or syscall is None:
        return None
    syscall.restype = ctypes.c_long

    def renameat2(old_folder, old, new_folder, new, flags):
        return syscall(ctypes.c_long(number), ctypes.c_int(old_folder), ctypes.c_char_p(old),
                       ctypes.c_int(new_folder), ctypes.c_char_p(new), ctypes.c_uint(flags))
    return renameat2


def _full_disk(error, staging, largest_file_bytes):
    """Whether `error`, raised while writing into `staging`, comes from a full disk: it says so
    (ENOSPC, or a child's "[Errno 28] No space left on device" in its text), or less room is
    left than one file of the output or 64 KiB (a writer stopped short without saying so)."""
    text = str(error).lower()
    return (getattr(error, "errno", None) == errno.ENOSPC or "no space left" in text or "errno 28" in text
            or file_system_full(staging) or short_of_space(staging, largest_file_bytes))


def _named_failure(error, staging, out_dir, full, error_type, failure):
    """The error to raise for `error`, raised in the block of `staged_folder` (`full`: the
    no-space message when the file system was full then, else False): what failed named as the
    output, not the staging folder."""
    if isinstance(error, OSError):
        if full:
            name = _staged_name(str(error.filename), staging) if error.filename else None
            return failure(full + (f" (writing {name})" if name else ""))
        return failure(describe_os_error(error, staging))
    if not isinstance(error, Exception):  # Ctrl-C
        return error
    message = str(error)
    if full:  # whatever failed, a write stopped short first
        name = _staged_name(message, staging)
        return failure(full + (f" (writing {name})" if name else ""))
    if isinstance(error, error_type):
        error.args = (message.replace(staging, out_dir),) + error.args[1:]
    return error


def _flush_staged(staging):
    """Before the commit: the staged files on disk (fsync; its errors are the write's), and no
    full file system, where a writer may have stopped short without saying so."""
    for name in os.listdir(staging):
        path = os.path.join(staging, name)
        if os.path.isfile(path):
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
    if file_system_full(staging):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _commit(staging, out_dir, marker):
    """The commit of `staged_folder` that moves files in: the staged files replace what `out_dir`
    held, `marker` removed first and moved in last."""
    new = sorted(os.listdir(staging))
    if os.path.lexists(os.path.join(out_dir, marker)):
        os.remove(os.path.join(out_dir, marker))
        fsync_folder(out_dir)
    ours = os.path.basename(staging)
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        replaced_by_a_file = name in new and os.path.isdir(path) and not os.path.islink(path)
        if (name not in new or replaced_by_a_file) and name != ours and not (name in NOT_CONTENT
                                                                              and os.path.isdir(path)):
            _remove(path)
    for name in [name for name in new if name != marker] + [name for name in new if name == marker]:
        os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
    fsync_folder(out_dir)
    os.rmdir(staging)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)

"""`paddle_vit.staged_writes.staged_folder`, the writer of exports and published folders, on plain
folders: the new output swapped in whole by one exchange, the fallback that moves files in where
the exchange is refused, the system call used where the C library lacks it, and what a killed
run leaves beside the folder recognised and removed by the next one, never a folder of the
user's nor one another run is still writing. (Kills at every call: tests/test_crash_consistency.py.)"""
import ctypes
import errno
import os
import platform

import pytest

from paddle_vit import staged_writes
from paddle_vit.errors import ExportError

KIND, MARKER = "export", "done.json"
OLD = {"weights.bin": "old weights", "only_in_old.txt": "stale", MARKER: "old"}
NEW = {"weights.bin": "new weights", "only_in_new.txt": "fresh", MARKER: "new"}


def write_output(out, files, kind=KIND):
    """An output of `files` ({name: text}) written to `out` through `staged_folder`; returns the
    staging folder the block was given and its inode."""
    with staged_writes.staged_folder(out, kind, MARKER, error_type=ExportError, description="the export") as folder:
        for name, text in files.items():
            with open(os.path.join(folder, name), "w") as stream:
                stream.write(text)
        inode = os.stat(folder).st_ino
    return folder, inode


def contents(folder):
    """{name: text} of every entry in `folder`, hidden ones included."""
    found = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        found[name] = open(path).read() if os.path.isfile(path) else "a folder"
    return found


def beside(out):
    """The entries of `out`'s parent other than `out`: what a run left beside it."""
    return sorted(name for name in os.listdir(os.path.dirname(out)) if name != os.path.basename(out))


@pytest.fixture
def previous(tmp_path):
    """A previous output at tmp_path/out, next to a file of the user's."""
    out = str(tmp_path / "out")
    write_output(out, OLD)
    (tmp_path / "notes.txt").write_text("the user's")
    return out


@pytest.fixture
def calls(monkeypatch):
    """{"exchange": [...], "commit": [...]}: the calls of the two ways to put an output in place."""
    seen = {"exchange": [], "commit": []}
    real_exchange, real_commit = staged_writes.exchange, staged_writes._commit

    def exchange(first, second):
        seen["exchange"].append((first, second))
        return real_exchange(first, second)

    def commit(folder, out_dir, marker):
        seen["commit"].append(out_dir)
        return real_commit(folder, out_dir, marker)
    monkeypatch.setattr(staged_writes, "exchange", exchange)
    monkeypatch.setattr(staged_writes, "_commit", commit)
    return seen


def refuse_exchange(monkeypatch, code):
    """renameat2 fails with `code` (a file system without RENAME_EXCHANGE says EINVAL)."""
    def renameat2(*arguments):
        ctypes.set_errno(code)
        return -1
    monkeypatch.setattr(staged_writes, "_renameat2", lambda libc=None: renameat2)


def refuse_renames_into(monkeypatch, folder, code):
    """os.rename fails with `code` for any path renamed into `folder` (EXDEV: another mount)."""
    real_rename = os.rename

    def rename(source, target):
        if os.path.dirname(target) == folder:
            raise OSError(code, os.strerror(code), target)
        return real_rename(source, target)
    monkeypatch.setattr(staged_writes.os, "rename", rename)


# ---- the exchange ----------------------------------------------------------------------------

def test_an_output_over_a_previous_one_is_swapped_in_whole_by_one_exchange(previous, calls):
    before = os.stat(previous).st_ino
    folder, staged_inode = write_output(previous, NEW)
    assert os.path.dirname(os.path.dirname(folder)) == os.path.dirname(previous)  # built beside it, in a nest
    assert os.path.basename(os.path.dirname(folder)).startswith(".out.export-")
    assert contents(previous) == NEW  # the previous output's own file gone with it
    assert os.stat(previous).st_ino == staged_inode != before  # the folder itself replaced, not its files
    assert len(calls["exchange"]) == 1 and calls["commit"] == []
    assert beside(previous) == ["notes.txt"]  # the previous output, in the nest after the exchange, removed


def test_a_new_output_is_renamed_into_place_with_the_mode_of_a_new_folder(tmp_path, calls):
    out = str(tmp_path / "deeper" / "out")
    _, staged_inode = write_output(out, NEW)
    assert contents(out) == NEW and os.stat(out).st_ino == staged_inode
    umask = os.umask(0)
    os.umask(umask)
    assert oct(os.stat(out).st_mode & 0o777) == oct(0o777 & ~umask)
    assert calls["exchange"] == [] and calls["commit"] == []
    assert beside(out) == []


def test_the_swapped_in_folder_keeps_the_previous_folders_permissions(previous):
    os.chmod(previous, 0o750)
    write_output(previous, NEW)
    assert os.stat(previous).st_mode & 0o777 == 0o750


def test_a_failure_before_the_swap_leaves_the_previous_output_and_nothing_beside(previous):
    with pytest.raises(ExportError, match=f"half way in {previous}$"):
        with staged_writes.staged_folder(previous, KIND, MARKER, error_type=ExportError, description="the export") as folder:
            open(os.path.join(folder, "weights.bin"), "w").write("half")
            raise ExportError(f"half way in {folder}")  # named as the output, not the staging folder
    assert contents(previous) == OLD and beside(previous) == ["notes.txt"]


# ---- where the exchange is refused: the files moved in ----------------------------------------

@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS, errno.EBUSY])
def test_where_the_exchange_is_refused_the_new_files_are_moved_into_the_same_folder(previous, calls, monkeypatch,
                                                                                   code):
    refuse_exchange(monkeypatch, code)
    before = os.stat(previous).st_ino
    write_output(previous, NEW)
    assert contents(previous) == NEW  # whole, no staging folder left inside
    assert os.stat(previous).st_ino == before and calls["commit"] == [previous]
    assert beside(previous) == ["notes.txt"]


def test_where_the_folder_is_another_mount_after_all_the_new_files_are_copied_in(previous, calls, monkeypatch):
    """A bind mount of the same file system is not seen by os.path.ismount: the exchange says
    EBUSY, and a rename into the folder EXDEV."""
    refuse_exchange(monkeypatch, errno.EBUSY)
    refuse_renames_into(monkeypatch, previous, errno.EXDEV)
    write_output(previous, NEW)
    assert contents(previous) == NEW and calls["commit"] == [previous]
    assert beside(previous) == ["notes.txt"]


def test_a_fallback_that_cannot_move_the_new_folder_in_leaves_the_previous_output_whole(previous, monkeypatch):
    refuse_exchange(monkeypatch, errno.EINVAL)
    refuse_renames_into(monkeypatch, previous, errno.EACCES)
    with pytest.raises(ExportError, match="Permission denied.*while moving the new folder into.*previous one is "
                                          "unchanged"):
        write_output(previous, NEW)
    assert contents(previous) == OLD and beside(previous) == ["notes.txt"]


@pytest.mark.skipif(platform.machine().lower() not in staged_writes.SYS_RENAMEAT2, reason="no renameat2 number known here")
def test_without_the_c_librarys_renameat2_the_system_call_exchanges_the_folders(tmp_path, monkeypatch):
    libc = ctypes.CDLL(None, use_errno=True)

    class OlderLibc:  # glibc before 2.28: no renameat2 symbol
        syscall = libc.syscall

    real = staged_writes._renameat2
    monkeypatch.setattr(staged_writes, "_renameat2", lambda libc=None: real(OlderLibc()))
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "name.txt").write_text(folder.name)
    assert staged_writes.exchange(str(first), str(second))
    assert (first / "name.txt").read_text() == "second" and (second / "name.txt").read_text() == "first"
    with pytest.raises(FileNotFoundError):  # the system call's errno read back
        staged_writes.exchange(str(first), str(tmp_path / "missing"))


# ---- what a killed run leaves beside the folder -------------------------------------------------

def killed_nest(out, files):
    """A nest as a run killed while it was in use leaves it: marked, no process holding its lock,
    holding `files` (a new output not swapped in yet, or the previous one not removed yet)."""
    nest = staged_writes.StagingNest(out, KIND)
    for name, text in files.items():
        with open(os.path.join(nest.output, name), "w") as stream:
            stream.write(text)
    nest.release()  # what the kill does to the lock
    return nest.path


def test_what_a_killed_run_left_beside_the_folder_is_removed_by_the_next_run(previous):
    killed_before_the_exchange = killed_nest(previous, {"weights.bin": "half written"})
    killed_while_removing_the_previous = killed_nest(previous, {"weights.bin": "old, the rest removed"})
    killed_at_its_start = os.path.join(os.path.dirname(previous), ".out.export-empty123")
    os.mkdir(killed_at_its_start)  # before its mark was made
    assert len(beside(previous)) == 4
    write_output(previous, NEW)
    assert contents(previous) == NEW and beside(previous) == ["notes.txt"]
    assert not any(map(os.path.exists, (killed_before_the_exchange, killed_while_removing_the_previous,
                                        killed_at_its_start)))


def test_a_folder_that_only_looks_like_a_leftover_is_never_removed(previous, tmp_path):
    parent = tmp_path
    users = parent / ".out.export-mine"  # the user's: no mark
    users.mkdir()
    (users / "weights.bin").write_text("the user's own")
    elsewhere = tmp_path / "elsewhere"  # a link to a marked folder: neither the link nor its target
    elsewhere.mkdir()
    (elsewhere / staged_writes.STAGING_MARK).write_text("")
    (elsewhere / "data.txt").write_text("kept")
    os.symlink(elsewhere, parent / ".out.export-link")
    at_work = staged_writes.StagingNest(previous, KIND)  # another run's, still writing: its lock is held
    try:
        write_output(previous, NEW)
        assert contents(previous) == NEW
        assert (users / "weights.bin").read_text() == "the user's own"
        assert sorted(os.listdir(elsewhere)) == sorted([staged_writes.STAGING_MARK, "data.txt"])
        assert os.path.isdir(at_work.output)
    finally:
        at_work.remove()
    assert beside(previous) == sorted([".out.export-link", ".out.export-mine", "elsewhere", "notes.txt"])


def test_leftovers_of_another_folder_or_of_the_other_kind_are_not_touched(previous, tmp_path):
    other = killed_nest(str(tmp_path / "other"), {"weights.bin": "another folder's"})
    published = staged_writes.StagingNest(previous, "publish")
    published.release()
    write_output(previous, NEW)
    assert os.path.isdir(other) and os.path.isdir(published.path)


def test_a_nest_is_marked_or_empty_at_every_step_of_its_removal(tmp_path, monkeypatch):
    """The mark goes last: a kill during the removal leaves a nest the next run still recognises."""
    nest = killed_nest(str(tmp_path / "out"), OLD)
    order, real_remove, real_remove_entry = [], os.remove, staged_writes._remove
    monkeypatch.setattr(staged_writes.os, "remove", lambda path: (order.append(os.path.basename(path)), real_remove(path)))
    monkeypatch.setattr(staged_writes, "_remove", lambda path: (order.append(os.path.basename(path)),
                                                         real_remove_entry(path)))
    staged_writes.remove_nest(nest)
    assert order == ["out", staged_writes.STAGING_MARK] and not os.path.exists(nest)

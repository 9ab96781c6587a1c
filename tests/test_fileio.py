"""`paddle_vit.fileio`: what a killed write leaves is removed by the next write of the same file,
and nothing else is; the check of a folder before any work leaves no file behind."""
import errno
import os
import subprocess
import sys

import pytest

from paddle_vit import fileio

fcntl = pytest.importorskip("fcntl")


def write_text(text):
    def write(path):
        with open(path, "w") as stream:
            stream.write(text)
    return write


def test_a_temporary_file_a_killed_writer_left_is_removed_by_the_next_write(tmp_path):
    """A writer killed after its temporary file was made (here: a child process killed while
    `write` runs) leaves `.NAME.XXXXXXXX.tmp`, unlocked once it is dead."""
    target = tmp_path / "last.pdckpt"
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal, sys\n"
        "from paddle_vit import fileio\n"
        "def write(path):\n"
        "    open(path, 'w').write('half a checkpoint')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "fileio.atomic_write(sys.argv[1], write)\n"), str(target)])
    assert killed.returncode == -9
    (left,) = os.listdir(tmp_path)
    assert left.startswith(".last.pdckpt.") and left.endswith(".tmp")
    fileio.atomic_write(str(target), write_text("whole"))
    assert os.listdir(tmp_path) == ["last.pdckpt"] and target.read_text() == "whole"


def test_a_temporary_file_another_writer_holds_and_files_only_named_alike_are_kept(tmp_path):
    target = tmp_path / "metrics.jsonl"
    live = tmp_path / ".metrics.jsonl.abcd1234.tmp"  # another process is writing it: its lock is held
    live.write_text("being written")
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    others = [".metrics.jsonl.notes.tmp", ".other.jsonl.abcd1234.tmp", "metrics.jsonl.abcd1234.tmp"]
    for name in others:
        (tmp_path / name).write_text("the user's")
    os.symlink(tmp_path / "elsewhere", tmp_path / ".metrics.jsonl.efgh5678.tmp")  # a link: never followed
    (tmp_path / "elsewhere").write_text("the user's")
    try:
        fileio.atomic_write(str(target), write_text("{}\n"))
    finally:
        os.close(holder)
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, *others, ".metrics.jsonl.efgh5678.tmp", "elsewhere",
                                                   "metrics.jsonl"])
    fileio.atomic_write(str(target), write_text("{}\n"))  # its writer gone (lock released): removed
    assert live.name not in os.listdir(tmp_path)


@pytest.mark.parametrize("unnamed_files", [True, False], ids=["O_TMPFILE", "without O_TMPFILE"])
def test_the_check_of_an_output_folder_leaves_nothing_in_it(tmp_path, monkeypatch, unnamed_files):
    """The check writes a file: unnamed where the file system can (nothing for a kill to leave),
    else a hidden one through atomic_write, removed again, a leftover of a killed check too."""
    if not unnamed_files:
        real_open = os.open

        def no_tmpfile(path, flags, *rest):
            if flags & getattr(os, "O_TMPFILE", 0) == getattr(os, "O_TMPFILE", -1):
                raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), path)
            return real_open(path, flags, *rest)
        monkeypatch.setattr(os, "open", no_tmpfile)
        (tmp_path / "..write-test.abcd1234.tmp").write_text("")  # a check killed before
    assert fileio.writable_folder(str(tmp_path), "--out") == str(tmp_path)
    assert os.listdir(tmp_path) == []


@pytest.mark.root
def test_a_folder_on_a_read_only_mount_is_refused_by_the_check(read_only_folder):
    """O_TMPFILE says EROFS there: the refusal is the check's, not a fallback's."""
    with pytest.raises(fileio.ConfigError, match="not a folder this process can write in: Read-only file system"):
        fileio.writable_folder(str(read_only_folder), "--out")

"""Shared test set-up."""
import logging
import os

from paddle_vit import runtime

# one math thread per process: pytest-xdist already runs one worker per core, and the tools the
# tests start inherit it (runtime.math_threads_wanted)
os.environ.setdefault(runtime.MATH_THREADS_VARIABLE, "1")

# the suite runs the library as the tools do: with the process-wide settings made first (before
# Paddle computes: MKL's AVX2 kernels on AMD CPUs, the tuned malloc, Paddle's quiet log)
runtime.configure()

import paddle  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_library_logger():
    """Tools run in-process (tests call their `main`) configure the "paddle_vit" logger for a
    terminal; give every test the library's default logger back, so caplog sees its records."""
    yield
    logger = logging.getLogger("paddle_vit")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


@pytest.fixture
def paddle_flops_with_numpy2(monkeypatch):
    """paddle.flops (Paddle 3.3) converts its 1-element 1-D counters with int(), which numpy 2.4
    refuses ("only 0-dimensional arrays can be converted"); let int() read such a tensor."""
    original = paddle.Tensor.__int__

    def to_int(tensor):
        return original(tensor.reshape([])) if tensor.ndim == 1 and tensor.shape[0] == 1 else original(tensor)

    monkeypatch.setattr(paddle.Tensor, "__int__", to_int)


def mounted_tmpfs(folder, options):
    """Mount a tmpfs with `options` on the new folder `folder` for one test and unmount it after
    (a generator for a fixture; skips the test where mounting is not allowed, i.e. not root)."""
    import subprocess

    folder.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here ({result.stderr.decode().strip()[:80]})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 12 MiB file system that can really fill up (ENOSPC)."""
    yield from mounted_tmpfs(tmp_path / "disk", "size=12m")


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder no process can write in, even as root."""
    yield from mounted_tmpfs(tmp_path / "read_only", "ro,size=1m")


def pytest_terminal_summary(terminalreporter):
    """The crash tests' kill points per writer (tests/test_crash_consistency.py records them)."""
    counts = [(report.nodeid.split("::")[-1], value) for outcome in ("passed", "failed")
              for report in terminalreporter.stats.get(outcome, []) if report.when == "call"
              for name, value in report.user_properties if name == "kill_points"]
    if counts:
        terminalreporter.write_sep("-", "kill points per writer")
        for test, count in sorted(counts):
            terminalreporter.write_line(f"{count:4d}  {test}")

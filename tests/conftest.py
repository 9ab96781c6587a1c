"""Shared test set-up."""
import atexit
import faulthandler
import logging
import os
import tempfile
import time

from paddle_vit import runtime

# one math thread per process: pytest-xdist already runs one worker per core, and the tools the
# tests start inherit it (runtime.math_threads_wanted)
os.environ.setdefault(runtime.MATH_THREADS_VARIABLE, "1")

# the suite runs the library as the tools do: with the process-wide settings made first (before
# Paddle computes: MKL's AVX2 kernels on AMD CPUs, the tuned malloc, Paddle's quiet log)
runtime.configure()

import paddle  # noqa: E402
import pytest  # noqa: E402


# a test still running after this many seconds ends its process (the longest take about 90 s on 2 cores)
HUNG_TEST_SECONDS = float(os.environ.get("PADDLE_VIT_HUNG_TEST_SECONDS", "900"))
_hung_test_report = []
_SESSION_STARTED = time.time()


def hung_test_report_path(pid=None):
    """Where a hung test's process writes every thread's stack before it ends."""
    return os.path.join(tempfile.gettempdir(), f"paddle_vit-hung-test-{pid or os.getpid()}.txt")


@pytest.fixture(autouse=True)
def end_a_hung_test():
    """A test that hangs fails the run instead of holding it for ever: after HUNG_TEST_SECONDS its
    process writes every thread's Python stack to `hung_test_report_path()` and exits (pytest-xdist
    then reports the test as crashed and goes on with a new worker). A DataLoader worker hung once
    in about twelve fast loops on 2026-12-05 (docs/design.md, "The DataLoader's workers")."""
    if not _hung_test_report:
        path = hung_test_report_path()
        _hung_test_report.append(open(path, "w"))  # kept open: faulthandler writes to it
        atexit.register(os.remove, path)  # a process that ends by itself leaves none (a hung one skips atexit)
    faulthandler.dump_traceback_later(HUNG_TEST_SECONDS, exit=True, file=_hung_test_report[0])
    yield
    faulthandler.cancel_dump_traceback_later()


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
    """The crash tests' kill points per writer (tests/test_crash_consistency.py records them), and
    the stacks a hung test's process left (end_a_hung_test)."""
    folder = tempfile.gettempdir()
    reports = [os.path.join(folder, name) for name in sorted(os.listdir(folder))
               if name.startswith("paddle_vit-hung-test-") and name.endswith(".txt")]
    reports = [path for path in reports if os.path.getmtime(path) >= _SESSION_STARTED and os.path.getsize(path)]
    if reports:
        terminalreporter.write_sep("-", f"a test hung for {HUNG_TEST_SECONDS:.0f} s: every thread's stack in")
        for path in reports:
            terminalreporter.write_line(path)
    counts = [(report.nodeid.split("::")[-1], value) for outcome in ("passed", "failed")
              for report in terminalreporter.stats.get(outcome, []) if report.when == "call"
              for name, value in report.user_properties if name == "kill_points"]
    if counts:
        terminalreporter.write_sep("-", "kill points per writer")
        for test, count in sorted(counts):
            terminalreporter.write_line(f"{count:4d}  {test}")

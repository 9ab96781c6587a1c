"""CPU kernels that Paddle 3.3 runs on one thread, written in C++ (kernels/*.cc) and compiled on
this machine at first use with Paddle's own extension builder (`paddle.utils.cpp_extension`:
the system's C++ compiler, Paddle's headers from the wheel; threads of the C++ library).

The build happens once per machine and source: into the cache folder
($XDG_CACHE_HOME or ~/.cache)/paddle_vit/kernels/<key>, the key a hash of the sources, Paddle's and
Python's versions and the CPU's instruction sets (the build targets them), under a file lock so
that processes starting together build it once. It runs in a child Python process whose output
(the builder's progress, every compiler command and message) goes to build.log in that folder,
so that nothing of it reaches this process's terminal or another thread's output; this process
then loads the built library. Where it cannot be built (no compiler, a read-only home, not
Linux), on a Paddle release the kernels were not written for (paddle_versions.py) or with
PADDLE_VIT_COMPILED_KERNELS=0, `kernel_library()` is None and the callers keep Paddle's kernels,
which compute the same: one info line says why.
"""
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import threading

import paddle
from paddle.utils import cpp_extension

from .. import runtime
from .paddle_versions import COMPILED_KERNELS, applies

logger = logging.getLogger("paddle_vit")

SWITCH_VARIABLE = "PADDLE_VIT_COMPILED_KERNELS"
# -fno-trapping-math lets the compiler vectorise a select (the softmax's max and exp's clamp),
# -fno-math-errno a square root (AdamW's: 2.5x slower scalar); no kernel reads errno
CXX_FLAGS = ["-O3", "-fopenmp-simd", "-fno-trapping-math", "-fno-math-errno", "-pthread"]
KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
SOURCES = [os.path.join(KERNELS, name) for name in ("layer_norm_backward.cc", "attention_softmax.cc", "gelu.cc",
                                                         "encoder_layer.cc", "adamw.cc")]
HEADERS = [os.path.join(KERNELS, name) for name in ("vector_math.h", "kernels.h")]  # included by the sources: part of the build key
# run by the child process that builds: Paddle's builder, arguments from the command line
BUILD_CHILD = """
import json, sys
from paddle.utils.cpp_extension import load
load(**json.loads(sys.argv[1]), verbose=True)
"""
_LOADED = {}  # "library": the module, or None once a build was refused or failed in this process
_LOADING = threading.Lock()  # threads that step slices of a batch (batch_threads.py) load it once
_THIS_THREAD = threading.local()  # .threads: a thread's own kernel thread count (batch_threads.py)


def kernel_library():
    """The compiled kernels as a module of Paddle custom ops (its functions take and return
    tensors), or None where they are switched off or cannot be built."""
    if "library" not in _LOADED:
        with _LOADING:
            if "library" not in _LOADED:
                _LOADED["library"] = _load()
    return _LOADED["library"]


def _load():
    if os.environ.get(SWITCH_VARIABLE, "").strip() == "0":
        return None
    if not applies(COMPILED_KERNELS) or not build_possible():
        return None
    try:
        return _build(cache_folder())
    except Exception as error:  # a missing compiler or header, a read-only cache: Paddle's kernels instead
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        logger.info("compiled CPU kernels unavailable (%s; the builder's output: %s): Paddle's own are used "
                    "(%s=0 skips the build)", reason[:200], os.path.join(cache_folder(), "*", "build.log"),
                    SWITCH_VARIABLE)
        return None


def build_possible():
    """Whether a build can be tried here: Linux and a C++ compiler on the PATH (Paddle's builder
    calls `c++`)."""
    return sys.platform.startswith("linux") and shutil.which("c++") is not None


def cache_folder():
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "paddle_vit", "kernels")


def instruction_sets():
    """The vector instruction sets the build targets: AVX2 and FMA where this CPU has both (every
    x86-64 machine the project has met), else the compiler's baseline."""
    _, flags = runtime.cpu_vendor_and_flags()
    return ["-mavx2", "-mfma"] if {"avx2", "fma"} <= set(flags) else []


def build_key(target_flags):
    digest = hashlib.sha256()
    for source in SOURCES + HEADERS:
        with open(source, "rb") as stream:
            digest.update(stream.read())
    digest.update(f"{paddle.__version__}|{sys.version}|{platform.machine()}|{' '.join(CXX_FLAGS + target_flags)}".encode())
    return digest.hexdigest()[:16]


def _build(cache):
    target_flags = instruction_sets()
    key = build_key(target_flags)
    folder = os.path.join(cache, key)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed; a second process waits, then loads
        try:
            return _load_or_build(folder, key, target_flags)
        except BuildFailed:  # the compiler's verdict: a second build would give the same
            raise
        except Exception:  # a build killed half-way leaves a library that never loads: start it again, once
            _empty(folder, keep="build.lock")
            return _load_or_build(folder, key, target_flags)


class BuildFailed(RuntimeError):
    """The builder ran to its end and failed (build.log says why)."""


def _load_or_build(folder, key, target_flags):
    name = f"paddle_vit_kernels_{key}"
    library_folder = os.path.join(folder, name)  # where Paddle's builder puts the library
    if not os.path.exists(os.path.join(library_folder, f"{name}.so")):
        _build_in_child(folder, name, target_flags)
    with _quiet_builder_log():  # it says "using custom operator only" at INFO
        return cpp_extension.extension_utils._import_module_from_library(name, library_folder, False)


def _build_in_child(folder, name, target_flags):
    """Paddle's builder (`cpp_extension.load`) run in a child process, its output into build.log."""
    arguments = dict(name=name, sources=SOURCES, build_directory=folder,
                     extra_cxx_cflags=[*CXX_FLAGS, *target_flags], extra_ldflags=["-pthread"])
    log_path = os.path.join(folder, "build.log")
    with open(log_path, "w") as log:
        status = subprocess.run([sys.executable, "-c", BUILD_CHILD, json.dumps(arguments)], cwd=folder,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT).returncode
    if status != 0:
        raise BuildFailed(f"the build exited with status {status}: {_first_error(log_path)}")


def _first_error(log_path):
    """The compiler's first error line in the build's log, else its last line."""
    with open(log_path, errors="replace") as stream:
        lines = [line.strip() for line in stream if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return (errors or lines or ["no output"])[0 if errors else -1]


def _empty(folder, keep):
    """Remove everything in `folder` but the file `keep`."""
    for name in os.listdir(folder):
        if name != keep:
            path = os.path.join(folder, name)
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)


@contextlib.contextmanager
def _quiet_builder_log():
    builder = logging.getLogger("utils.cpp_extension")  # the name Paddle gives its builder's logger
    level = builder.level
    builder.setLevel(logging.WARNING)
    try:
        yield
    finally:
        builder.setLevel(level)


def kernel_threads():
    """The threads a compiled kernel shares its rows out to: the calling thread's own count where
    one is set (`kernel_threads_for_this_thread`), else Paddle's math threads as the process set
    them (runtime.math_threads)."""
    return getattr(_THIS_THREAD, "threads", None) or runtime.math_threads()


@contextlib.contextmanager
def kernel_threads_for_this_thread(threads):
    """The compiled kernels called from this thread use `threads` threads while the body runs
    (a thread stepping one slice of a batch beside others: batch_threads.py)."""
    before = getattr(_THIS_THREAD, "threads", None)
    _THIS_THREAD.threads = threads
    try:
        yield
    finally:
        _THIS_THREAD.threads = before

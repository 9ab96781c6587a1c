"""CPU kernels that Paddle 3.3 runs on one thread, written in C++ (kernels/*.cc) and compiled on
this machine at first use with Paddle's own extension builder (`paddle.utils.cpp_extension`:
the system's C++ compiler, Paddle's headers from the wheel; the threads of the OpenMP runtime that
runs Paddle's products where the wheel has Intel's, else of the C++ library).

The build happens once per machine and source: into the cache folder
($XDG_CACHE_HOME or ~/.cache)/paddle_vit/kernels/<key>, the key a hash of the sources, Paddle's and
Python's versions and the CPU's instruction sets (the build targets them), under a file lock so
that processes starting together build it once. The sources are copied into that folder (src/)
and built from there, so any checkout, install or copy of the package with the same sources
loads the same library. The build runs in a child Python process whose output (the builder's
progress, every compiler command and message) is added to build.log in that folder, so that
nothing of it reaches this process's terminal or another thread's output; the library's sha256
is then recorded (library.sha256). Each process loads the library only once it has checked it
against that record (about 10 ms): one missing, cut short or changed (a build killed half-way)
is never mapped, since a library cut short can end the process with SIGBUS rather than fail to
load, but built again in the emptied folder; an intact one is never removed, so a load that
fails for another reason (a memory limit, a signal) leaves the cache to every other process.
The library's Python functions are made in memory: no process leaves a file in the cache.
Where it cannot be built (no compiler, a read-only home, not Linux), on a Paddle release the
kernels were not written for (paddle_versions.py) or with PADDLE_VIT_COMPILED_KERNELS=0,
`kernel_library()` is None and the callers keep Paddle's kernels, which compute the same: one
info line says why.
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
import tempfile
import threading
import types

import paddle
from paddle.utils.cpp_extension import extension_utils

from .. import fileio, runtime
from ..paddle_versions import COMPILED_KERNELS, applies

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


AVX512 = {"avx512f", "avx512dq", "avx512bw", "avx512vl"}  # the subsets the compiler's 512-bit code may use


def instruction_sets():
    """The vector instruction sets the build targets: AVX2 and FMA where this CPU has both (every
    x86-64 machine the project has met), with AVX-512 where it has that too (the GELU and the
    softmax, which are bound by their arithmetic, 1.2-1.4x faster on an AMX Xeon), else the
    compiler's baseline."""
    _, flags = runtime.cpu_vendor_and_flags()
    if not {"avx2", "fma"} <= set(flags):
        return []
    return ["-mavx2", "-mfma"] + ([f"-m{name}" for name in sorted(AVX512)] if AVX512 <= set(flags) else [])


OPENMP_MACRO = "-DPADDLE_VIT_OPENMP"


def openmp_runtime():
    """The OpenMP runtime that runs Paddle's matrix products, when the kernels can run on it too:
    the path of Intel's libiomp5.so in Paddle's wheel (its x86 builds, with MKL), which also serves
    the calls GCC's OpenMP code makes. None in a build without it (another BLAS, another CPU)."""
    path = os.path.join(os.path.dirname(os.path.abspath(paddle.__file__)), "libs", "libiomp5.so")
    return path if os.path.isfile(path) else None


def threading_flags():
    """How a kernel shares a call out over threads: where Paddle's products run on Intel's OpenMP
    runtime, as OpenMP regions on that same runtime (built with -fopenmp, linked to that library),
    so that the products and the kernels between them take turns on one team of threads that
    stays awake between them; elsewhere threads started per call (vector_math.h)."""
    return ["-fopenmp", OPENMP_MACRO] if openmp_runtime() else []


def machine_flags():
    """The compiler flags that depend on this machine: its instruction sets and the threading."""
    return instruction_sets() + threading_flags()


def link_flags(target_flags):
    """The linker's flags: Intel's OpenMP runtime named when the kernels run on it (never GCC's
    own, which would start a second team of threads beside the products')."""
    flags = ["-pthread"]
    if OPENMP_MACRO in target_flags:
        flags += [f"-L{os.path.dirname(openmp_runtime())}", "-liomp5"]
    return flags


def build_key(target_flags):
    digest = hashlib.sha256()
    for source in SOURCES + HEADERS:
        with open(source, "rb") as stream:
            digest.update(stream.read())
    digest.update(f"{paddle.__version__}|{sys.version}|{platform.machine()}|{' '.join(CXX_FLAGS + target_flags)}".encode())
    return digest.hexdigest()[:16]


def _build(cache):
    flags = machine_flags()
    key = build_key(flags)
    folder = os.path.join(cache, key)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, LOCK), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed; a second process waits, then loads
        if not library_intact(folder, key):
            logger.info("building the compiled CPU kernels, once for this machine and source (25-80 s; its "
                        "output: %s; %s=0 skips it)", os.path.join(folder, LOG), SWITCH_VARIABLE)
            _build_afresh(folder, key, flags)
        _remove_files_left_by_processes(folder, key)
        with _quiet_builder_log():  # Paddle's loader notes each op it registers
            return load_library(library_name(key), library_path(folder, key))


class BuildFailed(RuntimeError):
    """The builder ran to its end and failed (build.log says why)."""


LOCK = "build.lock"
LOG = "build.log"
LIBRARY_HASH = "library.sha256"  # the built library's sha256, written after a build that succeeded
SOURCE_COPY = "src"  # the sources and headers of the key, copied into its folder and built from there


def library_name(key):
    return f"paddle_vit_kernels_{key}"


def library_path(folder, key):
    name = library_name(key)
    return os.path.join(folder, name, f"{name}.so")  # where Paddle's builder puts it


def library_intact(folder, key):
    """Whether the library in `folder` is the one its build made: present, with the sha256
    recorded when that build succeeded. A library without a record, truncated or changed is not."""
    try:
        with open(os.path.join(folder, LIBRARY_HASH)) as stream:
            recorded = stream.read().strip()
        return recorded == _sha256(library_path(folder, key))
    except OSError:
        return False


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _build_afresh(folder, key, target_flags):
    """Build the library into an emptied `folder` (its lock and log kept), then record its hash.
    Called whenever the library is not intact, before any attempt to load it: a library cut short
    by a kill during the link can end the process that maps it (SIGBUS: measured with the
    library's first 1% kept) instead of failing to load, so it is never mapped; and a build that
    did not finish leaves objects, a staging copy of the sources or a process's module file that
    the next one must not find. An intact library is never removed, whatever its load does (a
    memory limit, a signal)."""
    _empty(folder, keep=(LOCK, LOG))
    _build_in_child(folder, library_name(key), target_flags)
    _record_hash(folder, library_path(folder, key))


def _remove_files_left_by_processes(folder, key):
    """Paddle's own loader, which this module used before 2026-12-05 (and still runs in an older
    checkout sharing the cache), leaves a module file per process beside the library
    (`<name>_<thread id>.py`, 12 KB), removed at exit only: a killed process keeps its file, and
    hundreds piled up. Removed here, under the lock, which an older checkout also takes while it
    writes and imports its own."""
    library_folder = os.path.dirname(library_path(folder, key))
    prefix = library_name(key) + "_"
    for entry in os.listdir(library_folder):
        if entry.startswith(prefix) and entry.endswith(".py") and entry[len(prefix):-len(".py")].isdigit():
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(library_folder, entry))


def _record_hash(folder, library):
    digest = _sha256(library)
    fileio.atomic_write(os.path.join(folder, LIBRARY_HASH), lambda path: open(path, "w").write(digest + "\n"))


def load_library(name, path):
    """The custom ops of the library at `path` as a module of Python functions, made in memory:
    Paddle's own loader writes a module file per process into the library's folder (removed at
    exit, so a killed process leaves it), which a cache shared by every process must not hold.
    Relies on two functions of Paddle's extension builder, `load_op_meta_info_and_register_op`
    and `_custom_api_content` (the functions' Python source), both in Paddle 2.x and 3.x."""
    op_names = extension_utils.load_op_meta_info_and_register_op(path)
    module = types.ModuleType(f"_paddle_cpp_extension_{name}")
    module.__file__ = path
    for op_name in op_names:
        exec(compile(extension_utils._custom_api_content(op_name), path, "exec"), module.__dict__)
    return module


def _copy_sources(folder):
    """The sources and headers copied into `folder`/src (whole or not at all: a copy renamed into
    place), so that the build is the same whichever checkout, install or copy of the package
    asked for it; returns the copied sources' paths."""
    target = os.path.join(folder, SOURCE_COPY)
    if not os.path.isdir(target):
        staging = tempfile.mkdtemp(prefix=".src-", dir=folder)
        for path in SOURCES + HEADERS:
            shutil.copyfile(path, os.path.join(staging, os.path.basename(path)))
        os.rename(staging, target)
    return [os.path.join(target, os.path.basename(path)) for path in SOURCES]


def _build_in_child(folder, name, target_flags):
    """Paddle's builder (`cpp_extension.load`) run in a child process on the sources copied into
    `folder`, its output added to build.log under a line naming the build."""
    arguments = dict(name=name, sources=_copy_sources(folder), build_directory=folder,
                     extra_cxx_cflags=[*CXX_FLAGS, *target_flags], extra_ldflags=link_flags(target_flags))
    log_path = os.path.join(folder, LOG)
    with open(log_path, "a") as log:
        log.write(f"{BUILD_HEADER} {name} by process {os.getpid()}\n")
        log.flush()
        status = subprocess.run([sys.executable, "-c", BUILD_CHILD, json.dumps(arguments)], cwd=folder,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT).returncode
    if status != 0:
        raise BuildFailed(f"the build exited with status {status}: {_first_error(log_path)}")


BUILD_HEADER = "==== paddle-vit: a build of"


def _first_error(log_path):
    """The compiler's first error line in the last build's log, else its last line."""
    with open(log_path, errors="replace") as stream:
        lines = [line.strip() for line in stream if line.strip()]
    starts = [index for index, line in enumerate(lines) if line.startswith(BUILD_HEADER)]
    lines = lines[starts[-1] + 1:] if starts else lines
    errors = [line for line in lines if "error:" in line]
    return (errors or lines or ["no output"])[0 if errors else -1]


def _empty(folder, keep):
    """Remove everything in `folder` but the files named in `keep`."""
    for name in os.listdir(folder):
        if name not in keep:
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

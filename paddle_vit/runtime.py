"""Process-wide settings for speed and quiet, made by one explicit call: `configure()`.

Importing `paddle_vit` changes nothing outside the package. The commands make the settings before
they import Paddle (`paddle_vit.cli.entry`); a notebook or a script that wants the same speed
calls `configure()` once, before Paddle computes anything::

    import paddle_vit.runtime
    paddle_vit.runtime.configure()      # returns what it set, also kept in runtime.APPLIED

The three that change no result (MKL on AMD, glibc's malloc, the math threads) are also made by
`create_model` when it first builds a model on a CPU (`configure_for_models`), never by an import. Each setting has an
environment variable to switch it off. Why each one is made, what it changes
for other code in the process and what it was measured to give: docs/benchmarks.md, section
"Process settings".

| setting | what | off |
|---|---|---|
| quiet Paddle | ``GLOG_minloglevel=2`` and two warning filters | ``--debug``; your own ``GLOG_minloglevel`` |
| MKL on AMD | ``MKL_DEBUG_CPU_TYPE=5``: MKL's AVX2 kernels on AMD CPUs | ``PADDLE_VIT_MKL_AVX2=0`` |
| glibc's malloc | `mallopt` keeps freed blocks in the heap | ``PADDLE_VIT_MALLOC_TUNING=0`` |
| stride kernels | ``FLAGS_use_stride_kernel`` off: dense transposes | ``PADDLE_VIT_STRIDE_KERNELS=1`` |
| math threads | every core the process may use (Paddle's own default is one) | ``PADDLE_VIT_MATH_THREADS=N`` (0: Paddle's) |
| the allocator | train, eval, benchmark restart with tcmalloc or oneTBB's malloc | ``PADDLE_VIT_ALLOCATOR=system`` |

``PADDLE_VIT_ALLOCATOR``: unset or ``auto`` (tcmalloc when installed, else oneTBB's from the `tbb`
wheel), ``system`` (never restart), or the file name of another malloc library. With oneTBB's,
the restart also sets ``TBB_MALLOC_SET_HUGE_SIZE_THRESHOLD`` (1 MiB) unless it is set: freed
blocks from that size up are kept for reuse. This module
imports no Paddle at its top: it is imported, and `configure()` runs, before Paddle is loaded.
"""
import ctypes
import ctypes.util
import os
import re
import site
import sys
import warnings

from .errors import ConfigError

MKL_CPU_TYPE_VARIABLE = "MKL_DEBUG_CPU_TYPE"
MKL_AVX2 = "5"
OPT_OUT_VARIABLE = "PADDLE_VIT_MKL_AVX2"
STRIDE_KERNELS_VARIABLE = "PADDLE_VIT_STRIDE_KERNELS"
MALLOC_TUNING_VARIABLE = "PADDLE_VIT_MALLOC_TUNING"
MATH_THREADS_VARIABLE = "PADDLE_VIT_MATH_THREADS"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
MMAP_THRESHOLD_BYTES = 32 * 2 ** 20  # glibc's maximum on 64-bit systems
TRIM_THRESHOLD_BYTES = 2 ** 30
ALLOCATOR_VARIABLE = "PADDLE_VIT_ALLOCATOR"
PRELOADED_VARIABLE = "PADDLE_VIT_PRELOADED"  # what relaunch_with_allocator put in LD_PRELOAD
ALLOCATOR_LIBRARIES = ("tcmalloc_minimal", "tcmalloc")  # gperftools, the lean build first
KNOWN_ALLOCATORS = ("tcmalloc", "tbbmalloc", "jemalloc", "mimalloc")
# oneTBB's scalable malloc, shipped by the `tbb` wheel (a dependency on Linux x86-64) into
# <prefix>/lib: the proxy replaces malloc and needs the allocator itself loaded first
TBB_LIBRARIES = ("libtbbmalloc.so.2", "libtbbmalloc_proxy.so.2")
# oneTBB's malloc hands a freed block of a few MiB back to the kernel (munmap), and the next tensor
# of that size page-faults on every page it touches: a ViT-B/16 evaluation pass at batch 8 made
# 68,000 page faults and spent 110 ms in the kernel. From this size up a freed block counts as
# "huge" and stays cached for reuse (the variable oneTBB's malloc reads when it starts; its
# scalable_allocation_mode parameter TBBMALLOC_SET_HUGE_SIZE_THRESHOLD). docs/benchmarks.md,
# "oneTBB's malloc and large tensors".
TBB_HUGE_SIZE_VARIABLE = "TBB_MALLOC_SET_HUGE_SIZE_THRESHOLD"
TBB_HUGE_SIZE_BYTES = 2 ** 20
RELAUNCH_ADDED_VARIABLE = "PADDLE_VIT_RELAUNCH_ADDED"  # the other variables relaunch_environment added
APPLIED = {}  # what configure() set in this process, setting by setting
GLOG_VARIABLE = "GLOG_minloglevel"
# the warnings that are not the user's to act on (quiet_paddle)
QUIET_WARNINGS = ("No ccache found", "Tensor do not have 'place' interface")


def cpu_vendor_and_flags(cpuinfo_path="/proc/cpuinfo"):
    """(vendor id, set of feature flags) of the first CPU, or (None, empty set) off Linux.

    The one reading of the CPU for every branch that depends on its kind (MKL's kernels here, the
    default engine, bf16, int8's VNNI, the compiled kernels' instruction sets): each calls it
    through this module, so that a test can substitute another CPU for all of them at once
    (tests/test_cpu_kinds.py)."""
    vendor, flags = None, set()
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and vendor is None:
                    vendor = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                if vendor is not None and flags:
                    break
    except OSError:
        pass
    return vendor, flags


def mkl_avx2_wanted(environ=None, cpuinfo_path="/proc/cpuinfo"):
    """True when `configure_cpu_math` would set MKL_DEBUG_CPU_TYPE=5: an AMD CPU with AVX2 and FMA,
    the variable not set already, no opt-out."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT_VARIABLE, "1") == "0" or MKL_CPU_TYPE_VARIABLE in environ:
        return False
    vendor, flags = cpu_vendor_and_flags(cpuinfo_path)
    return vendor == "AuthenticAMD" and {"avx2", "fma"} <= flags


def malloc_tuning_wanted(environ=None):
    """True when `configure_cpu_math` would call mallopt: on Linux, unless opted out or glibc's
    own variables are set."""
    environ = os.environ if environ is None else environ
    return (sys.platform.startswith("linux") and environ.get(MALLOC_TUNING_VARIABLE, "1") != "0"
            and "MALLOC_MMAP_THRESHOLD_" not in environ and "MALLOC_TRIM_THRESHOLD_" not in environ)


def tune_malloc():
    """Keep freed blocks in glibc's heap (docs/benchmarks.md#process-settings); True if mallopt took
    both."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                  TRIM_THRESHOLD_BYTES))


def configure_paddle_flags(environ=None):
    """Turn Paddle's stride kernels off (docs/benchmarks.md#process-settings) unless the user
    chose; returns what it set."""
    import paddle  # here, not at the top: the other settings must be made before Paddle is loaded

    environ = os.environ if environ is None else environ
    if environ.get(STRIDE_KERNELS_VARIABLE, "0") == "1" or "FLAGS_use_stride_kernel" in environ:
        return {}
    paddle.set_flags({"FLAGS_use_stride_kernel": False})
    APPLIED["FLAGS_use_stride_kernel"] = False
    return {"FLAGS_use_stride_kernel": False}


def configure_cpu_math(environ=None, cpuinfo_path="/proc/cpuinfo", malloc=True):
    """Set MKL's AVX2 dispatch in `environ` (os.environ: this process and its children) when
    `mkl_avx2_wanted`, and tune this process's malloc when `malloc` and `malloc_tuning_wanted`;
    returns what it set, as a dict."""
    environ = os.environ if environ is None else environ
    applied = {}
    if mkl_avx2_wanted(environ, cpuinfo_path):
        environ[MKL_CPU_TYPE_VARIABLE] = MKL_AVX2
        applied[MKL_CPU_TYPE_VARIABLE] = MKL_AVX2
    if malloc and malloc_tuning_wanted(environ) and active_allocator() == "glibc" and tune_malloc():
        applied["mallopt"] = {"M_MMAP_THRESHOLD": MMAP_THRESHOLD_BYTES, "M_TRIM_THRESHOLD": TRIM_THRESHOLD_BYTES}
    APPLIED.update(applied)
    return applied


def math_threads_wanted(environ=None):
    """The CPU math threads `set_math_threads` would set, or None to leave Paddle's own: its import
    sets OMP_NUM_THREADS to 1 when unset, so that value says nothing of the user's wish.
    PADDLE_VIT_MATH_THREADS=N chooses (0: leave Paddle's); an OMP_NUM_THREADS other than 1, a
    distributed launch (several processes share the machine) or one core leave Paddle's; else
    every core this process may use."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(MATH_THREADS_VARIABLE, "").strip()
    if chosen:
        if not chosen.isdigit():
            raise ConfigError(f"{MATH_THREADS_VARIABLE} must be a whole number (0: Paddle's own), got {chosen!r}")
        return check_thread_count(int(chosen), MATH_THREADS_VARIABLE) if int(chosen) else None
    if environ.get("OMP_NUM_THREADS", "1").strip() != "1":
        return None
    if environ.get("PADDLE_TRAINERS_NUM", "1").strip() not in ("", "1"):
        return None
    cores = usable_cores()
    return cores if cores > 1 else None


def math_threads(environ=None):
    """The threads Paddle's CPU math runs on in this process: what `set_math_threads` set, else
    OMP_NUM_THREADS (which Paddle's import sets to 1 when unset), else one."""
    if APPLIED.get("math_threads"):
        return int(APPLIED["math_threads"])
    environ = os.environ if environ is None else environ
    chosen = environ.get("OMP_NUM_THREADS", "1").strip()
    return int(chosen) if chosen.isdigit() and int(chosen) > 0 else 1


def usable_cores():
    """The cores this process may run on (its affinity mask), the default thread count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def set_math_threads(environ=None):
    """Let Paddle's CPU math use `math_threads_wanted` threads; returns what it set."""
    threads = math_threads_wanted(environ)
    if threads is None:
        return {}
    import paddle  # here, not at the top: this module is imported before Paddle is loaded

    paddle.base.core.set_num_threads(threads)
    APPLIED["math_threads"] = threads
    return {"math_threads": threads}


def configure_for_models():
    """The settings that change no result, made once per process when `create_model` first builds a
    model on a CPU, so that a plain script computes as fast as the commands: MKL's AVX2 kernels on
    AMD (the same products by other kernels; MKL reads it at its first product, so it takes effect
    when none ran before), glibc's malloc thresholds and the math threads (Paddle's default is one).
    Each is switched off by its variable as in `configure()`, and named in `APPLIED`; the stride
    kernels, which change what a view of a tensor is, stay `configure()`'s for the process (the
    fast paths turn them off only while their own forward pass runs). Returns what it set now."""
    global _MODEL_SETTINGS_MADE
    if _MODEL_SETTINGS_MADE:
        return {}
    _MODEL_SETTINGS_MADE = True
    applied = configure_cpu_math()
    applied.update(set_math_threads())
    return applied


_MODEL_SETTINGS_MADE = False


def check_thread_count(threads, option):
    """`threads` (None: the default, all cores) as a thread count for the CPU math library, or a
    ConfigError naming `option`: from 1 to the CPUs of this machine. More threads than CPUs only
    wait for one another, and tens of thousands abort Paddle's thread pool."""
    cpus = os.cpu_count() or 1
    if threads is not None and not 1 <= threads <= cpus:
        raise ConfigError(f"{option} must be from 1 to {cpus} (the CPUs of this machine), got {threads}")
    return threads


def active_allocator(maps_path="/proc/self/maps"):
    """Which malloc serves this process: "tcmalloc", "jemalloc" or "mimalloc" when one of them
    is loaded, else "glibc" on Linux and "system" elsewhere."""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as stream:
            maps = stream.read()
    except OSError:
        return "glibc" if sys.platform.startswith("linux") else "system"
    for name in KNOWN_ALLOCATORS:
        if f"/lib{name}" in maps:
            return name
    return "glibc"


def allocator_choice(environ=None):
    """``PADDLE_VIT_ALLOCATOR`` as given: "auto" (also when unset or empty), "system" or a library."""
    environ = os.environ if environ is None else environ
    return environ.get(ALLOCATOR_VARIABLE, "auto").strip() or "auto"


def find_allocator_library(environ=None, find_library=ctypes.util.find_library):
    """The malloc library the tools preload, or None (``PADDLE_VIT_ALLOCATOR``, module docstring).
    Raises ValueError, naming the variable, for a library file that does not exist."""
    choice = allocator_choice(environ)
    if choice == "system":
        return None
    if choice != "auto":
        if os.sep in choice:
            if not os.path.isfile(choice):
                raise ValueError(f"{ALLOCATOR_VARIABLE}={choice}: no such file; expected 'auto', 'system' or "
                                 f"a malloc library such as libtcmalloc_minimal.so.4")
            return with_tbb_allocator(choice)
        # a bare name is what the dynamic loader would look up: it must be installed, or every
        # process would print the loader's "cannot be preloaded" and run with glibc's malloc anyway
        stem = re.sub(r"^lib", "", choice.split(".so")[0])
        found = find_library(stem) if stem else None
        if not found:
            raise ValueError(f"{ALLOCATOR_VARIABLE}={choice}: no installed library of that name; expected 'auto', "
                             f"'system', a file path or an installed malloc library such as libtcmalloc_minimal.so.4")
        return choice if choice.startswith("lib") and ".so" in choice else found
    return find_tcmalloc(find_library) or find_pip_allocator()


def find_tcmalloc(find_library=ctypes.util.find_library):
    """gperftools' tcmalloc as the dynamic loader names it, or None where it is not installed."""
    for name in ALLOCATOR_LIBRARIES:
        found = find_library(name)
        if found:
            return found
    return None


def find_pip_allocator(prefixes=None):
    """oneTBB's malloc from the `tbb` wheel, as an ``LD_PRELOAD`` value ("allocator:proxy"), or
    None: the allocator a pip-only install has, looked for in the lib/ folder of this Python's
    prefixes (a virtual environment's, the base one's, the user's)."""
    if prefixes is None:
        prefixes = [sys.prefix, sys.base_prefix, getattr(site, "USER_BASE", None) or ""]
    for prefix in dict.fromkeys(p for p in prefixes if p):
        paths = [os.path.join(prefix, "lib", name) for name in TBB_LIBRARIES]
        if all(os.path.isfile(path) for path in paths):
            return ":".join(paths)
    return None


def with_tbb_allocator(path):
    """A chosen ``libtbbmalloc_proxy`` path with the allocator it needs put before it (the
    proxy alone fails to load: "libtbbmalloc.so.2: cannot open shared object file")."""
    folder, name = os.path.split(path)
    companion = os.path.join(folder, TBB_LIBRARIES[0])
    if name.startswith("libtbbmalloc_proxy") and os.path.isfile(companion):
        return f"{companion}:{path}"
    return path


def relaunch_environment(environ=None, find_library=ctypes.util.find_library):
    """The environment to re-execute this process in so that the chosen malloc serves it, or
    None to go on as is: off Linux, when ``LD_PRELOAD`` is set (the user's choice, or this is
    the relaunched process), or when no library is chosen or installed."""
    environ = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or environ.get("LD_PRELOAD") or PRELOADED_VARIABLE in environ:
        return None
    library = find_allocator_library(environ, find_library)
    if library is None:
        return None
    added = {}
    if "libtbbmalloc" in os.path.basename(library.split(":")[-1]) and TBB_HUGE_SIZE_VARIABLE not in environ:
        added[TBB_HUGE_SIZE_VARIABLE] = str(TBB_HUGE_SIZE_BYTES)  # the user's own value wins
    if added:
        added[RELAUNCH_ADDED_VARIABLE] = ",".join(added)
    return dict(environ, LD_PRELOAD=library, **{PRELOADED_VARIABLE: library}, **added)


def relaunch_with_allocator():
    """Re-execute this process (same interpreter, options and arguments; same process id) with
    the chosen malloc preloaded when `relaunch_environment` says so; return when it does not.
    `configure(relaunch=True)` calls it first. A bad ``PADDLE_VIT_ALLOCATOR`` exits with code 2."""
    try:
        environ = relaunch_environment()
    except ValueError as error:
        sys.stderr.write(f"error: {error}\n")
        raise SystemExit(2)
    if environ is None:
        return
    arguments = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *arguments[1:]], environ)


def environment_without_relaunch(environ=None):
    """A copy of `environ` with what `relaunch_with_allocator` added taken out again: for a child
    process that should start as the user started this one (the timm side of a benchmark)."""
    environ = dict(os.environ if environ is None else environ)
    library = environ.pop(PRELOADED_VARIABLE, None)
    if library is not None and environ.get("LD_PRELOAD") == library:
        del environ["LD_PRELOAD"]
    for name in filter(None, environ.pop(RELAUNCH_ADDED_VARIABLE, "").split(",")):
        environ.pop(name, None)
    return environ


def describe_allocator():
    """One line for a run's log: which malloc serves the process, and how to change it."""
    name = active_allocator()
    if name != "glibc":
        return f"{name} (PADDLE_VIT_ALLOCATOR=system for glibc's)"
    tuned = " with freed memory kept for reuse" if "mallopt" in APPLIED else ""
    hint = "" if allocator_choice() != "auto" or find_allocator_library() else (
        "; installing tcmalloc (libtcmalloc-minimal4) or the tbb wheel (pip install tbb) lowers training's peak "
        "memory 10-20%, see docs/benchmarks.md")
    return f"glibc{tuned}{hint}"


def quiet_paddle(debug=False, environ=None):
    """Hide Paddle's notes that are not the user's to act on (docs/benchmarks.md#process-settings):
    the warning filters, and ``GLOG_minloglevel=2`` when Paddle is not imported yet (Paddle reads
    it when its library loads) and the user set none. With `debug` only the ccache filter. Returns
    what it set."""
    environ = os.environ if environ is None else environ
    applied = {}
    for message in QUIET_WARNINGS[:1] if debug else QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    applied["warning_filters"] = list(QUIET_WARNINGS[:1] if debug else QUIET_WARNINGS)
    if not debug and GLOG_VARIABLE not in environ and "paddle" not in sys.modules:
        environ[GLOG_VARIABLE] = "2"
        applied[GLOG_VARIABLE] = "2"
    APPLIED.update(applied)
    return applied


def configure(debug=False, relaunch=False):
    """Make every process-wide setting of the module docstring's table that its variable leaves on,
    and return what was set ({setting: value}, also kept in `APPLIED`). Call it once, first: before
    Paddle is imported for the quiet log, before it computes for MKL. `debug` keeps Paddle's log
    and warnings; `relaunch` (the long-running commands) first re-executes the process with the
    chosen malloc preloaded, which only returns in the process that goes on."""
    if relaunch:
        relaunch_with_allocator()
    applied = quiet_paddle(debug)
    applied.update(configure_cpu_math())
    applied.update(configure_paddle_flags())
    applied.update(set_math_threads())
    return applied

"""Process-wide settings for speed, applied once when `paddle_vit` is imported: one for the CPU
math library (before Paddle computes anything), one for the C allocator, and one Paddle flag.
Each is measured, documented here and in docs/benchmarks.md, and controlled by an environment
variable.

MKL on AMD processors. Paddle's CPU wheels (3.x) do their float32 matrix products with the
Intel MKL 2019 build they ship (``libmklml_intel.so``), which picks its kernels by CPU *vendor*:
on an AMD processor it runs its generic SSE code although the CPU has AVX2 and FMA. That MKL
honours ``MKL_DEBUG_CPU_TYPE=5`` ("use the AVX2 kernels"). Measured on this project's 2-core
AMD EPYC machine (Paddle 3.3.1, docs/benchmarks.md): a [1576, 384] x [384, 1536] product went
from 17 to 53 GFLOP/s, and ViT inference and training about doubled.

`configure_cpu_math()` sets the variable only when all of these hold, so it never downgrades
an Intel CPU (where MKL would otherwise use AVX-512) and never selects instructions the CPU lacks:
- the CPU reports vendor ``AuthenticAMD`` with the ``avx2`` and ``fma`` flags (Linux /proc/cpuinfo);
- ``MKL_DEBUG_CPU_TYPE`` is not set already (the user's value wins);
- ``PADDLE_VIT_MKL_AVX2`` is not ``0`` (the opt-out).
MKL reads the variable at its first computation, and importing Paddle computes nothing, so
importing `paddle_vit` anywhere before the first Paddle operation is early enough; a process
that has already multiplied matrices keeps the slow path (set the variable in the shell then).
MKL 2020.1 and later ignore the variable (they detect AMD themselves), so it does no harm there.
Child processes (DataLoader workers, `paddle.distributed.launch` ranks) inherit it.

The C allocator. Paddle's CPU tensors come from glibc's malloc, and in a Paddle process every
freed tensor of more than 128 KiB goes straight back to the kernel (glibc's adaptive mmap
threshold never rises there: strace shows an mmap/munmap pair per elementwise op), so the next
tensor page-faults on every 4 KiB page it touches: multiplying 2.4 M floats took 10 ms, 9 of
them page faults. `configure_cpu_math()` therefore fixes glibc's ``M_MMAP_THRESHOLD`` at its
maximum (32 MiB) and ``M_TRIM_THRESHOLD`` at 1 GiB with `mallopt`, so freed blocks stay in the
heap and are reused (the same product: 1.3 ms). Measured side by side with timm
(docs/benchmarks.md), batch 8: inference ViT-Ti/16 0.75x -> 0.98x of timm, S/16 0.92x -> 1.07x,
B/16 1.03x -> 1.08x; training Ti/16 unchanged (0.79x), S/16 0.90x -> 0.92x. The price is memory
kept for reuse: peak RSS +0 (Ti/16), +62 MiB (S/16 inference), +121 MiB (B/16 inference),
+112 MiB (S/16 training). Opt out with ``PADDLE_VIT_MALLOC_TUNING=0``; glibc's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` win over it. Linux with glibc only
(elsewhere nothing is changed).

Stride kernels. Since Paddle 2.6, `transpose`, `slice`, `split`, `unbind` and friends return
strided *views* in dynamic mode (``FLAGS_use_stride_kernel``, on by default); the next kernel
that needs contiguous memory (matmul, most of them) first copies the view with a generic
strided-copy kernel, about 8x slower than the transpose kernel it replaces (1.8 M floats:
26 ms against 3.4 ms). Attention transposes q, k, v and its output in every layer, forward and
backward, so `configure_paddle_flags()` turns stride kernels off: views become copies made by
the dense kernels, which is Paddle's behaviour up to 2.5 and what static graphs do. Measured
in one process, interleaved (docs/benchmarks.md): dynamic-mode ViT-Ti/16 inference 1.36x,
training 1.34x. What changes for other code in the process: a transposed or sliced tensor no
longer shares memory with its source, so writing into it in place does not write through
(Paddle's own view APIs, `Tensor.view` and `as_strided`, need stride kernels on). Opt out with
``PADDLE_VIT_STRIDE_KERNELS=1``; an explicit ``FLAGS_use_stride_kernel`` in the environment is
respected as well.
"""
import ctypes
import ctypes.util
import os
import sys

MKL_CPU_TYPE_VARIABLE = "MKL_DEBUG_CPU_TYPE"
MKL_AVX2 = "5"
OPT_OUT_VARIABLE = "PADDLE_VIT_MKL_AVX2"
STRIDE_KERNELS_VARIABLE = "PADDLE_VIT_STRIDE_KERNELS"
MALLOC_TUNING_VARIABLE = "PADDLE_VIT_MALLOC_TUNING"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
MMAP_THRESHOLD_BYTES = 32 * 2 ** 20  # glibc's maximum on 64-bit systems
TRIM_THRESHOLD_BYTES = 2 ** 30
APPLIED = {}  # what configure_cpu_math() / configure_paddle_flags() set (paddle_vit's import calls them)


def cpu_vendor_and_flags(cpuinfo_path="/proc/cpuinfo"):
    """(vendor id, set of feature flags) of the first CPU, or (None, empty set) off Linux."""
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
    """True when `configure_cpu_math` would set MKL_DEBUG_CPU_TYPE=5 (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT_VARIABLE, "1") == "0" or MKL_CPU_TYPE_VARIABLE in environ:
        return False
    vendor, flags = cpu_vendor_and_flags(cpuinfo_path)
    return vendor == "AuthenticAMD" and {"avx2", "fma"} <= flags


def malloc_tuning_wanted(environ=None):
    """True when `configure_cpu_math` would call mallopt: on Linux, unless opted out or glibc's
    own variables are set (module docstring)."""
    environ = os.environ if environ is None else environ
    return (sys.platform.startswith("linux") and environ.get(MALLOC_TUNING_VARIABLE, "1") != "0"
            and "MALLOC_MMAP_THRESHOLD_" not in environ and "MALLOC_TRIM_THRESHOLD_" not in environ)


def tune_malloc():
    """Keep freed blocks in glibc's heap (see the module docstring); True if mallopt took both."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                  TRIM_THRESHOLD_BYTES))


def configure_paddle_flags(environ=None):
    """Turn Paddle's stride kernels off (see the module docstring) unless the user chose;
    returns what it set. Call after importing paddle."""
    import paddle

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
    if malloc and malloc_tuning_wanted(environ) and tune_malloc():
        applied["mallopt"] = {"M_MMAP_THRESHOLD": MMAP_THRESHOLD_BYTES, "M_TRIM_THRESHOLD": TRIM_THRESHOLD_BYTES}
    APPLIED.update(applied)
    return applied

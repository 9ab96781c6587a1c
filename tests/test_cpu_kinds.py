"""Every branch that depends on the kind of CPU, run on any machine: the CPU is substituted in the
one place the library reads it (`paddle_vit.runtime.cpu_vendor_and_flags`), so that a line written
for one vendor or instruction set is exercised where CI does not run on such a CPU. The kinds are
those the project has met (docs/benchmarks.md), by their /proc/cpuinfo vendor and flags."""
import pytest

from paddle_vit import runtime
from paddle_vit.deploy import engine_choice, inference, quantize
from paddle_vit.variants import compiled

AVX2 = {"sse2", "sse4_2", "avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni"}
CPU_KINDS = {
    "AMD EPYC, AVX2 only": ("AuthenticAMD", AVX2),
    "AMD EPYC Zen 4": ("AuthenticAMD", AVX512 | {"avx512_bf16"}),
    "AMD EPYC Zen 5": ("AuthenticAMD", AVX512 | {"avx512_bf16", "avx_vnni"}),
    "Intel Xeon, AVX-512": ("GenuineIntel", AVX512),
    "Intel Xeon, AMX": ("GenuineIntel", AVX512 | {"avx512_bf16", "amx_bf16", "amx_int8", "amx_tile"}),
    "an older x86-64": ("GenuineIntel", {"sse2", "sse4_2", "avx"}),
    "no /proc/cpuinfo": (None, set()),
}
# what each kind should get: (MKL's AVX2 kernels asked for, the engine kind, bf16, VNNI for int8,
# the compiled kernels' instruction sets)
WITH_AVX512 = ["-mavx512bw", "-mavx512dq", "-mavx512f", "-mavx512vl"]
EXPECTED = {
    "AMD EPYC, AVX2 only": (True, "avx2", False, False, ["-mavx2", "-mfma"]),
    "AMD EPYC Zen 4": (True, "avx512", True, True, ["-mavx2", "-mfma"] + WITH_AVX512),
    "AMD EPYC Zen 5": (True, "avx512", True, True, ["-mavx2", "-mfma"] + WITH_AVX512),
    "Intel Xeon, AVX-512": (False, "avx512", False, True, ["-mavx2", "-mfma"] + WITH_AVX512),
    "Intel Xeon, AMX": (False, "avx512", True, True, ["-mavx2", "-mfma"] + WITH_AVX512),
    "an older x86-64": (False, "other", False, False, []),
    "no /proc/cpuinfo": (False, "other", True, False, []),  # bf16: Paddle's own check alone decides
}


@pytest.fixture(params=sorted(CPU_KINDS))
def cpu(request, monkeypatch):
    """The CPU kind `request.param`, for every reader of the CPU in the library."""
    vendor, flags = CPU_KINDS[request.param]
    monkeypatch.setattr(runtime, "cpu_vendor_and_flags", lambda cpuinfo_path=None: (vendor, set(flags)))
    monkeypatch.setattr(inference.core, "supports_bfloat16", lambda: True)  # Paddle's wheel is built with it
    return request.param


def test_each_cpu_kind_takes_its_own_branch_everywhere_the_cpu_matters(cpu):
    mkl, kind, bf16, vnni, instruction_sets = EXPECTED[cpu]
    assert runtime.mkl_avx2_wanted({}) is mkl
    environ = {}
    assert runtime.configure_cpu_math(environ, malloc=False) == ({"MKL_DEBUG_CPU_TYPE": "5"} if mkl else {})
    assert environ == ({"MKL_DEBUG_CPU_TYPE": "5"} if mkl else {})
    assert engine_choice.cpu_kind() == kind
    assert inference.cpu_bf16_support()[0] is bf16
    assert quantize.cpu_has_vnni() is vnni
    assert compiled.instruction_sets() == instruction_sets


def test_the_default_engine_follows_the_cpu_kind(cpu, monkeypatch):
    monkeypatch.setattr(engine_choice, "installed", lambda *modules: True)
    engine, why = engine_choice.default_engine("cpu", "fp32")
    assert engine == ("onnxruntime" if EXPECTED[cpu][1] in engine_choice.ONNXRUNTIME_FASTEST_ON else "predictor")
    assert why

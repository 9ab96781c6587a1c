"""Which engine runs a model when none is named (``eval.engine: auto``, predict's ``--backend auto``
on an export): the one measured fastest in float32 on this kind of CPU, where every engine gives
the same numbers (within 1e-5; docs/deployment.md, "Engines on a CPU").

Measured (docs/benchmarks.md): on AVX2 CPUs without AVX-512 ONNX Runtime, with each attention
fused into its kernel, ran ViT-Ti/16, S/16 and B/16 faster than the paddle.inference predictor
(oneDNN); on an AVX-512 Xeon with VNNI the predictor ran ViT-S/16 in fp32 faster than ONNX Runtime
(docs/deployment.md, "int8 on a VNNI CPU"), so the predictor is the default there; so is it on a
GPU and on a machine without the onnx extra, and a precision only one engine runs takes that one
(bf16: the predictor; int8: ONNX Runtime).
"""
import importlib.util

from .. import runtime

# CPU kinds (`cpu_kind`) where ONNX Runtime fp32 was measured ahead of the predictor
ONNXRUNTIME_FASTEST_ON = ("avx2",)


def cpu_kind(flags=None):
    """"avx512" (AVX-512 foundation), "avx2" (AVX2 + FMA without it) or "other", from /proc/cpuinfo."""
    if flags is None:
        _, flags = runtime.cpu_vendor_and_flags()
    if "avx512f" in flags:
        return "avx512"
    if {"avx2", "fma"} <= set(flags):
        return "avx2"
    return "other"


def installed(*modules):
    """Whether every module can be imported here (found, not imported: importing costs time)."""
    return all(importlib.util.find_spec(module) is not None for module in modules)


def default_engine(device="cpu", precision="fp32", needs_export=True, flags=None):
    """("onnxruntime" or "predictor", why) for a model to run on `device` in `precision`;
    `needs_export`: the model must be exported to ONNX first (paddle2onnx needed too)."""
    if precision == "int8":
        return "onnxruntime", "int8 runs on onnxruntime"
    if precision == "bf16":
        return "predictor", "bf16 runs on the predictor (oneDNN)"
    if device != "cpu":
        return "predictor", "on a GPU the predictor"
    kind = cpu_kind(flags)
    if kind not in ONNXRUNTIME_FASTEST_ON:
        measured = "measured ahead of onnxruntime there" if kind == "avx512" else "onnxruntime not measured against it there"
        return "predictor", f"the predictor on {kind.upper()} CPUs ({measured})"
    modules = ("onnxruntime", "onnx") + (("paddle2onnx",) if needs_export else ())
    if not installed(*modules):
        return "predictor", 'the predictor: onnxruntime, the fastest here, needs pip install -e ".[onnx]"'
    return "onnxruntime", f"the fastest measured on {kind.upper()} CPUs (docs/deployment.md)"

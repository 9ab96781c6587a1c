"""What a result says beyond its raw times: their images/s statistics, the paired ratio to the
reference, the analytic FLOPs, the ONNX export's summary, the versions and switches."""
import os
import statistics

import numpy as np
import paddle

from .. import runtime


def analytic_flops_per_image(vit_config, mode="infer"):
    """Floating-point operations for one image: 2 x MACs of the forward pass, and 3 x that for a
    training step (forward + a backward pass of about twice its cost). None for mode ``data``."""
    if mode == "data":
        return None
    forward = 2 * vit_config.count_macs()
    return 3 * forward if mode == "train" else forward


def summarise(seconds, batch_size, flops_per_image=None, peak_tflops=None):
    """Images/s statistics (median, min, max) of per-iteration times, and TFLOP/s and MFU at
    the median."""
    rates = [batch_size / s for s in seconds]
    median = statistics.median(rates)
    # overall: every image over the whole timed span; the figure for a prefetching input
    # pipeline, whose batches arrive in bursts (per-batch rates then mean little)
    overall = batch_size * len(seconds) / sum(seconds)
    out = {"images_per_sec": {"median": median, "min": min(rates), "max": max(rates), "overall": overall},
           "ms_per_iter": {"median": 1000.0 * statistics.median(seconds), "min": 1000.0 * min(seconds),
                           "max": 1000.0 * max(seconds)},
           "iterations": len(seconds)}
    if flops_per_image is not None:
        out["tflops"] = median * flops_per_image / 1e12
        out["mfu"] = out["tflops"] / peak_tflops if peak_tflops else None
    return out


def paired_ratio(own_rounds, reference_rounds):
    """Median over rounds of (our images/s / the reference's images/s in the same round), each
    round's rate taken at its median iteration time; and the list of per-round ratios."""
    ratios = [statistics.median(theirs) / statistics.median(ours)
              for ours, theirs in zip(own_rounds, reference_rounds)]
    return statistics.median(ratios), ratios


def onnx_summary(report):
    """The parts of the export's and the quantizer's reports worth a JSON line: node counts and
    what the quantizer left in fp32."""
    export = report.get("export") or {}
    summary = {key: export.get(key) for key in ("opset", "nodes", "initializers") if key in export}
    summary["fused_attention"] = report.get("fused_attention", 0)
    quantize = report.get("quantize")
    if quantize is not None:
        summary["quantize"] = {"mode": quantize.get("mode"), "nodes": quantize.get("nodes"),
                               "quantized": len(quantize.get("quantized") or ()),
                               "kept_fp32": {role: len(names)
                                             for role, names in (quantize.get("kept_fp32") or {}).items()}}
    return summary


def environment_report():
    """The versions and switches that change the numbers."""
    flags = paddle.get_flags(["FLAGS_use_stride_kernel"])
    return {"paddle": paddle.__version__, "numpy": np.__version__, "cpu_count": os.cpu_count(),
            "MKL_DEBUG_CPU_TYPE": os.environ.get("MKL_DEBUG_CPU_TYPE"),
            "allocator": runtime.active_allocator(), "LD_PRELOAD": os.environ.get("LD_PRELOAD"),
            "mallopt": runtime.APPLIED.get("mallopt"),
            "FLAGS_use_stride_kernel": flags["FLAGS_use_stride_kernel"]}

"""The human-readable lines of each result: a benchmark's (`format_report`), the side-by-side
table's and the matrix-product limits'."""
from .limits import machine_limit
from .load import format_other_load


def format_gemm(result):
    """Lines for `gemm_limits`'s result."""
    lines = [f"matrix product {result['size']}x{result['size']}x{result['size']}, {result['threads']} threads, "
             f"best of {result['iterations']}"]
    for key, name, missing in (("fp32_eager_gflops", "fp32 eager (MKL)", None),
                               ("fp32_predictor_gflops", "fp32 predictor (oneDNN)", None),
                               ("bf16_predictor_gflops", "bf16 predictor (oneDNN)", "bf16_missing"),
                               ("fp32_onnxruntime_gflops", "fp32 onnxruntime", "onnxruntime_missing"),
                               ("int8_onnxruntime_gops", "int8 onnxruntime (u8 x s8)", "onnxruntime_missing")):
        value = result.get(key)
        unit = "GOP/s" if key.startswith("int8") else "GFLOP/s"
        lines.append(f"{name:<27} " + (f"{value:8.1f} {unit}" if value is not None
                                        else f"not available: {result.get(missing)}"))
    if format_other_load(result):
        lines.append(format_other_load(result))
    return "\n".join(lines)


def format_report(result):
    """A few human-readable lines for `result` (what `tools/benchmark.py` prints without --json)."""
    def line(name, part):
        rate = part["images_per_sec"]
        text = (f"{name:<7} {rate['median']:8.1f} images/s (min {rate['min']:.1f}, max {rate['max']:.1f}), "
                f"{part['ms_per_iter']['median']:.1f} ms/iter")
        if part.get("tflops") is not None:
            text += f", {part['tflops']:.3f} TFLOP/s"
            if part.get("mfu") is not None:
                text += f", MFU {100 * part['mfu']:.1f}%"
        if part.get("peak_rss_mb") is not None:
            text += f", peak RSS {part['peak_rss_mb']:.0f} MiB"
        if part.get("gpu_max_allocated_mb") is not None:
            text += f", GPU max allocated {part['gpu_max_allocated_mb']:.0f} MiB"
        return text

    head = (f"{result['model']} {result['mode']} engine={result['engine']} dtype={result['dtype']} "
            f"device={result['device']} batch={result['batch_size']} image={result['image_size']} "
            f"threads={result['threads']} ({result['rounds']} rounds x {result['iters']} iters, "
            f"{result['warmup']} warm-up)")
    if result.get("batch_threads"):
        head += f" batch_threads={result['batch_threads']}"
    if result.get("onednn"):
        head += " onednn"
    if result.get("environment", {}).get("allocator"):
        head += f" malloc={result['environment']['allocator']}"
    lines = [head]
    if result.get("flops_per_image"):
        lines.append(f"analytic {result['flops_per_image'] / 1e9:.2f} GFLOP per image per iteration")
    if result["mode"] == "data":
        lines[0] += f" dataset={result['dataset']} workers={result['num_workers']}"
    if result.get("onnx"):
        onnx = result["onnx"]
        text = f"onnx graph: opset {onnx.get('opset')}, {onnx.get('nodes')} nodes"
        if onnx.get("fused_attention"):
            text += f", {onnx['fused_attention']} attentions run fused"
        if onnx.get("quantize"):
            kept = ", ".join(f"{role} {count}" for role, count in onnx["quantize"]["kept_fp32"].items() if count)
            text += (f"; int8 ({onnx['quantize']['mode']}): {onnx['quantize']['quantized']} products quantized"
                     + (f", kept fp32: {kept}" if kept else ""))
        lines.append(text)
    lines.append(line("paddle", result["paddle"]))
    if result["mode"] == "data":
        text = f"        {result['paddle']['images_per_sec']['overall']:.1f} images/s sustained (all images / all time)"
        if "images_per_sec_per_worker" in result["paddle"]:
            text += f", {result['paddle']['images_per_sec_per_worker']:.1f} per worker"
        lines.append(text)
    if "timm" in result:
        lines.append(line("timm", result["timm"]))
        if result["timm"].get("quantized_engine"):  # int8: the fastest of PyTorch's engines, timed first
            lines[-1] += (f" (int8: quantized engine {result['timm']['quantized_engine']}, the fastest here; "
                          f"the peak includes trying each engine)")
        per_round = ", ".join(f"{r:.2f}" for r in result["ratio_per_round"])
        lines.append(f"paddle / timm = {result['ratio']:.2f}x (median of paired rounds: {per_round})")
    lines.append("load average (1 min) before / after: {:.2f} / {:.2f}".format(*result["load_average_1min"]))
    if format_other_load(result):
        lines.append(format_other_load(result))
    own_title = "where a step's time goes (paddle.profiler, each op's own time"
    if (result.get("batch_threads") or 1) > 1:  # each thread's ops: the rows add up to about threads x the step
        own_title += f", summed over the {result['batch_threads']} threads of the batch"
    for key, title in (("operators", own_title + "):"),
                       ("timm_operators", "where timm's step goes (torch.profiler, each op's own time):")):
        for index, row in enumerate(result.get(key, [])[:12]):
            if index == 0:
                lines.append(title)
            lines.append(f"  {row['name']:<28} {row['calls']:5d} calls {row['ms_per_step']:8.1f} ms "
                         f"{100 * row['share']:5.1f}%")
    return "\n".join(lines)


def format_side_by_side(result):
    """The side-by-side table: one row per path."""
    lines = [f"{result['model']} infer, batch {result['batch_size']}, image {result['image_size']}, "
             f"{result['threads']} threads ({result['rounds']} rounds x {result['iters']} iters, in turns); "
             f"{result['flops_per_image'] / 1e9:.2f} GFLOP per image",
             f"{'path':<18} {'images/s':>9} {'vs timm fp32':>13} {'vs timm int8':>13} {'GFLOP/s':>8} {'of limit':>9}"]
    for path in result["paths"]:
        share = f"{100 * path['fraction_of_limit']:.0f}%" if path["fraction_of_limit"] is not None else "-"
        lines.append(f"{path['name']:<18} {path['images_per_sec']['median']:9.1f} {path['vs_timm_fp32']:12.2f}x "
                     f"{path['vs_timm_int8']:12.2f}x {path['gflops']:8.1f} {share:>9}")
    limits = result["limits"]
    engines = [path["quantized_engine"] for path in result["paths"] if path.get("quantized_engine")]
    if engines:
        lines.append(f"timm int8: PyTorch's quantized engine {engines[0]}, the fastest here (each engine timed first)")
    lines.append("limits (GFLOP/s, {0}x{0} product): fp32 {1}, bf16 {2}, int8 {3} GOP/s".format(
        limits["size"], *(f"{value:.1f}" if value else "n/a"
                          for value in (machine_limit(limits, "fp32"), machine_limit(limits, "bf16"),
                                        machine_limit(limits, "int8")))))
    lines.append("load average (1 min) before / after: {:.2f} / {:.2f}".format(*result["load_average_1min"]))
    if format_other_load(result):
        lines.append(format_other_load(result))
    return "\n".join(lines)

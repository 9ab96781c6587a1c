"""The timm side of ``paddle-vit benchmark --compare timm``, run by path with another Python, one
with torch and timm but not Paddle (`paddle_vit.bench.reference.ReferenceProcess` starts it):

    python paddle_vit/bench/timm_worker.py benchmark '<settings json>'
        builds timm's model of the given configuration, warms it up, then times `run N`
        requests from stdin one at a time, so that the Paddle process and this one take turns
        (A B A B) and never share the cores while timing.

It also holds what both sides of the comparison share, the per-iteration timing loop, the peak
memory and the answer lines' prefix, and `import_timm`, which the reference fixture makers
(tests/fixtures/make/) use. Only the standard library is imported at module level, so that
the benchmark's Paddle side imports it and a Python without Paddle runs it.
"""
import glob
import importlib.util
import json
import os
import resource
import sys
import time
from functools import partial

PROTOCOL_PREFIX = "BENCH_JSON "  # the worker's answers are the stdout lines that start with this


def time_iterations(step, synchronize, iterations):
    """The seconds of each of `iterations` calls of `step`, each ended by `synchronize` (the
    device's wait: a kernel launch returns before it has run)."""
    seconds = []
    for _ in range(iterations):
        start = time.perf_counter()
        step()
        synchronize()
        seconds.append(time.perf_counter() - start)
    return seconds


def operator_rows(events, iterations):
    """{op name: (calls, self time in ns)} of `iterations` profiled steps -> [{"name", "calls",
    "ms_per_step", "share"}] per step, largest first. Self times (an op's own, without the ops it
    calls), so that the rows add up to the step and no time is counted twice; both sides of the
    benchmark report this way."""
    total = sum(ns for _, ns in events.values()) or 1.0
    rows = [{"name": name, "calls": calls // iterations, "ms_per_step": ns / 1e6 / iterations, "share": ns / total}
            for name, (calls, ns) in events.items() if ns > 0]
    return sorted(rows, key=lambda row: -row["ms_per_step"])


def peak_rss_mb(children=False):
    """The peak resident set size of this process (or of its largest child), in MiB."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024.0  # Linux reports KiB


def import_timm():
    """Import timm (and torch) and return the timm module.

    torchvision from PyPI does not always match the torch build: its import then registers fake
    kernels for C++ ops its library never defined ("operator torchvision::nms does not exist"),
    and timm imports torchvision. Where torchvision's own library does not load, declaring the
    schemas first lets the import finish (the ops are never called); where it loads, torchvision
    defines them itself, and declaring them first would make its registration abort.
    """
    import torch

    spec = importlib.util.find_spec("torchvision")
    libraries = glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so")) if spec and spec.origin else []
    try:
        torch.ops.load_library(libraries[0])  # the same library torchvision's import loads
    except (IndexError, OSError, RuntimeError):  # none, or built for another torch
        for op in ("nms", "qnms"):
            try:
                torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except RuntimeError:  # already defined
                pass
    import timm

    return timm


def _say(**message):
    sys.stdout.write(PROTOCOL_PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


def _build_timm_model(timm, vit):
    """timm's VisionTransformer with the configuration of our `ViTConfig` fields `vit` (a dict).

    Pools map as our "cls" -> timm "token" and "mean" -> "avg" (with fc_norm); our
    "walkthrough" pool (mean over every token) has no timm twin and is timed as "avg", which
    costs the same. Position-embedding kinds cost nothing measurable and are timm's learned one.
    A hybrid (`backbone_layers` set) gets timm's own hybrid backbone (vision_transformer_hybrid's
    ResNetV2 with StdConv2dSame) in a HybridEmbed, as timm's vit_*_r* models are built.
    """
    from timm.models.vision_transformer import VisionTransformer

    pool = {"cls": "token"}.get(vit["pool"], "avg")
    hybrid = {}
    if vit.get("backbone_layers") is not None:
        from timm.layers import HybridEmbed
        from timm.models.vision_transformer_hybrid import _resnetv2

        hybrid["embed_layer"] = partial(HybridEmbed, backbone=_resnetv2(layers=tuple(vit["backbone_layers"]),
                                                                        in_chans=vit["in_channels"]))
    return VisionTransformer(
        img_size=vit["image_size"], patch_size=vit["patch_size"], in_chans=vit["in_channels"],
        num_classes=vit["num_classes"], embed_dim=vit["embed_dim"], depth=vit["depth"],
        num_heads=vit["num_heads"], mlp_ratio=vit["mlp_ratio"], qkv_bias=vit["qkv_bias"],
        global_pool=pool, fc_norm=vit["pool"] == "mean", pre_norm=False,
        drop_rate=vit["dropout"], attn_drop_rate=vit["attention_dropout"], drop_path_rate=vit["drop_path"], **hybrid)


# PyTorch's quantized engines for x86 (torch.backends.quantized): its default "x86" picks between
# fbgemm and oneDNN kernels by a rule of its own; which is fastest for a ViT's Linears depends on
# the CPU (oneDNN's on VNNI and AMX). qnnpack is the ARM one.
X86_QUANTIZED_ENGINES = ("x86", "fbgemm", "onednn")
ENGINE_TRIAL_ITERATIONS = 3  # timed forward passes per engine, after one warm-up, to choose


def _fastest_dynamic_int8(torch, model, images):
    """`quantize_dynamic` of the Linears (qint8 weights, activations quantized per batch) under
    each of PyTorch's x86 quantized engines this build supports, each timed on `images` (median
    of ENGINE_TRIAL_ITERATIONS after a warm-up): the fastest model and its engine's name, so
    that the comparison is PyTorch's best dynamic int8 on this machine rather than its default's.
    The engine stays set for the timed runs."""
    import copy

    supported = [engine for engine in X86_QUANTIZED_ENGINES if engine in torch.backends.quantized.supported_engines]
    if not supported:  # another architecture: its default engine
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8), \
            torch.backends.quantized.engine
    best = None
    for engine in supported:
        torch.backends.quantized.engine = engine  # the weights are packed for the engine set when quantized
        quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
        with torch.inference_mode():
            quantized(images)
            seconds = []
            for _ in range(ENGINE_TRIAL_ITERATIONS):
                start = time.perf_counter()
                quantized(images)
                seconds.append(time.perf_counter() - start)
        median = sorted(seconds)[len(seconds) // 2]
        if best is None or median < best[0]:
            best = (median, engine, quantized)
    torch.backends.quantized.engine = best[1]
    return best[2], best[1]


class _TimmSubject:
    """One timm model set up for `settings["mode"]` ("infer" or "train"), timed per iteration."""

    def __init__(self, settings):
        import torch

        self.torch = torch
        timm = import_timm()
        self.versions = {"torch": torch.__version__, "timm": timm.__version__}
        torch.manual_seed(settings["seed"])
        torch.set_num_threads(settings["threads"])
        self.device = torch.device("cuda" if settings["device"].startswith("gpu") else "cpu")
        # int8 is PyTorch's dynamic quantization of the Linears (float32 activations between them)
        self.int8 = settings["dtype"] == "int8"
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                      "int8": torch.float32}[settings["dtype"]]
        self.mode = settings["mode"]
        vit = settings["vit"]
        model = _build_timm_model(timm, vit).to(self.device)
        self.num_parameters = sum(parameter.numel() for parameter in model.parameters())
        batch, size = settings["batch_size"], vit["image_size"]
        self.images = torch.randn(batch, vit["in_channels"], size, size, device=self.device)
        self.labels = torch.randint(0, max(vit["num_classes"], 1), (batch,), device=self.device)
        # low precision on CPU is torch.autocast (bf16 matrix products, float32 weights), as the
        # Paddle side's oneDNN bf16 predictor; on GPU pure low-precision weights, as the Paddle side
        self.autocast = self.dtype != torch.float32 and self.device.type == "cpu"
        if self.int8 and (self.mode != "infer" or self.device.type != "cpu"):
            raise ValueError("int8 (dynamic quantization of the Linears) is CPU inference only")
        if self.mode == "infer":
            model.eval()
            if self.int8:  # the int8 a PyTorch user has on CPU: int8 weights, activations quantized per batch
                model, engine = _fastest_dynamic_int8(torch, model, self.images)
                self.versions["quantized_engine"] = engine
            elif self.dtype != torch.float32 and not self.autocast:
                model = model.to(self.dtype)
                self.images = self.images.to(self.dtype)
        else:
            model.train()
            # the project's recipe: no decay on biases, norms, class token and position embedding
            decay = [p for name, p in model.named_parameters()
                     if p.ndim > 1 and name not in ("cls_token", "pos_embed")]
            no_decay = [p for name, p in model.named_parameters()
                        if not (p.ndim > 1 and name not in ("cls_token", "pos_embed"))]
            optim = settings["optimizer"]
            self.optimizer = torch.optim.AdamW(
                [{"params": decay, "weight_decay": optim["weight_decay"]},
                 {"params": no_decay, "weight_decay": 0.0}],
                lr=optim["lr"], betas=(optim["beta1"], optim["beta2"]), eps=optim["epsilon"])
            self.clip = optim["clip_grad_norm"]
        self.model = model

    def step(self):
        torch = self.torch
        if self.mode == "infer":
            with torch.inference_mode(), torch.autocast("cpu", dtype=self.dtype, enabled=self.autocast):
                return self.model(self.images)
        low_precision = self.dtype != torch.float32
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=low_precision):
            logits = self.model(self.images)
        loss = torch.nn.functional.cross_entropy(logits.float(), self.labels)
        loss.backward()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def synchronize(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def timed(self, iterations):
        return time_iterations(self.step, self.synchronize, iterations)

    def profiled(self, iterations):
        """`operator_rows` of `iterations` more steps under torch.profiler."""
        profiler = self.torch.profiler
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as profile:
            self.timed(iterations)
        events = {event.key: (event.count, event.self_cpu_time_total * 1e3)  # microseconds -> ns
                  for event in profile.key_averages()}
        return operator_rows(events, iterations)

    def gpu_max_allocated_mb(self):
        if self.device.type != "cuda":
            return None
        return self.torch.cuda.max_memory_allocated() / 2 ** 20


def serve_benchmark(settings):
    """The worker loop: set up, warm up, say ready, then answer `run N` / `quit` from stdin."""
    try:
        subject = _TimmSubject(settings)
        subject.timed(settings["warmup"])
    except Exception as error:  # the parent turns this into one readable line
        _say(error=f"{type(error).__name__}: {error}")
        return 1
    _say(ready=True, num_parameters=subject.num_parameters, threads=subject.torch.get_num_threads(),
         versions=subject.versions)
    for line in sys.stdin:
        command = line.split()
        if not command:
            continue
        if command[0] == "run":
            _say(seconds=subject.timed(int(command[1])))
        elif command[0] == "profile":
            _say(operators=subject.profiled(int(command[1])))
        elif command[0] == "quit":
            break
    _say(peak_rss_mb=peak_rss_mb(), gpu_max_allocated_mb=subject.gpu_max_allocated_mb())
    return 0


def main(argv):
    if len(argv) != 2 or argv[0] != "benchmark":
        sys.stderr.write("usage: python paddle_vit/bench/timm_worker.py benchmark '<settings json>'\n")
        return 2
    return serve_benchmark(json.loads(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

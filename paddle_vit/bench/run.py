"""Throughput of a ViT: inference, a training step, or the input pipeline; optionally side by
side with timm's model of the same configuration running in another Python (PyTorch).

    settings = BenchmarkSettings(model="vit_small_patch16_224", batch_size=8, mode="infer")
    result = run_benchmark(settings)                       # a JSON-ready dict
    print(format_report(result))

Method. The subject is set up (model, optimizer, inputs, the static graph or the exported
predictor), warmed up for `warmup` iterations, then timed for `rounds` x `iters` iterations,
each iteration timed on its own and ended by a device synchronisation (a no-op on CPU, where
every kernel has returned when the call returns). With a reference (timm) the rounds
alternate: Paddle runs `iters` iterations while the PyTorch process waits on its stdin, then
PyTorch runs `iters` while Paddle waits, and so on (A B A B). Both see the same load of a shared
machine, and `ratio` is the median over rounds of (Paddle's round median / timm's round median)
images per second, a paired comparison that drifting background load does not bias.
What the rest of the machine used while the rounds ran is measured too (`other_load`: every CPU's
busy time from /proc/stat less this process's and its children's, in cores), and the command
warns in one line when it passed `BUSY_CORES` (or `BUSY_SHARE` of the cores where that is more;
Linux only, elsewhere it is None).

What each mode times:
- ``infer``: the forward pass without autograd (``paddle.no_grad`` / ``torch.inference_mode``);
- ``train``: forward, cross-entropy, backward, global-norm clipping and the AdamW step with the
  project's recipe (`engine.optim.build_optimizer`: no decay on biases, norms and embeddings),
  the trainer's own step (`engine.step`); the loss is never read back, so there is no host
  synchronisation inside the step;
- ``data``: one batch from the project's `ResumableDataLoader` (decode, augment, collate).

Engines: ``dynamic`` (eager), ``to_static`` (`paddle.jit.to_static`, whole graph) and
``predictor`` (infer only: `paddle.jit.save` to a temporary folder, then
`paddle.inference.create_predictor`, input copied from host memory on every call).

FLOPs are counted analytically: `ViTConfig.count_macs()` (one forward pass of one image) x 2,
x 3 more for a training step (the backward pass costs about twice the forward).
"""
import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

import numpy as np
import paddle
import paddle.profiler as profiler

from .. import runtime
from ..config import OptimizerConfig
from ..data import DataConfig, build_dataloader, build_datasets
from ..deploy.inference import InferenceOptions, PaddlePredictor, cpu_bf16_support, engine_for_model
from ..device import select_device
from ..engine import step as train_step
from ..engine.optim import build_optimizer
from ..errors import ConfigError, PaddleVitError, check_choice
from ..models import ViT, get_model_config
from .timm_worker import PROTOCOL_PREFIX, operator_rows, peak_rss_mb, time_iterations
from ..variants import use_cpu_fast_paths, use_traceable_variants
from ..variants.batch_threads import BatchThreads, plan_batch_threads

logger = logging.getLogger("paddle_vit")

MODES = ("infer", "train", "data")
ENGINES = ("dynamic", "to_static", "predictor", "onnxruntime")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}
DEVICES = ("cpu", "gpu", "auto")
REFERENCES = ("timm",)
# the timm side of --compare timm, found beside this module so that any install of the package has it
TIMM_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "timm_worker.py")


@dataclasses.dataclass
class BenchmarkSettings:
    """What to time (see the module docstring).

    model: a registered name (`paddle_vit.list_models()`); `model_overrides` are `ViTConfig`
        fields (``image_size`` overrides the registered resolution).
    threads: CPU threads for the math library (Paddle and PyTorch alike); None = all cores.
    peak_tflops: the device's peak for `dtype`, to report MFU (model FLOPs utilisation).
    data_config: a `data.DataConfig` for mode ``data`` (None: the synthetic set).
    num_workers: DataLoader worker processes in mode ``data``.
    onednn: engine ``predictor`` on CPU: Paddle Inference's oneDNN (MKLDNN) kernels and passes
        (on by default, as for tools/predict.py).
    """
    model: str = "vit_small_patch16_224"
    batch_size: int = 8
    mode: str = "infer"
    dtype: str = "fp32"
    device: str = "cpu"
    engine: str = "dynamic"
    warmup: int = 3
    iters: int = 5
    rounds: int = 4
    threads: Optional[int] = None
    peak_tflops: Optional[float] = None
    model_overrides: dict = dataclasses.field(default_factory=dict)
    data_config: Optional[object] = None
    num_workers: int = 0
    onednn: bool = True
    seed: int = 0
    profile: bool = False  # also time each op of a few more steps (`profile_operators`)
    batch_threads: Optional[int] = None  # mode train: train.batch_threads (None: as the trainer chooses)

    def validate(self):
        for name, value, choices in (("mode", self.mode, MODES), ("engine", self.engine, ENGINES),
                                     ("dtype", self.dtype, tuple(DTYPES)), ("device", self.device, DEVICES)):
            check_choice(f"--{name}", value, choices)
        for name, least in (("batch_size", 1), ("iters", 1), ("rounds", 1), ("warmup", 0), ("num_workers", 0)):
            if getattr(self, name) < least:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least {least}, got {getattr(self, name)}")
        runtime.check_thread_count(self.threads, "--threads")
        # nan fails every comparison and inf gives an MFU of 0: a peak must be a finite number > 0
        if self.peak_tflops is not None and not 0 < self.peak_tflops < float("inf"):
            raise ConfigError(f"--peak-tflops must be a finite number > 0 (the device's peak TFLOP/s for --dtype), "
                              f"got {self.peak_tflops}")
        if self.device == "cpu" and self.dtype == "fp16" and self.mode != "data":
            raise ConfigError("--dtype fp16 needs --device gpu: Paddle's CPU kernels have no fp16 convolution or "
                              "matrix product; on CPU use --dtype fp32, or bf16 with --engine predictor")
        if self.engine == "onnxruntime" or self.dtype == "int8":
            self._validate_onnxruntime()
        elif self.device == "cpu" and self.dtype == "bf16" and self.mode != "data" and self.engine != "predictor":
            raise ConfigError(f"--dtype bf16 on CPU runs on the predictor (--engine predictor: oneDNN's bfloat16 "
                              f"kernels); Paddle's eager CPU kernels have no bf16 convolution for --engine {self.engine}"
                              + (" or training" if self.mode == "train" else ""))
        if self.profile and (self.engine in ("predictor", "onnxruntime") or self.mode == "data"):
            raise ConfigError(f"--profile times the model's ops in eager or to_static mode; not --engine "
                              f"{self.engine if self.mode != 'data' else 'predictor'} (the runtime runs its ops "
                              f"itself) or --mode data")
        if self.engine == "predictor" and self.mode != "infer":
            raise ConfigError(f"--engine predictor runs inference only, not mode {self.mode!r}")
        if self.mode == "data" and self.engine != "dynamic":
            raise ConfigError("--mode data times the input pipeline; it has no engine (leave --engine dynamic)")
        return self

    def _validate_onnxruntime(self):
        """--engine onnxruntime (fp32, or int8: the export quantized dynamically) runs inference on CPU."""
        if self.dtype == "int8" and self.engine != "onnxruntime":
            raise ConfigError(f"--dtype int8 runs on onnxruntime (--engine onnxruntime: the model exported to ONNX "
                              f"and quantized dynamically), not --engine {self.engine}")
        if self.mode != "infer":
            raise ConfigError(f"--engine onnxruntime runs inference only, not mode {self.mode!r}")
        if self.dtype not in ("fp32", "int8"):
            raise ConfigError(f"--engine onnxruntime runs --dtype fp32 or int8, not {self.dtype}"
                              + (" (bf16 is the predictor's: --engine predictor)" if self.dtype == "bf16" else ""))
        if self.device != "cpu":
            raise ConfigError(f"--engine onnxruntime is measured on the CPU here: use --device cpu, not {self.device}")

    def vit_config(self):
        return get_model_config(self.model, **self.model_overrides).validate()

    def resolved_threads(self):
        return self.threads or os.cpu_count() or 1


# ---- FLOPs, memory, statistics -----------------------------------------------------------------

def analytic_flops_per_image(vit_config, mode="infer"):
    """Floating-point operations for one image: 2 x MACs of the forward pass, and 3 x that for a
    training step (forward + a backward pass of about twice its cost). None for mode ``data``."""
    if mode == "data":
        return None
    forward = 2 * vit_config.count_macs()
    return 3 * forward if mode == "train" else forward


def set_threads(threads):
    """Use `threads` CPU threads for Paddle's math library (MKL and its OpenMP pool) in this
    process (the PyTorch worker gets OMP_NUM_THREADS, MKL_NUM_THREADS and torch.set_num_threads)."""
    paddle.base.core.set_num_threads(threads)


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


# ---- what else ran on the machine while we timed -----------------------------------------------

# the benchmark warns when other processes (and other virtual machines, through steal) took more
# than BUSY_CORES cores, or BUSY_SHARE of all cores where that is more, on average while it timed
# (docs/benchmarks.md, "Machine and method")
BUSY_CORES = 0.25
BUSY_SHARE = 0.10
# the CPU times are counted in clock ticks (SC_CLK_TCK a second): over a shorter timing they say little
MIN_LOAD_SECONDS = 1.0
# /proc/stat's cpu lines: user nice system idle iowait irq softirq steal guest guest_nice (guest
# time is counted inside user and nice already)
_BUSY_FIELDS = (0, 1, 2, 5, 6)
_STEAL_FIELD = 7


def _clock_ticks(hz):
    return hz or os.sysconf("SC_CLK_TCK")


def read_cpu_times(path="/proc/stat", hz=None):
    """(busy seconds, steal seconds, number of CPUs) of all CPUs together since boot, from
    /proc/stat: busy = user + nice + system + irq + softirq (idle and I/O wait left out); steal =
    the time the hypervisor ran other virtual machines on this machine's CPUs."""
    with open(path) as stat:
        lines = stat.read().splitlines()
    fields = lines[0].split() if lines else []
    if not fields or fields[0] != "cpu":
        raise ValueError(f"{path}: the first line is not the all-CPU 'cpu' line")
    ticks = [int(value) for value in fields[1:]]
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    steal = ticks[_STEAL_FIELD] if len(ticks) > _STEAL_FIELD else 0
    hz = _clock_ticks(hz)
    return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / hz, steal / hz, cpus


def process_tree_cpu_seconds(root=None, proc="/proc", hz=None):
    """CPU seconds (user + system) of process `root` (default: this one) and of every live
    descendant, each with the time of the children it has waited for (cutime + cstime): the timm
    worker and the DataLoader workers while they run, and those already reaped inside the tree."""
    root = os.getpid() if root is None else root
    parents, ticks = {}, {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as stat:
                text = stat.read()
        except OSError:  # ended since the listing
            continue
        fields = text[text.rindex(")") + 1:].split()  # after "pid (name)": a name may hold spaces
        parents[int(name)] = int(fields[1])
        ticks[int(name)] = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    children = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / _clock_ticks(hz)


def sample_cpu(proc="/proc", root=None, hz=None, clock=time.monotonic):
    """One reading for `other_load`: the wall clock, the machine's busy and steal CPU seconds and
    this process tree's; None where there is no /proc (not Linux) or it cannot be read."""
    if not sys.platform.startswith("linux") and proc == "/proc":
        return None
    try:
        busy, steal, cpus = read_cpu_times(os.path.join(proc, "stat"), hz)
        own = process_tree_cpu_seconds(root, proc, hz)
    except (OSError, ValueError, IndexError):
        return None
    return {"time": clock(), "busy": busy, "steal": steal, "own": own, "cpus": cpus}


def other_load(before, after):
    """What the rest of the machine used between two `sample_cpu` readings, in cores on average:
    ``other_cores`` = (all CPUs' busy time - this process tree's CPU time) / wall time (not below
    0: the two are counted in clock ticks), ``steal_cores`` the same for other virtual machines,
    and whether their sum passes the threshold (``busy``). None without both readings; over less
    than MIN_LOAD_SECONDS only ``seconds`` and ``cpus``, the rest None (too short to measure)."""
    if before is None or after is None:
        return None
    seconds = after["time"] - before["time"]
    if seconds < MIN_LOAD_SECONDS:
        return {"other_cores": None, "steal_cores": None, "own_cores": None, "cpus": after["cpus"],
                "seconds": seconds, "threshold_cores": None, "busy": None}
    own = (after["own"] - before["own"]) / seconds
    others = max(0.0, (after["busy"] - before["busy"]) / seconds - own)
    steal = max(0.0, (after["steal"] - before["steal"]) / seconds)
    threshold = max(BUSY_CORES, BUSY_SHARE * after["cpus"])
    return {"other_cores": others, "steal_cores": steal, "own_cores": own, "cpus": after["cpus"],
            "seconds": seconds, "threshold_cores": threshold, "busy": others + steal > threshold}


def add_other_load(result, load):
    """`result`'s keys for `other_load`'s reading `load`: ``other_load_cores`` (None off Linux or
    over a timing too short to measure) and ``machine_load``, the reading itself."""
    result["other_load_cores"] = None if load is None else load["other_cores"]
    result["machine_load"] = load
    return result


def busy_warning(result):
    """The one line to print on stderr when the machine was busy while `result` was timed, else None."""
    load = result.get("machine_load")
    if not load or not load["busy"]:
        return None
    used = f"other processes used {load['other_cores']:.2f} of {load['cpus']} cores"
    if load["steal_cores"] >= 0.05:
        used += f" (and other virtual machines {load['steal_cores']:.2f})"
    figures = "the figures and the ratio are" if ("timm" in result or result.get("side_by_side")) else "the figures are"
    return (f"warning: the machine was busy: {used} during the timing, more than {load['threshold_cores']:.2f}; "
            f"{figures} not comparable (run again on a quiet machine)")


def format_other_load(result):
    """The report's line on the machine's other load, or None off Linux."""
    load = result.get("machine_load")
    if not load:
        return None
    if load["other_cores"] is None:
        return (f"other processes: not measured, the timing took {load['seconds']:.2f} s "
                f"(at least {MIN_LOAD_SECONDS:.0f} s is needed)")
    return (f"other processes used {load['other_cores']:.2f} of {load['cpus']} cores during the timing "
            f"(this run {load['own_cores']:.2f}, steal {load['steal_cores']:.2f}; busy above "
            f"{load['threshold_cores']:.2f})")


# ---- the Paddle subject ------------------------------------------------------------------------

class PaddleSubject:
    """The project's model (or data pipeline) set up for one mode and engine; `timed(n)` returns
    n per-iteration times in seconds."""

    def __init__(self, settings):
        self.settings = settings
        self.place = select_device(settings.device, "--device")
        self.gpu = self.place.startswith("gpu")
        paddle.seed(settings.seed)
        if settings.mode == "data":
            self._setup_data()
        else:
            self._setup_model()

    # -- set-up
    def _setup_model(self):
        settings = self.settings
        self.vit_config = settings.vit_config()
        model = ViT(self.vit_config)
        self.num_parameters = int(sum(parameter.numel() for parameter in model.parameters()))
        dtype = DTYPES[settings.dtype]
        config = self.vit_config
        shape = [settings.batch_size, config.in_channels, config.image_size, config.image_size]
        self.images = paddle.randn(shape, dtype="float32")
        self.labels = paddle.randint(0, max(config.num_classes, 1), [settings.batch_size], dtype="int64")
        self.autocast_dtype = None
        if settings.mode == "infer":
            model.eval()
            if settings.engine == "onnxruntime":  # exported in float32; int8 is the quantizer's, not model.to
                self._setup_onnxruntime(model)
                self.step = self._predictor_step
                return
            cpu_bf16 = not self.gpu and settings.engine == "predictor" and dtype == "bfloat16"
            if dtype != "float32" and not cpu_bf16:  # pure low-precision inference (weights and activations)
                model.to(dtype=dtype)
                self.images = self.images.astype(dtype)
            if settings.engine == "predictor":
                # on CPU bf16 is oneDNN's: the program is traced in float32, the predictor runs bf16 kernels
                self._setup_predictor(model, "float32" if cpu_bf16 else dtype, "bf16" if cpu_bf16 else "fp32")
            else:
                self.model = self._engine_model(model)
            self.step = self._infer_step if settings.engine != "predictor" else self._predictor_step
            return

        model.train()
        if dtype != "float32":
            if not self.gpu:
                raise ConfigError(f"--mode train --dtype {settings.dtype}: Paddle's mixed precision (autocast) "
                                  f"acts on GPU only; on CPU train in fp32")
            self.autocast_dtype = dtype
        self.optimizer_config = OptimizerConfig()
        self.optimizer = build_optimizer(model, self.optimizer_config, self.optimizer_config.lr)
        self.scaler = paddle.amp.GradScaler(init_loss_scaling=2.0 ** 16) if dtype == "float16" else None
        self.model = self._engine_model(model)
        self.batch_threads = self._batch_threads(model)
        self.step = self._train_step

    def _batch_threads(self, model):
        """The trainer's slices of the batch in threads (train.batch_threads), chosen as it chooses."""
        settings = self.settings
        threads, reason = plan_batch_threads(settings.batch_threads, model, self.place, True,
                                             eager=settings.engine == "dynamic", batch=settings.batch_size,
                                             math_threads=settings.resolved_threads())
        if threads > 1 and reason:
            raise ConfigError(f"--batch-threads {threads}: the step cannot be split here: {reason}")
        self.batch_threads_used = threads
        return BatchThreads(model, threads, settings.resolved_threads()) if threads > 1 else None

    def _engine_model(self, model):
        """`model` as engine dynamic or to_static runs it, with the variants the tools use."""
        use_cpu_fast_paths(model)
        if self.settings.engine == "to_static":
            return paddle.jit.to_static(use_traceable_variants(model), full_graph=True)
        return model

    def _setup_predictor(self, model, dtype, precision="fp32"):
        """Run the model as tools/eval.py and tools/predict.py run an export: traced once and
        loaded by `paddle_vit.deploy.inference.PaddlePredictor` (oneDNN on CPU unless `settings.onednn`
        is off; `precision` bf16 for its bfloat16 kernels)."""

        options = InferenceOptions(device="gpu" if self.gpu else "cpu", mkldnn=self.settings.onednn,
                                   cpu_threads=self.settings.resolved_threads(), precision=precision).validate()
        self.runner = engine_for_model(model, "predictor", options=options, dtype=dtype)
        self.host_images = self.images.numpy()

    def _setup_onnxruntime(self, model):
        """Run the model as eval and predict run it with engine onnxruntime: exported to ONNX on the
        fly (quantized dynamically for --dtype int8) and run by an `OnnxSession`."""
        self.runner = engine_for_model(model, "onnxruntime", self.settings.dtype,
                                       threads=self.settings.resolved_threads())
        self.onnx_report = self.runner.report
        self.host_images = self.images.numpy()

    def _setup_data(self):
        settings = self.settings
        self.vit_config = settings.vit_config()
        self.num_parameters = None
        data_config = settings.data_config or DataConfig(dataset="synthetic")
        if data_config.dataset == "synthetic":
            needed = (settings.warmup + settings.iters * settings.rounds + 1) * settings.batch_size
            data_config = dataclasses.replace(data_config,
                                              synthetic_train_size=max(data_config.synthetic_train_size, needed))
        self.data_config = data_config
        train_set, _, _ = build_datasets(data_config, self.vit_config.image_size, seed=settings.seed)
        if len(train_set) < settings.batch_size:  # drop_last would leave no batch at all
            raise ConfigError(f"--batch-size {settings.batch_size} is larger than the {len(train_set)} training images "
                              f"of data set {data_config.dataset}; give at most {len(train_set)}")
        self.loader = build_dataloader(train_set, settings.batch_size, shuffle=True, drop_last=True,
                                       num_workers=settings.num_workers, seed=settings.seed, distributed=False)
        self.epoch, self.batches = 0, iter(self.loader)
        self.step = self._data_step

    # -- one iteration of each kind
    def _infer_step(self):
        with paddle.no_grad():
            return self.model(self.images)

    def _predictor_step(self):
        return self.runner(self.host_images)

    def _train_step(self):
        # the trainer's step (engine/step.py) without its finite check: the loss is not read back
        loss = train_step.sliced_forward_loss(self._loss_of, self.model, self.images, self.labels, self.batch_threads)
        train_step.backward(loss, self.scaler, 1, self.batch_threads)
        train_step.apply_update(self.optimizer, self.scaler, self.batch_threads)  # frees the gradients, as torch
        return loss

    def _loss_of(self, model, images, labels, first):
        return train_step.forward_loss(model, images, labels, self._autocast)

    def _autocast(self):
        return train_step.autocast(self.autocast_dtype, "O1")

    def _data_step(self):
        try:
            return next(self.batches)
        except StopIteration:  # a new epoch (worker start-up included in this iteration)
            self.epoch += 1
            self.loader.set_epoch(self.epoch)
            self.batches = iter(self.loader)
            return next(self.batches)

    # -- timing
    def synchronize(self):
        if self.gpu:
            paddle.device.synchronize()

    def timed(self, iterations):
        if not self.gpu and self.settings.engine in ("dynamic", "to_static"):
            # a paddle.inference predictor run in this process (side by side, the limits) leaves the math
            # library on its own thread count, which slows eager (docs/benchmarks.md, "ONNX Runtime and int8")
            set_threads(self.settings.resolved_threads())
        return time_iterations(self.step, self.synchronize, iterations)

    def gpu_max_allocated_mb(self):
        if not self.gpu:
            return None
        return paddle.device.cuda.max_memory_allocated() / 2 ** 20

    def close(self):
        if getattr(self, "batches", None) is not None:
            self.batches = None  # ends the workers of an unfinished epoch
        if getattr(self, "batch_threads", None) is not None:
            self.batch_threads.close()


# ---- the timm reference, in another process ----------------------------------------------------

class ReferenceProcess:
    """timm's model of the same configuration, timed in `torch_python` by `worker_script`
    (`TIMM_WORKER`), one round per `timed(n)` call."""

    def __init__(self, settings, vit_config, torch_python, worker_script=TIMM_WORKER):
        if not torch_python or not os.path.exists(torch_python):
            raise ConfigError(f"--compare timm needs a Python with torch and timm installed; --torch-python "
                              f"{torch_python!r} does not exist (pass --torch-python /path/to/venv/bin/python "
                              f"or set PADDLE_VIT_TORCH_PYTHON)")
        if not os.path.isfile(worker_script):
            raise ConfigError(f"--compare timm: the worker script {worker_script} is missing (reinstall paddle-vit)")
        self.python = torch_python
        request = {"mode": settings.mode, "dtype": settings.dtype, "device": settings.device,
                   "batch_size": settings.batch_size, "warmup": settings.warmup,
                   "threads": settings.resolved_threads(), "seed": settings.seed,
                   "vit": dataclasses.asdict(vit_config), "optimizer": None}
        if settings.mode == "train":
            request["optimizer"] = dataclasses.asdict(OptimizerConfig())
        # started as the user started us: without the tcmalloc our relaunch added (runtime.py)
        environment = dict(runtime.environment_without_relaunch(), OMP_NUM_THREADS=str(settings.resolved_threads()),
                           MKL_NUM_THREADS=str(settings.resolved_threads()))
        self.process = subprocess.Popen([torch_python, worker_script, "benchmark", json.dumps(request)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=environment)
        ready = self._read()
        self.num_parameters = ready["num_parameters"]
        self.threads = ready["threads"]
        self.versions = ready["versions"]
        self.peak_rss_mb, self.gpu_max_allocated_mb = None, None

    def _read(self):
        for line in self.process.stdout:
            if line.startswith(PROTOCOL_PREFIX):
                message = json.loads(line[len(PROTOCOL_PREFIX):])
                if "error" in message:
                    self.close()
                    raise ConfigError(f"--compare timm: the PyTorch side failed: {message['error']}"
                                      f"{self._hint(message['error'])}")
                return message
        self.process.wait()
        stderr = self.process.stderr.read().strip().splitlines()
        last = stderr[-1] if stderr else f"exit code {self.process.returncode}"
        raise ConfigError(f"--compare timm: the PyTorch worker stopped: {last}{self._hint(last)}")

    def _hint(self, message):
        if "No module named" in message:
            return f" in {self.python} (pass --torch-python PATH to a Python with torch and timm installed)"
        return ""

    def timed(self, iterations):
        self.process.stdin.write(f"run {iterations}\n")
        self.process.stdin.flush()
        return self._read()["seconds"]

    def profiled(self, iterations):
        """Where `iterations` more steps of timm's time goes, op by op (torch.profiler)."""
        self.process.stdin.write(f"profile {iterations}\n")
        self.process.stdin.flush()
        return self._read()["operators"]

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.flush()
                final = self._read()
                self.peak_rss_mb = final["peak_rss_mb"]
                self.gpu_max_allocated_mb = final["gpu_max_allocated_mb"]
            except (OSError, ValueError, PaddleVitError):
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ---- the whole run -----------------------------------------------------------------------------

def run_benchmark(settings, compare=None, torch_python=None, worker_script=TIMM_WORKER):
    """Time `settings` (and, with ``compare="timm"``, timm's twin in `torch_python`, A B A B);
    returns a JSON-ready dict (see `format_report` for what it holds)."""
    settings.validate()
    if compare is not None:
        check_choice("--compare", compare, REFERENCES)
    if compare and settings.mode == "data":
        raise ConfigError("--compare timm compares models; mode data times only the project's input pipeline")
    threads = settings.resolved_threads()
    set_threads(threads)
    load_before = os.getloadavg()[0]
    vit_config = settings.vit_config()
    reference = None
    if compare:  # start it first: its set-up overlaps nothing we time
        reference = ReferenceProcess(settings, vit_config, torch_python, worker_script)
    subject, operators, reference_operators = None, None, None
    try:
        subject = PaddleSubject(settings)
        subject.timed(settings.warmup)
        own_rounds, reference_rounds = [], []
        before = sample_cpu()
        for _ in range(settings.rounds):
            own_rounds.append(subject.timed(settings.iters))
            if reference is not None:
                reference_rounds.append(reference.timed(settings.iters))
        load = other_load(before, sample_cpu())
        operators = profile_operators(subject, settings.iters) if settings.profile else None
        if settings.profile and reference is not None:
            reference_operators = reference.profiled(settings.iters)
    finally:
        if subject is not None:
            subject.close()
        if reference is not None:
            reference.close()

    load_after = os.getloadavg()[0]
    flops = analytic_flops_per_image(vit_config, settings.mode)
    own = summarise([s for r in own_rounds for s in r], settings.batch_size, flops, settings.peak_tflops)
    own["peak_rss_mb"] = peak_rss_mb()
    if settings.mode == "data" and settings.num_workers > 0:
        own["workers_peak_rss_mb"] = peak_rss_mb(children=True)
        own["images_per_sec_per_worker"] = own["images_per_sec"]["overall"] / settings.num_workers
    own["gpu_max_allocated_mb"] = subject.gpu_max_allocated_mb()
    result = {
        "model": settings.model, "mode": settings.mode, "engine": settings.engine, "dtype": settings.dtype,
        "device": subject.place, "batch_size": settings.batch_size, "image_size": vit_config.image_size,
        "threads": threads, "batch_threads": getattr(subject, "batch_threads_used", None), "warmup": settings.warmup, "iters": settings.iters, "rounds": settings.rounds,
        "num_parameters": subject.num_parameters, "flops_per_image": flops, "peak_tflops": settings.peak_tflops,
        "vit_config": dataclasses.asdict(vit_config),
        "paddle": own,
        "environment": environment_report(),
        "load_average_1min": [load_before, load_after],  # this run's processes included
    }
    add_other_load(result, load)
    if operators is not None:
        result["operators"] = operators
    if settings.engine == "predictor":
        result["onednn"] = settings.onednn
    if settings.engine == "onnxruntime":
        result["onnx"] = onnx_summary(subject.onnx_report)
    if settings.mode == "data":
        result["dataset"] = subject.data_config.dataset
        result["num_workers"] = settings.num_workers
    if reference is not None:
        theirs = summarise([s for r in reference_rounds for s in r], settings.batch_size, flops,
                           settings.peak_tflops)
        theirs.update(peak_rss_mb=reference.peak_rss_mb, gpu_max_allocated_mb=reference.gpu_max_allocated_mb,
                      num_parameters=reference.num_parameters, threads=reference.threads,
                      engine="eager", **reference.versions)
        ratio, per_round = paired_ratio(own_rounds, reference_rounds)
        result["timm"] = theirs
        result["ratio"] = ratio
        result["ratio_per_round"] = per_round
        if reference_operators is not None:
            result["timm_operators"] = reference_operators
    return result


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


def profile_operators(subject, iterations):
    """Where the time of `iterations` more steps goes, op by op, from `paddle.profiler` (after
    the timed rounds, so the profiler costs them nothing): [{"name", "calls", "ms_per_step",
    "share"}], largest first. Each op's self time, without the ops it calls (a backward node runs
    matmuls of its own), so that the rows add up to the step and no time is counted twice, as
    timm's side counts. Eager and to_static steps only (the predictor runs its ops inside
    paddle.inference, which the profiler does not see op by op)."""
    with profiler.Profiler(targets=[profiler.ProfilerTarget.CPU], on_trace_ready=lambda prof: None) as prof:
        subject.timed(iterations)
    events = {}
    for root in prof.profiler_result.get_data().values():  # one tree of host events per thread
        for name, self_ns in operator_self_times(root):
            calls, total = events.get(name, (0, 0))
            events[name] = (calls + 1, total + self_ns)
    return operator_rows(events, iterations)


def operator_self_times(node):
    """(name, self time in ns) of every operator event under `node`: its span less the spans of
    the operators nearest below it (through events of other kinds)."""
    def operators_below(event):
        for child in event.children_node:
            if child.type == profiler.TracerEventType.Operator:
                yield child
            else:
                yield from operators_below(child)

    stack = list(operators_below(node))
    while stack:
        operator = stack.pop()
        inner = list(operators_below(operator))
        yield operator.name, (operator.end_ns - operator.start_ns) - sum(op.end_ns - op.start_ns for op in inner)
        stack.extend(inner)


# ---- the CPU's limits: one large matrix product --------------------------------------------------

class _MatrixProduct(paddle.nn.Layer):
    """x [M, K] -> x @ w [M, N]: the one op whose speed bounds a Transformer's."""

    def __init__(self, k, n):
        super().__init__()
        self.weight = self.create_parameter([k, n])

    def forward(self, x):
        return paddle.matmul(x, self.weight)


def _best_seconds(call, iterations):
    """The fastest of `iterations` timed calls: a limit is the best the machine gives, and on a
    shared machine only the best is steady from run to run (docs/benchmarks.md, "ONNX Runtime and int8")."""
    call()  # warm-up: oneDNN picks and caches its kernel on the first call
    return min(time_iterations(call, lambda: None, iterations))


def gemm_limits(size=2048, iterations=10, threads=None):
    """GFLOP/s of one [size, size] x [size, size] matrix product, the ceiling every path's model
    FLOP/s is measured against: Paddle eager fp32 (MKL), the predictor in fp32 (oneDNN) and, on a
    CPU with AVX512-BF16 or AMX, the predictor in bf16 (oneDNN). A JSON-ready dict."""
    threads = threads or os.cpu_count() or 1
    set_threads(threads)
    paddle.set_device("cpu")
    flops = 2.0 * size ** 3
    x = paddle.randn([size, size])
    layer = _MatrixProduct(size, size)
    results = {"size": size, "threads": threads, "iterations": iterations}
    before = sample_cpu()
    with paddle.no_grad():
        results["fp32_eager_gflops"] = flops / _best_seconds(lambda: float(layer(x)[0, 0]), iterations) / 1e9
    host = x.numpy()
    supported, what = cpu_bf16_support()
    with tempfile.TemporaryDirectory(prefix="paddle_vit_gemm_") as folder:
        prefix = os.path.join(folder, "gemm")
        spec = paddle.static.InputSpec([None, size], "float32", name="x")
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=[spec], full_graph=True), prefix)
        model_file = prefix + (".json" if os.path.exists(prefix + ".json") else ".pdmodel")
        for precision in ("fp32", "bf16"):
            key = f"{precision}_predictor_gflops"
            if precision == "bf16" and not supported:
                results[key], results["bf16_missing"] = None, what
                continue
            runner = PaddlePredictor(model_file, prefix + ".pdiparams",
                                     InferenceOptions(precision=precision, cpu_threads=threads).validate())
            results[key] = flops / _best_seconds(lambda: runner(host), iterations) / 1e9
    results["bf16_cpu"] = what
    results.update(onnxruntime_gemm_limits(size, iterations, threads))
    return add_other_load(results, other_load(before, sample_cpu()))


def _matrix_product_graph(size, int8):
    """An ONNX graph of x [size, size] @ w [size, size] with w an initializer: float32 MatMul, or
    for int8 MatMulInteger of uint8 activations and int8 weights (int32 out), the kernel that
    onnxruntime's dynamically quantized MatMuls run."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if int8:
        weight = numpy_helper.from_array(rng.integers(-64, 64, (size, size), dtype=np.int8), "w")
        node = helper.make_node("MatMulInteger", ["x", "w"], ["y"])
        kinds = (TensorProto.UINT8, TensorProto.INT32)
    else:
        weight = numpy_helper.from_array(rng.standard_normal((size, size), dtype=np.float32), "w")
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        kinds = (TensorProto.FLOAT, TensorProto.FLOAT)
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", kinds[0], [size, size])],
                              [helper.make_tensor_value_info("y", kinds[1], [size, size])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def onnxruntime_gemm_limits(size, iterations, threads):
    """onnxruntime's fp32 GFLOP/s and int8 GOP/s (MatMulInteger, uint8 x int8) on one [size, size]
    square product with the weight an initializer, as a quantized model's products run; None
    (with the reason) where onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError as error:
        return {"fp32_onnxruntime_gflops": None, "int8_onnxruntime_gops": None, "onnxruntime_missing": str(error)}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    operations = 2.0 * size ** 3
    results = {}
    rng = np.random.default_rng(1)
    for int8, key in ((False, "fp32_onnxruntime_gflops"), (True, "int8_onnxruntime_gops")):
        session = onnxruntime.InferenceSession(_matrix_product_graph(size, int8), options,
                                               providers=["CPUExecutionProvider"])
        x = (rng.integers(0, 256, (size, size), dtype=np.uint8) if int8
             else rng.standard_normal((size, size), dtype=np.float32))
        results[key] = operations / _best_seconds(lambda: session.run(None, {"x": x}), iterations) / 1e9
    return results


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


def environment_report():
    """The versions and switches that change the numbers."""
    flags = paddle.get_flags(["FLAGS_use_stride_kernel"])
    return {"paddle": paddle.__version__, "numpy": np.__version__, "cpu_count": os.cpu_count(),
            "MKL_DEBUG_CPU_TYPE": os.environ.get("MKL_DEBUG_CPU_TYPE"),
            "allocator": runtime.active_allocator(), "LD_PRELOAD": os.environ.get("LD_PRELOAD"),
            "mallopt": runtime.APPLIED.get("mallopt"),
            "FLAGS_use_stride_kernel": flags["FLAGS_use_stride_kernel"]}


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


# ---- every CPU inference path side by side -------------------------------------------------------

# (row name, framework, engine, dtype) in the order of the table; bf16 only where the CPU has it
SIDE_BY_SIDE_PATHS = (
    ("timm fp32", "timm", "eager", "fp32"),
    ("timm int8", "timm", "eager", "int8"),
    ("paddle eager fp32", "paddle", "dynamic", "fp32"),
    ("predictor fp32", "paddle", "predictor", "fp32"),
    ("predictor bf16", "paddle", "predictor", "bf16"),
    ("onnxruntime fp32", "paddle", "onnxruntime", "fp32"),
    ("onnxruntime int8", "paddle", "onnxruntime", "int8"),
)
LIMIT_KEYS = {"fp32": ("fp32_eager_gflops", "fp32_predictor_gflops", "fp32_onnxruntime_gflops"),
              "bf16": ("bf16_predictor_gflops",), "int8": ("int8_onnxruntime_gops",)}


def machine_limit(limits, dtype):
    """The machine's best measured GFLOP/s (GOP/s for int8) for `dtype` in `gemm_limits`' result."""
    values = [limits.get(key) for key in LIMIT_KEYS[dtype] if limits.get(key)]
    return max(values) if values else None


def run_side_by_side(settings, torch_python, worker_script=TIMM_WORKER, limits=None):
    """Every CPU inference path of `settings`' model timed in turns, round by round (timm fp32 and
    int8 in their own PyTorch processes, paddle eager, the predictor in fp32 and bf16 where the
    CPU has it, onnxruntime fp32 and int8), each row with its GFLOP/s against the machine's limit
    for its dtype (`gemm_limits`, measured first unless given) and its paired ratios to timm fp32
    and to timm int8.
    A JSON-ready dict."""
    settings = dataclasses.replace(settings, mode="infer", engine="dynamic", dtype="fp32").validate()
    if settings.device != "cpu":
        raise ConfigError("--side-by-side compares the CPU inference paths: use --device cpu")
    threads = settings.resolved_threads()
    set_threads(threads)
    if limits is None:
        limits = gemm_limits(threads=threads, iterations=2 * settings.iters)
    bf16_supported, _ = cpu_bf16_support()
    vit_config = settings.vit_config()
    flops = analytic_flops_per_image(vit_config, "infer")
    load_before = os.getloadavg()[0]
    paths, subjects = [], []
    try:
        for name, framework, engine, dtype in SIDE_BY_SIDE_PATHS:
            if dtype == "bf16" and not bf16_supported:
                continue
            path_settings = dataclasses.replace(settings, engine=engine if framework == "paddle" else "dynamic",
                                                dtype=dtype)
            if framework == "timm":
                subject = ReferenceProcess(path_settings, vit_config, torch_python, worker_script)
            else:
                subject = PaddleSubject(path_settings)
                subject.timed(settings.warmup)
            paths.append({"name": name, "framework": framework, "engine": engine, "dtype": dtype})
            subjects.append(subject)
        rounds = [[] for _ in subjects]
        before = sample_cpu()
        for _ in range(settings.rounds):
            for index, subject in enumerate(subjects):
                rounds[index].append(subject.timed(settings.iters))
        load = other_load(before, sample_cpu())
    finally:
        for subject in subjects:
            subject.close()
    reference = rounds[0]  # timm fp32
    timm_int8 = rounds[1]  # the int8 a PyTorch user has
    for path, subject, own in zip(paths, subjects, rounds):
        path.update(summarise([s for r in own for s in r], settings.batch_size, flops))
        path["gflops"] = path.pop("tflops") * 1000.0
        path.pop("mfu", None)
        limit = machine_limit(limits, path["dtype"])
        path["limit_gflops"] = limit
        path["fraction_of_limit"] = path["gflops"] / limit if limit else None
        path["vs_timm_fp32"], path["vs_timm_fp32_per_round"] = paired_ratio(own, reference)
        path["vs_timm_int8"], _ = paired_ratio(own, timm_int8)
        if path["engine"] == "onnxruntime":
            path["onnx"] = onnx_summary(subject.onnx_report)
    return add_other_load({
        "model": settings.model, "mode": "infer", "side_by_side": True, "device": "cpu",
        "batch_size": settings.batch_size, "image_size": vit_config.image_size, "threads": threads,
        "warmup": settings.warmup, "iters": settings.iters, "rounds": settings.rounds,
        "flops_per_image": flops, "vit_config": dataclasses.asdict(vit_config), "limits": limits,
        "paths": paths, "versions": subjects[0].versions, "environment": environment_report(),
        "load_average_1min": [load_before, os.getloadavg()[0]]}, load)


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
    lines.append("limits (GFLOP/s, {0}x{0} product): fp32 {1}, bf16 {2}, int8 {3} GOP/s".format(
        limits["size"], *(f"{value:.1f}" if value else "n/a"
                          for value in (machine_limit(limits, "fp32"), machine_limit(limits, "bf16"),
                                        machine_limit(limits, "int8")))))
    lines.append("load average (1 min) before / after: {:.2f} / {:.2f}".format(*result["load_average_1min"]))
    if format_other_load(result):
        lines.append(format_other_load(result))
    return "\n".join(lines)

"""Throughput of a ViT: inference, a training step, or the input pipeline; optionally side by
side with timm's model of the same configuration running in another Python (PyTorch).

    from paddle_vit.bench import BenchmarkSettings, format_report, run_benchmark

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

The package, a module per job: settings.py (`BenchmarkSettings` and their checks), subject.py
(the Paddle side), reference.py and timm_worker.py (the timm side: the process this one drives,
and the script it runs in a Python with torch, standard library only at import), load.py (the
machine's other load), summary.py (the figures of a result), profiling.py (op by op),
limits.py (the matrix-product limits), run.py (`run_benchmark`, `run_side_by_side`) and
report.py (the lines printed). Their names are the package's too, imported on first use, so
that `paddle_vit.bench.timm_worker` imports no Paddle.
"""
from ..lazy import lazy_names

# the module of this package that defines each public name, imported on first use (PEP 562)
_MODULES = {
    "settings": ("MODES", "ENGINES", "DTYPES", "DEVICES", "REFERENCES", "BenchmarkSettings", "set_threads"),
    "load": ("BUSY_CORES", "BUSY_SHARE", "MIN_LOAD_SECONDS", "read_cpu_times", "process_tree_cpu_seconds",
             "sample_cpu", "other_load", "add_other_load", "busy_warning", "format_other_load"),
    "summary": ("analytic_flops_per_image", "summarise", "paired_ratio", "onnx_summary", "environment_report"),
    "subject": ("PaddleSubject",),
    "reference": ("TIMM_WORKER", "ReferenceProcess"),
    "profiling": ("profile_operators", "operator_self_times"),
    "limits": ("gemm_limits", "onnxruntime_gemm_limits", "LIMIT_KEYS", "machine_limit"),
    "run": ("run_benchmark", "SIDE_BY_SIDE_PATHS", "run_side_by_side"),
    "report": ("format_report", "format_side_by_side", "format_gemm"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

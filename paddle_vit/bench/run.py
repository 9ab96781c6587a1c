"""The two runs: one benchmark (the subject, with timm's twin in turns where asked) and every CPU
inference path side by side; each returns a JSON-ready dict (the package's docstring says how
they time)."""
import dataclasses
import os

from ..deploy.inference import cpu_bf16_support
from ..errors import ConfigError, check_choice
from .limits import gemm_limits, machine_limit
from .load import add_other_load, other_load, sample_cpu
from .profiling import profile_operators
from .reference import TIMM_WORKER, ReferenceProcess
from .settings import REFERENCES, set_threads
from .subject import PaddleSubject
from .summary import analytic_flops_per_image, environment_report, onnx_summary, paired_ratio, summarise
from .timm_worker import peak_rss_mb


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
            if framework == "timm" and subject.versions.get("quantized_engine"):  # int8: the fastest, timed first
                paths[-1]["quantized_engine"] = subject.versions["quantized_engine"]
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

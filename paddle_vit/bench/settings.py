"""What a benchmark times (`BenchmarkSettings`, checked by its `validate`), the values its
options take, and the thread count applied to Paddle's math library."""
import dataclasses
import os
from typing import Optional

import paddle

from .. import runtime
from ..errors import ConfigError, check_choice
from ..models import get_model_config


MODES = ("infer", "train", "data")
ENGINES = ("dynamic", "to_static", "predictor", "onnxruntime")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}
DEVICES = ("cpu", "gpu", "auto")
REFERENCES = ("timm",)


@dataclasses.dataclass
class BenchmarkSettings:
    """What to time (see the package's docstring, bench/__init__.py).

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


def set_threads(threads):
    """Use `threads` CPU threads for Paddle's math library (MKL and its OpenMP pool) in this
    process (the PyTorch worker gets OMP_NUM_THREADS, MKL_NUM_THREADS and torch.set_num_threads)."""
    paddle.base.core.set_num_threads(threads)

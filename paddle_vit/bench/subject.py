"""The Paddle side of the benchmark: the project's model (or input pipeline) set up for one mode and
engine, timed an iteration at a time."""
import dataclasses

import paddle

from ..config import OptimizerConfig
from ..data import DataConfig, build_dataloader, build_datasets
from ..deploy.inference import InferenceOptions, engine_for_model
from ..deploy.tracing import to_static_graph
from ..device import select_device
from ..engine import step as train_step
from ..engine.optim import build_optimizer
from ..errors import ConfigError
from ..models import ViT
from ..variants import use_cpu_fast_paths, use_traceable_variants
from ..variants.batch_threads import BatchThreads, plan_batch_threads
from .settings import DTYPES, set_threads
from .timm_worker import time_iterations


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
            return to_static_graph(use_traceable_variants(model))
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

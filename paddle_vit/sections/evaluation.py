"""The eval section of a recipe: how a model is evaluated, in training and by tools/eval.py."""
import dataclasses
from typing import List

from ..checks import at_least, check_settings, one_of, setting
from ..errors import ConfigError

EVAL_ENGINES = ("auto", "predictor", "dynamic", "to_static", "onnxruntime")
EVAL_PRECISIONS = ("fp32", "bf16", "int8")


def _shots(key, value):
    if not value or min(value) < 1 or len(set(value)) != len(value):
        raise ConfigError(f"{key} must be a non-empty list of different positive integers, got {value!r}")


@dataclasses.dataclass
class EvalConfig:
    """Evaluation: batch_size per device; every `interval` epochs during training;
    confusion_matrix: also write confusion_matrix_<weights>.png (tools/eval.py), in the run folder
    the weights belong to (else train.output_dir's recipe folder);
    attention_map_interval: every this many epochs, log the attention rollout of the first
    validation image to VisualDL's image tab (0: never);
    engine: how tools/eval.py runs the model: ``auto`` (the engine measured fastest on this
    device and kind of CPU, paddle_vit/deploy/engine_choice.py: onnxruntime on AVX2 CPUs when
    the onnx extra is installed, else the predictor; eval says which it took), ``predictor``
    (the model traced once and run by paddle.inference, with oneDNN on CPU), ``dynamic``
    (eager, as during training), ``to_static`` (a paddle.jit.to_static graph) or ``onnxruntime``
    (the model exported to ONNX on the fly and run by ONNX Runtime with its fused attention;
    needs the onnx extra). The evaluation during training always runs the training model eagerly;
    precision: ``fp32``, ``bf16`` (the predictor's oneDNN bfloat16 kernels, on a CPU with
    AVX512-BF16 or AMX: about 2x faster, top-1 within a fraction of a point, docs/benchmarks.md)
    or ``int8`` (engine onnxruntime: the export quantized dynamically, int8 weights per channel,
    on any x86-64 CPU; docs/deployment.md);
    fewshot_interval: every this many epochs (and after the last), the few-shot linear accuracy of the frozen
    representation (the paper's second metric, paddle_vit/fewshot.py): the training split
    (without augmentation) is the pool, the validation split the test; logged as
    ``fewshot/<k>shot`` (the mean over the seeds) to VisualDL and ``fewshot_<k>shot`` in
    metrics.jsonl (0: never); fewshot_shots: the shots per class; fewshot_l2_reg: the ridge
    penalty (big_vision's 1024); fewshot_seeds: how many draws (seeds 0 .. n-1). tools/eval.py
    --protocol fewshot takes the last three as its defaults."""
    batch_size: int = setting(128, at_least(1))
    interval: int = setting(1, at_least(1))
    confusion_matrix: bool = False
    attention_map_interval: int = setting(0, at_least(0))
    engine: str = setting("auto", one_of(EVAL_ENGINES))
    precision: str = setting("fp32", one_of(EVAL_PRECISIONS))
    fewshot_interval: int = setting(0, at_least(0))
    fewshot_shots: List[int] = setting([1, 5, 10, 25], _shots)
    fewshot_l2_reg: float = setting(1024.0, at_least(0.0))
    fewshot_seeds: int = setting(3, at_least(1))

    def validate(self):
        """Raise ConfigError, one line naming the key, for a value out of its range."""
        check_settings(self, "eval")
        return self

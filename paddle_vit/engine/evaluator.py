"""Evaluation: top-1, top-5, loss, per-class accuracy and the confusion matrix.

With several processes each rank evaluates its shard; the logits and labels are gathered in
rank order and the padding the sampler added (so that every rank gets as many batches) is
trimmed before anything is counted.
"""
import logging

import numpy as np
import paddle
import paddle.distributed as dist

from ..data import build_dataloader, build_datasets
from ..deploy.engine_choice import default_engine
from ..deploy.inference import EngineModel, engine_for_model
from ..deploy.tracing import to_static_graph
from ..device import init_distributed, select_device
from ..errors import ConfigError
from ..factory import check_fits_data, eval_preprocess, model_for_evaluation
from ..variants import use_cpu_fast_paths, use_traceable_variants
from ..viz import confusion_matrix_figure, save_figure
from ..weights.source import resolve_weights

logger = logging.getLogger("paddle_vit")


@paddle.no_grad()
def predict_logits(model, loader, autocast=None):
    """Run `model` over `loader`; returns (logits [M, K] float32, labels [M]) of this rank."""
    model.eval()
    all_logits, all_labels = [], []
    for images, labels in loader:
        if autocast is not None:
            with autocast():
                logits = model(images)
        else:
            logits = model(images)
        all_logits.append(logits.astype("float32"))
        all_labels.append(labels.reshape([-1]).astype("int64"))
    return paddle.concat(all_logits), paddle.concat(all_labels)


def gather_across_ranks(tensor):
    """Concatenate a same-shaped tensor from every rank, in rank order."""
    if dist.get_world_size() <= 1:
        return tensor
    parts = []
    dist.all_gather(parts, tensor)
    return paddle.concat(parts)


def unpad(array, num_samples, world_size, per_rank):
    """Undo the distributed sampler's padding.

    The sampler pads the index list to `world_size * per_rank` by repeating its head and gives
    rank r the contiguous slice [r * per_rank, (r + 1) * per_rank); gathered in rank order the
    rows are therefore the padded list itself, and its first `num_samples` rows are the data set.
    """
    assert len(array) == world_size * per_rank, (len(array), world_size, per_rank)
    return array[:num_samples]


def classification_metrics(logits, labels, num_classes):
    """Top-1, top-5, mean cross-entropy, per-class accuracy and confusion matrix from numpy arrays;
    a negative label (an unreadable validation file's slot, data.imagefolder.MASKED_LABEL) is
    left out."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    scored = labels >= 0
    logits, labels = logits[scored], labels[scored]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-log_probs[np.arange(len(labels)), labels].mean())
    ranking = np.argsort(-logits, axis=1, kind="stable")
    top1 = float((ranking[:, 0] == labels).mean())
    top5 = float((ranking[:, :min(5, logits.shape[1])] == labels[:, None]).any(axis=1).mean())
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(confusion, (labels, ranking[:, 0]), 1)
    per_class_total = confusion.sum(axis=1)
    per_class = np.where(per_class_total > 0, np.diag(confusion) / np.maximum(per_class_total, 1), np.nan)
    return {"top1": top1, "top5": top5, "loss": loss, "num_samples": int(len(labels)),
            "per_class_accuracy": per_class.tolist(), "confusion_matrix": confusion.tolist()}


def evaluate(model, loader, num_classes, autocast=None):
    """Metrics of `model` on the whole data set behind `loader` (every rank gets the same dict)."""
    logits, labels = predict_logits(model, loader, autocast)
    logits, labels = gather_across_ranks(logits), gather_across_ranks(labels)
    logits, labels = logits.numpy(), labels.numpy()
    world = dist.get_world_size()
    if world > 1:
        logits = unpad(logits, loader.num_samples, world, len(logits) // world)
        labels = unpad(labels, loader.num_samples, world, len(labels) // world)
    return classification_metrics(logits, labels, num_classes)


def save_confusion_matrix_png(confusion, class_names, path):
    """Draw the confusion matrix (rows: true class, columns: predicted) to `path`."""
    save_figure(confusion_matrix_figure(confusion, class_names), path, dpi=120)


# the engine each low precision runs on: oneDNN's bf16 kernels, onnxruntime's int8 quantized graph
PRECISION_ENGINES = {"bf16": ("predictor", "the predictor"), "int8": ("onnxruntime", "onnxruntime")}


def resolve_engine(engine, precision="fp32", place="cpu"):
    """(the engine to run, why) for `eval.engine` `engine`: itself, or for "auto" the engine
    measured fastest on this device and kind of CPU (`paddle_vit.deploy.engine_choice`)."""
    if engine != "auto":
        return engine, "as configured"
    return default_engine("cpu" if place == "cpu" else "gpu", precision)


def model_for_engine(model, engine, precision="fp32"):
    """`model` as `eval.engine` runs it: itself (dynamic), a to_static graph, a predictor (in
    `precision`: fp32, or bf16 through oneDNN on a CPU that has it) or an onnxruntime session
    over the model exported on the fly (fp32, or int8: the export quantized dynamically)."""
    wanted, name = PRECISION_ENGINES.get(precision, (None, None))
    if wanted is not None and engine != wanted:
        raise ConfigError(f"eval.precision={precision} runs on {name} (eval.engine={wanted}), not eval.engine={engine}"
                          + (f": Paddle's eager CPU kernels have no {precision} convolution"
                             if engine in ("dynamic", "to_static") else ""))
    if engine == "to_static":
        return to_static_graph(use_traceable_variants(model))
    if engine in ("predictor", "onnxruntime"):
        return EngineModel(engine_for_model(model, engine, precision))
    return model


def run_evaluation(config, weights, use_ema=False, chosen_data_keys=None):
    """Evaluate `weights` (a `WeightsSource`, or a path it is resolved from) on the validation
    split of `config.data`; returns the metrics dict (plus `class_names` and `precision`).

    The images are fed as the checkpoint's own pipeline feeds them where it implies one (timm's
    pretrained_cfg, ...; `paddle_vit.factory.eval_preprocess`), each data key in
    `chosen_data_keys` ({key: where the user set it}) replacing its value; else by the
    recipe's eval transform."""

    place = select_device(config.train.device)
    init_distributed()
    source = resolve_weights(weights)
    model = model_for_evaluation(config, source, use_ema)
    preprocess = eval_preprocess(model, config.data, chosen_data_keys)
    if model.preprocess is not None:
        logger.info("preprocessing: %s", preprocess.origin)
    _, val_set, class_names = build_datasets(config.data, model.config.image_size, seed=config.train.seed,
                                             eval_preprocess=preprocess if model.preprocess is not None else None)
    check_fits_data(model, source.description, len(class_names), class_names)
    loader = build_dataloader(val_set, config.eval.batch_size, shuffle=False, drop_last=False,
                              num_workers=config.data.num_workers, seed=config.train.seed)
    model = use_cpu_fast_paths(model)
    engine, why = resolve_engine(config.eval.engine, config.eval.precision, place)
    metrics = evaluate(model_for_engine(model, engine, config.eval.precision), loader, len(class_names))
    metrics["class_names"] = list(class_names)
    metrics["engine"], metrics["engine_choice"] = engine, why
    metrics["precision"] = config.eval.precision
    return metrics

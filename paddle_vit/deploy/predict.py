"""Prediction: image files in, the top-k class names and probabilities out (a model with no
head: its embedding).

What `tools/predict.py` shares between its two ways of running a model, the dynamic model
built from weights (`load_classifier`) and an exported inference model
(`paddle_vit.deploy.inference.load_export`), both a `Classifier`:

- `Classifier`: an engine (`EagerModel` here; `paddle_vit.deploy.inference.PaddlePredictor`,
  `paddle_vit.deploy.onnx_runtime.OnnxSession`) with the eval preprocessing (a
  `paddle_vit.preprocess.Preprocess`, written into an export's ``preprocess.json`` and
  rebuilt from it, so both paths feed the model the same numbers) and the class names;
- `list_images`, `iter_batches`: files and folders to batches of [B, 3, S, S] float32; a file
  that does not decode is skipped with one warning naming it;
- `softmax`, `top_k`, `format_text`, `format_json`: the output.
"""
import dataclasses
import json
import logging
import os
from typing import List, Optional

import numpy as np
import paddle

from ..config import keys_set
from ..data.imagefolder import IMAGE_EXTENSIONS, decode_image, find_image_files
from ..preprocess import Preprocess, TooLargeToResize
from ..errors import ConfigError, DataError, WeightsError
from ..fileio import kind_of_special_file
from ..factory import eval_preprocess, model_for_evaluation
from ..recipe import config_for_weights
from ..variants import use_cpu_fast_paths
from ..weights.source import WeightsSource, resolve_weights

logger = logging.getLogger("paddle_vit")


# ---- finding and reading images ----------------------------------------------------------------

def list_images(inputs):
    """The image files named by `inputs`, in order, without repeats.

    A file is taken as given (whatever its extension: it may still decode); a folder is
    searched recursively for files ending in one of `IMAGE_EXTENSIONS` (as ImageFolder), hidden
    files and folders left out, sorted. A path that does not exist, or nothing found at all, is
    a DataError.
    """
    paths, seen, unused = [], set(), []  # unused: why a given path adds no image

    def add(path):
        key = os.path.abspath(path)
        if key not in seen:
            seen.add(key)
            paths.append(path)

    for given in inputs:
        given = os.fspath(given)
        if os.path.isfile(given):
            add(given)
        elif os.path.isdir(given):
            found, _ = find_image_files(given, skipped=unused)  # special files, link loops: reported below
            if not found:
                unused.append(f"folder {given}: no image file ({', '.join(IMAGE_EXTENSIONS)})")
            for path in sorted(found):
                add(path)
        elif os.path.exists(given):  # a FIFO, a device: opening it could wait forever
            unused.append(f"{given}: not a regular file ({kind_of_special_file(given)})")
        else:
            raise DataError(f"image or folder {given} does not exist")
    if not paths:  # the reasons belong in the one error line, not in warnings before it
        raise DataError(f"no images found in {', '.join(map(str, inputs))}: {'; '.join(unused)}" if unused else
                        f"no images found in {', '.join(map(str, inputs))} "
                        f"(looked for files ending in {', '.join(IMAGE_EXTENSIONS)})")
    for reason in unused:
        logger.warning("skipping %s", reason)
    return paths


def _one_line(error):
    return " ".join(f"{type(error).__name__}: {error}".split())


def read_image(path, transform):
    """The model input [3, S, S] float32 of the image at `path`; raises whatever decoding raises.

    `transform` is a `Preprocess` (the file decoded as its pipeline's library does: its EXIF
    handling and RGB conversion, e.g. timm's ``convert("RGB")`` dropping an alpha channel) or an
    eval transform of RGB images (EXIF orientation applied, transparency on white)."""
    if isinstance(transform, Preprocess):
        return transform.read(path)
    return transform(decode_image(path), None)


def iter_batches(paths, transform, batch_size, skipped=None):
    """Yield (paths, float32 [B, 3, S, S]) batches of the readable images among `paths`, each
    read by `read_image` with `transform` (a `Preprocess`, or a transform of RGB images).

    A file that cannot be read or decoded is skipped with one warning naming it, and appended
    to the list `skipped` when one is given. The last batch may be smaller.
    """
    if batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")
    batch_paths, arrays = [], []
    for path in paths:
        try:
            array = read_image(path, transform)
        except TooLargeToResize as error:  # refused before the resize allocates it: the message names the sizes
            logger.warning("skipping %s", error)
            if skipped is not None:
                skipped.append(path)
            continue
        except Exception as error:  # a corrupt file can make a decoder raise anything
            logger.warning("skipping unreadable image %s (%s)", path, _one_line(error))
            if skipped is not None:
                skipped.append(path)
            continue
        batch_paths.append(path)
        arrays.append(array)
        if len(arrays) == batch_size:
            yield batch_paths, np.stack(arrays)
            batch_paths, arrays = [], []
    if arrays:
        yield batch_paths, np.stack(arrays)


# ---- outputs -----------------------------------------------------------------------------------

def softmax(logits):
    """Row-wise softmax of a [B, K] array, computed in float64, returned as float32."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exponentials = np.exp(shifted)
    return (exponentials / exponentials.sum(axis=-1, keepdims=True)).astype(np.float32)


def top_k(probabilities, k, class_names=None):
    """For each row of [B, K] `probabilities`, the `k` most likely classes (ties: lower index
    first) as dicts ``{"index", "label", "probability"}``; the label is the class name, or the
    index as a string when there are no names."""
    probabilities = np.asarray(probabilities)
    k = max(1, min(int(k), probabilities.shape[1]))
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
    results = []
    for row, indices in zip(probabilities, order):
        results.append([{"index": int(index),
                         "label": class_names[index] if class_names else str(int(index)),
                         "probability": float(row[index])} for index in indices])
    return results


def format_text(path, predictions):
    """``file  label  probability`` lines, one per prediction, best first."""
    return [f"{path}  {p['label']}  {p['probability']:.4f}" for p in predictions]


def format_json(path, predictions):
    """One JSON object (a line of JSON Lines): ``{"file", "predictions": [...]}``."""
    return json.dumps({"file": path, "predictions": predictions}, ensure_ascii=False)


def format_embedding_text(path, embedding):
    """``file  embedding of D numbers, L2 norm n`` for a model with no head."""
    return [f"{path}  embedding of {len(embedding)} numbers, L2 norm {float(np.linalg.norm(embedding)):.4f} "
            f"(--json prints them)"]


def format_embedding_json(path, embedding):
    """One JSON object for a model with no head: ``{"file", "embedding": [D floats]}``."""
    return json.dumps({"file": path, "embedding": [float(value) for value in embedding]}, ensure_ascii=False)


def read_labels(path):
    """Class names from a text file, one per line (blank lines at the end ignored)."""
    if os.path.exists(path) and not os.path.isfile(path):  # reading a FIFO would wait for a writer forever
        kind = "a folder" if os.path.isdir(path) else kind_of_special_file(path)
        raise ConfigError(f"labels file {path} is {kind}; expected a text file, one class name per line")
    try:
        with open(path, encoding="utf-8") as stream:
            lines = [line.rstrip("\r\n") for line in stream]
    except OSError as error:
        raise ConfigError(f"labels file {path} cannot be read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"labels file {path} is not UTF-8 text (one class name per line)") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or any(not line.strip() for line in lines):
        raise ConfigError(f"labels file {path} must hold one non-empty class name per line")
    return [line.strip() for line in lines]


def check_class_names(class_names, num_classes, where, counted_by=None):
    """`class_names` when there is one per class; `counted_by` says where `num_classes` comes
    from (default: the model's outputs)."""
    if class_names is not None and len(class_names) != num_classes:
        raise ConfigError(f"{where} names {len(class_names)} classes but "
                          f"{counted_by or f'the model has {num_classes} outputs'}")
    return class_names


# ---- the eager engine, and an engine with its images' preprocessing ----------------------------

class EagerModel:
    """The engine that runs a Paddle model eagerly, without gradients: float32 [B, 3, S, S] (numpy)
    -> [B, K] (numpy), the call `PaddlePredictor` and `OnnxSession` have too."""
    backend = "dynamic"

    def __init__(self, model):
        self.model = model

    def __call__(self, batch):
        with paddle.no_grad():
            return self.model(paddle.to_tensor(batch)).numpy()


@dataclasses.dataclass
class Classifier:
    """An engine with what is needed to use it on images: float32 [B, 3, S, S] batches in, [B, K]
    class probabilities out (`outputs`: the engine's raw output).

    engine: an `EagerModel`, `paddle_vit.deploy.inference.PaddlePredictor` or
        `paddle_vit.deploy.onnx_runtime.OnnxSession`;
    model_name: the registered name it was built from; class_names: None when unknown;
    outputs_embedding: the output is an embedding (a model with no head, or whose head is a
        projection, CLIP's), not class scores; outputs_probabilities: an export with a softmax;
    model, config: the eager ViT and the full config it was built from (its data section: the
        recipe's images), for one built from weights; metadata: an export's ``preprocess.json``.
    """
    engine: object
    preprocess: Preprocess
    class_names: Optional[List[str]]
    model_name: str
    num_classes: int
    outputs_embedding: bool
    outputs_probabilities: bool = False
    model: object = None
    config: object = None
    metadata: Optional[dict] = None

    @classmethod
    def for_model(cls, model, preprocess, class_names, model_name, config=None):
        """`model` (a ViT in eval mode) run eagerly."""
        num_classes = model.config.num_classes
        return cls(EagerModel(model), preprocess, class_names, model_name, num_classes,
                   outputs_embedding=num_classes == 0 or getattr(model, "head_is_projection", False),
                   model=model, config=config)

    @property
    def backend(self):
        """What runs it: "dynamic", "paddle" (paddle.inference) or "onnxruntime"."""
        return self.engine.backend

    def outputs(self, batch):
        """The engine's raw float32 [B, K] output for a float32 [B, 3, S, S] numpy batch: logits
        (probabilities for an export with a softmax), or for a model with no head its embedding."""
        outputs = np.asarray(self.engine(np.ascontiguousarray(batch, dtype=np.float32)), dtype=np.float32)
        if not self.outputs_embedding and self.num_classes and outputs.shape[-1] != self.num_classes:
            said = "its preprocess.json says" if self.metadata is not None else "its config says"
            raise ConfigError(f"the model {self.model_name} computes {outputs.shape[-1]} class scores, but {said} "
                              f"num_classes {self.num_classes}: the model and its description are of different "
                              f"models (a model file copied from another export?)")
        return outputs

    def __call__(self, batch):
        """float32 [B, K] class probabilities."""
        outputs = self.outputs(batch)
        return outputs if self.outputs_probabilities else softmax(outputs)


def model_for_weights(config, weights, use_ema=False):
    """The model `config` describes, built for and loaded with `weights` (a `WeightsSource`, or a
    path or dict it is resolved from) as tools/eval.py loads them, in eval mode: the class count
    and the options follow the weights unless the config sets them
    (`paddle_vit.create_model(name, pretrained=...)`), so no data set is needed."""
    return model_for_evaluation(config, weights, use_ema)


def load_classifier(weights, config_path=None, model_name=None, overrides=(), use_ema=False, labels=None):
    """Build the model `weights` were trained for and load them; returns a `Classifier`.
    `weights`: a path, or the `WeightsSource` the command resolved from it.

    The architecture comes from `config_path` (a YAML recipe), or from `model_name` (a
    registered model), or, when neither is given, from the config a training checkpoint
    (.pdckpt) stores or from what a timm Hub or Hugging Face folder's config.json says. The
    eval preprocessing is the checkpoint's own where it implies one (timm's pretrained_cfg, a
    Hugging Face preprocessor_config.json, PaddleClas's, vit_jax's), each data key the recipe or
    the `overrides` set replacing its value; else the recipe's (or the default `DataConfig`'s)
    eval transform at the model's image size. `overrides` are ``section.key=value`` strings as
    for ``-o``. A `model.num_classes` left null follows the weights' head. Class names come
    from the `labels` file, else from a .pdckpt, else none (the class index is printed).
    """

    path = weights.path if isinstance(weights, WeightsSource) else os.fspath(weights)
    if not os.path.exists(path):
        raise WeightsError(f"weights file {path} does not exist")
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "preprocess.json")):
        raise WeightsError(f"{path} is an exported model folder; it goes to --inference-model, not --weights")
    source = resolve_weights(weights)
    config = config_for_weights(source, config_path, model_name, overrides)

    model = use_cpu_fast_paths(model_for_weights(config, source, use_ema))

    class_names = None
    if labels:
        class_names = check_class_names(read_labels(labels), model.config.num_classes, f"labels file {labels}")
    elif model.class_names:  # recorded by the checkpoint: a .pdckpt, Hugging Face's id2label
        class_names = list(model.class_names)
    preprocess = eval_preprocess(model, config.data, keys_set("data", config_path, overrides))
    report_preprocess(preprocess, model)
    return Classifier.for_model(model, preprocess, class_names, config.model.name, config)


def report_preprocess(preprocess, model):
    """Log where the preprocessing comes from: at INFO when it is the checkpoint's or the
    recipe's as they are, as a warning when the user replaced some of the checkpoint's values
    (the probabilities then differ from those of the checkpoint's own pipeline)."""
    own = getattr(model, "preprocess", None)
    if own is not None and preprocess is not own:
        logger.warning("preprocessing: %s", preprocess.origin)
    else:
        logger.info("preprocessing: %s", preprocess.origin)


def predict_files(predictor, paths, transform, batch_size, top, class_names=None, skipped=None):
    """Yield (path, top-k predictions) for every readable image of `paths`, batch by batch.

    `predictor` maps a float32 [B, 3, S, S] batch to [B, K] probabilities (a `Classifier`).
    """
    for batch_paths, batch in iter_batches(paths, transform, batch_size, skipped):
        probabilities = predictor(batch)
        for path, predictions in zip(batch_paths, top_k(probabilities, top, class_names)):
            yield path, predictions


def embed_files(predictor, paths, transform, batch_size, skipped=None):
    """Yield (path, embedding [D]) for every readable image of `paths`: the output of a model
    with no head (num_classes 0: DINOv2's normed class token, SigLIP's attention pool, ...)."""
    for batch_paths, batch in iter_batches(paths, transform, batch_size, skipped):
        yield from zip(batch_paths, predictor.outputs(batch))

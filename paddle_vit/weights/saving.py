"""Writing weights in this project's own format, atomically."""
import dataclasses
import io
import json
import os

import numpy as np
import paddle
import safetensors.numpy

from ..errors import WeightsError
from .. import fileio
from .reading import to_numpy


def save_weights(model_or_state_dict, path, class_names=None, *, model_config=None, model_name=None, eval_data=None):
    """Write a model's weights (or a state dict) in this project's names, atomically: to
    ``.safetensors`` (readable without Paddle or pickle) or ``.pdparams`` (what
    ``paddle.save(model.state_dict())`` writes), chosen by the extension. Returns the path.

    A model's `ViTConfig` (or `model_config`, for a state dict) goes into the ``.safetensors``
    metadata (``model_config``), with the registered `model_name` it was built as when the caller
    knows it: such a file is a complete ``--weights`` source, its model built without ``--model``,
    with the options it computes with (epsilon, GELU, q.k scale, ...). A ``.pdparams`` holds
    tensors only; the model and those options must then be given when it is loaded.
    `class_names` (the classes of the head, in order) go into the ``.safetensors`` metadata too,
    so that evaluation can tell data with other classes from the data the weights learnt, and so
    do `eval_data`, the data keys of the recipe's eval transform ({"interpolation": ..., "mean":
    ..., "std": ..., "eval_crop_pct": ...}), so that they are fed as the run validated them."""
    path = os.fspath(path)
    is_model = hasattr(model_or_state_dict, "state_dict")
    state = model_or_state_dict.state_dict() if is_model else model_or_state_dict
    extension = os.path.splitext(path)[1].lower()
    if extension == ".safetensors":
        arrays = {}
        for name, value in state.items():
            array = to_numpy(value)
            if array is None:
                raise WeightsError(f"cannot save {name!r} to {path}: a {type(value).__name__} is not an array")
            arrays[name] = np.ascontiguousarray(array)
        metadata = {"format": "paddle-vit"}
        config = getattr(model_or_state_dict, "config", None) if is_model else model_config
        if dataclasses.is_dataclass(config):
            metadata["model_config"] = json.dumps(dataclasses.asdict(config))
        if model_name is not None:
            metadata["model_name"] = str(model_name)
        if eval_data is not None:
            metadata["eval_data"] = json.dumps(eval_data)
        if class_names is not None:
            metadata["class_names"] = json.dumps([str(name) for name in class_names])
        data = safetensors.numpy.save(arrays, metadata=metadata)
    elif extension == ".pdparams":
        buffer = io.BytesIO()
        paddle.save({name: value if isinstance(value, paddle.Tensor) else paddle.to_tensor(to_numpy(value))
                     for name, value in state.items()}, buffer)
        data = buffer.getvalue()
    else:
        raise WeightsError(f"cannot save weights to {path}: the extension must be .safetensors or .pdparams")
    _write_atomically(path, data)
    return path


def _write_atomically(path, data):
    """Write the bytes `data` to `path` atomically; an OS error becomes a WeightsError."""
    def write(temporary):
        with open(temporary, "wb") as handle:
            handle.write(data)
    try:
        fileio.atomic_write(path, write)
    except OSError as error:
        raise WeightsError(f"cannot write {path}: {error.strerror or error}") from error

"""Reading checkpoints: files, folders (Hugging Face save_pretrained, timm Hub) and in-memory
dicts -> a `Checkpoint`. The config.json beside the weights is read by source.py (once per
command) and handed to the `Checkpoint`; what it says the model is, folders.py reads.

Nothing here knows a naming scheme; the families (timm.py, jax.py, ...) read the arrays.
"""
import dataclasses
import json
import os
import re
import struct
import zipfile
from collections.abc import Mapping
from typing import Optional

import numpy as np
import paddle
from safetensors.numpy import load_file

from ..errors import WeightsError

FILE_TYPES = ".pdparams, .pdckpt, .safetensors, .pth, .bin or .npz"
HF_CONFIG = "config.json"
# the weights of a Hugging Face save_pretrained folder, in the order transformers looks for them;
# a timm Hub folder (save_for_hf, push_to_hf_hub) holds the first or the third of them
HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint as read, before any conversion.

    Attributes:
        arrays: {checkpoint name: numpy array}, unwrapped from training checkpoints.
        description: the path, or "<dict>", for messages.
        folder: the folder the weights are in (None for a dict).
        model_config: the ViTConfig fields a paddle-vit checkpoint records (.pdckpt, or the
            metadata of a .safetensors written by `save_weights`), else None.
        class_names: the class names a paddle-vit training checkpoint records, else None.
        file_metadata: a .safetensors file's ``__metadata__`` (strings), else {}.
        config: the `FolderConfig` (folders.py) of a timm Hub or Hugging Face config.json beside
            the weights, as `source.resolve_weights` read and checked it, else None.
    """
    arrays: dict
    description: str
    folder: Optional[str] = None
    model_config: Optional[dict] = None
    class_names: Optional[list] = None
    file_metadata: dict = dataclasses.field(default_factory=dict)
    config: Optional[object] = None

    def config_of_kind(self, kind):
        """The folder's `config`, when it is of `kind` ("timm" or "huggingface"), else None."""
        return self.config if self.config is not None and self.config.kind == kind else None


def names(items, limit=6):
    """'a, b, c ... (4 more)' for messages."""
    items = list(items)
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f" ... ({len(items) - limit} more)" if len(items) > limit else "")


def read_checkpoint(source, stored=None, config=None):
    """Read `source` (a path, a Hugging Face save_pretrained folder or a timm Hub folder, or a
    mapping of numpy / Paddle / PyTorch arrays) into a `Checkpoint`. A folder's
    ``pytorch_model.bin`` is read under the rules of any PyTorch file (tensors only).
    `stored`: the contents of the file at `source` when the caller has read them already (a
    .pdckpt whose recipe was read first); `config`: the `FolderConfig` beside it, if any.

    Training checkpoints that wrap the weights (``{"state_dict": ...}``, ``{"model": ...}``,
    a paddle-vit ``.pdckpt``) and the ``module.`` prefix of data-parallel wrappers are unwrapped.
    """
    folder, file_metadata = None, {}
    if isinstance(source, Mapping):
        description, state = "<dict>", source
    elif isinstance(source, (str, os.PathLike)) and stored is not None:
        description, state = os.fspath(source), stored
        folder = os.path.dirname(os.path.abspath(description))
    elif isinstance(source, (str, os.PathLike)):
        description = os.fspath(source)
        if os.path.isdir(description):
            state, file_metadata = _read_folder(description)
            folder = description
        else:
            state, file_metadata = _read_file(description)
            folder = os.path.dirname(os.path.abspath(description))
    else:
        raise WeightsError(f"weights source must be a file path, a folder or a dict of arrays, "
                           f"got {type(source).__name__}")
    model_config, class_names = _recorded_config(state, file_metadata, description)
    state = _unwrap(state, description)
    if any(str(name) in ("LR_Scheduler", "master_weights") or re.search(r"_(moment[12]|beta[12]_pow_acc)_\d+$", str(name))
           for name in state):
        raise WeightsError(f"{description} holds optimizer state (AdamW moments), not model weights; pass the "
                           f".pdparams or .pdckpt written beside it")
    arrays = {}
    for name, value in state.items():
        array = to_numpy(value)
        if array is None:
            raise WeightsError(f"{description}: entry {name!r} is a {type(value).__name__}, not an array")
        arrays[str(name)] = array
    if not arrays:
        raise WeightsError(f"{description} holds no tensors; expected the weights of a ViT")
    if all(name.startswith("module.") for name in arrays):
        arrays = {name[len("module."):]: array for name, array in arrays.items()}
    return Checkpoint(arrays, description, folder, model_config, class_names, file_metadata, config)


def _recorded_config(state, file_metadata, description):
    """The (model_config, class_names) a paddle-vit checkpoint records, or (None, None)."""
    model_config, class_names = None, None
    if isinstance(state.get("model_config"), Mapping):  # a .pdckpt (checkpoint.py)
        model_config = dict(state["model_config"])
    elif "model_config" in file_metadata:  # a .safetensors written by save_weights
        try:
            model_config = json.loads(file_metadata["model_config"])
        except ValueError:
            raise WeightsError(f"{description}: its model_config metadata is not JSON") from None
    names_value = state.get("class_names") if isinstance(state.get("class_names"), (list, tuple)) else None
    if names_value is None and "class_names" in file_metadata:  # .safetensors weights of a run
        try:
            names_value = json.loads(file_metadata["class_names"])
        except ValueError:
            raise WeightsError(f"{description}: its class_names metadata is not JSON") from None
        names_value = names_value if isinstance(names_value, list) else None
    if names_value:
        class_names = [str(name) for name in names_value]
    return model_config, class_names


def _read_file(path):
    """({name: value}, metadata) of a weights file (a .safetensors file's ``__metadata__``, else {})."""
    if not os.path.exists(path):
        raise WeightsError(f"weights file {path} does not exist; expected a {FILE_TYPES} file or a Hugging Face "
                           f"save_pretrained folder")
    extension = os.path.splitext(path)[1].lower()
    readers = {".npz": _read_npz, ".pdparams": _read_pdparams,
               ".pdckpt": _read_pdparams, ".pdopt": _read_pdparams,
               ".pth": _read_torch, ".pt": _read_torch, ".bin": _read_torch}
    if extension not in readers and extension != ".safetensors":
        raise WeightsError(f"{path}: unknown weights file type {extension or '(no extension)'!r}; "
                           f"expected {FILE_TYPES}, or a Hugging Face or timm Hub folder")
    if not os.path.isfile(path):
        raise WeightsError(f"{path} is not a regular file; expected a weights file ({FILE_TYPES})")
    if extension == ".safetensors":
        return _read_safetensors(path)  # the metadata of its header too
    return readers[extension](path), {}


def _read_folder(folder):
    """The weights of a Hugging Face ``save_pretrained`` folder (one file or index + shards) or
    of a timm Hub folder (one file)."""
    present = [name for name in HF_WEIGHTS if os.path.isfile(os.path.join(folder, name))]
    if not present:
        raise WeightsError(f"{folder} is a directory without {' or '.join(HF_WEIGHTS[::2])}; expected a weights "
                           f"file ({FILE_TYPES}), a Hugging Face save_pretrained folder or a timm Hub folder")
    first = os.path.join(folder, present[0])
    if not first.endswith(".index.json"):
        return _read_file(first)
    try:
        with open(first, encoding="utf-8") as stream:
            weight_map = json.load(stream)["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise WeightsError(f"cannot read {first} as a Hugging Face shard index ({_first_line(error)})") from None
    state, metadata = {}, {}
    for shard in shards:
        shard_state, metadata = _read_file(os.path.join(folder, shard))
        state.update(shard_state)
    return state, metadata


def _read_safetensors(path):
    """({name: array}, metadata) of a .safetensors file, its header read once: the metadata and
    each tensor's type come from it, then the tensors."""
    header = _safetensors_header(path)
    try:
        metadata = dict(header.get("__metadata__") or {})
        if any(entry.get("dtype") == "BF16" for key, entry in header.items() if key != "__metadata__"):
            return _read_safetensors_bf16(path, header), metadata
        return load_file(path), metadata
    except WeightsError:
        raise
    except Exception as error:  # safetensors raises its own SafetensorError, OSError, ...
        raise WeightsError(f"cannot read {path} as a .safetensors file ({_first_line(error)}); "
                           f"it may be truncated or corrupt") from error


def _safetensors_header(path):
    """The JSON header of a safetensors file: 8 bytes little-endian length, then JSON."""
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise WeightsError(f"cannot read {path} as a .safetensors file: only {len(prefix)} bytes; "
                                   f"it is truncated or not a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if length > os.path.getsize(path) - 8:
                raise WeightsError(f"cannot read {path} as a .safetensors file: the header says {length} bytes "
                                   f"but the file is shorter; it is truncated or not a safetensors file")
            header = json.loads(handle.read(length))
    except (OSError, ValueError) as error:
        raise WeightsError(f"cannot read {path} as a .safetensors file ({_first_line(error)})") from None
    if not isinstance(header, dict):
        raise WeightsError(f"cannot read {path} as a .safetensors file: its header is not a JSON object")
    return header


def _read_safetensors_bf16(path, header):
    """numpy has no bfloat16: read the raw buffers and widen bfloat16 to float32 by hand."""
    dtypes = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "I8": "i1", "U8": "u1", "BOOL": "?"}
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        handle.seek(8 + length)
        data = handle.read()
    arrays = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        if end > len(data):
            raise WeightsError(f"cannot read {path} as a .safetensors file: tensor {name} ends past the end "
                               f"of the file; it is truncated")
        raw = data[start:end]
        if entry["dtype"] == "BF16":
            # bfloat16 is the top half of a float32
            array = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
        elif entry["dtype"] in dtypes:
            array = np.frombuffer(raw, dtypes[entry["dtype"]])
        else:
            raise WeightsError(f"{path}: tensor {name} has unsupported dtype {entry['dtype']}")
        arrays[name] = array.reshape(entry["shape"]).copy()
    return arrays


def _read_npz(path):
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as error:
        raise WeightsError(f"cannot read {path} as a numpy .npz archive ({_first_line(error)}); "
                           f"it may be truncated or corrupt") from error


def _read_pdparams(path):
    try:
        state = paddle.load(path)
    except Exception as error:  # paddle.load raises ValueError, pickle errors, EOFError, ...
        raise WeightsError(f"cannot read {path} as a Paddle .pdparams file ({_first_line(error)}); "
                           f"it may be truncated or corrupt") from error
    if not isinstance(state, Mapping):
        raise WeightsError(f"{path} holds a {type(state).__name__}, not a state dict; "
                           f"expected what paddle.save(model.state_dict()) writes")
    return state


def _read_torch(path):
    try:
        import torch  # optional: only .pth / .bin files need PyTorch, so it is imported when one is read
    except ImportError:
        raise WeightsError(f"reading {path} needs PyTorch (pip install torch); or convert it to .safetensors "
                           f"where PyTorch is installed, e.g. safetensors.torch.save_file") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # pickle errors, RuntimeError of the zip reader, EOFError, ...
        raise WeightsError(f"cannot read {path} as a PyTorch checkpoint ({_first_line(error)}); "
                           f"it may be truncated or corrupt, or hold more than tensors") from error
    if not isinstance(state, Mapping):
        raise WeightsError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


_WRAPPER_KEYS = ("state_dict", "model", "model_state", "model_state_dict")


def _unwrap(state, description):
    """Descend into {"state_dict": {...}, "epoch": 3}-style training checkpoints."""
    while not any(_is_array(value) for value in state.values()):
        inner = next((state[key] for key in _WRAPPER_KEYS if isinstance(state.get(key), Mapping)), None)
        if inner is None:
            raise WeightsError(f"{description} holds no tensors at the top level nor under "
                               f"{', '.join(_WRAPPER_KEYS)}; keys: {names(list(map(str, state)), 5)}")
        state = inner
    return state


def _is_array(value):
    return isinstance(value, np.ndarray) or hasattr(value, "shape") and hasattr(value, "dtype")


def to_numpy(value):
    """numpy array of a numpy / Paddle / PyTorch tensor (bfloat16 widened to float32), or None."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, paddle.Tensor):
        if value.dtype == paddle.bfloat16:
            value = value.astype("float32")
        return value.numpy()
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    return None


def read_json(path, what):
    """A JSON object from `path`; a WeightsError naming `what` when it is not one."""
    try:
        with open(path, encoding="utf-8") as stream:
            value = json.load(stream)
    except (OSError, ValueError) as error:
        raise WeightsError(f"cannot read {path} ({what}): {_first_line(error)}") from None
    if not isinstance(value, dict):
        raise WeightsError(f"{path} ({what}) must hold a JSON object, got {type(value).__name__}")
    return value

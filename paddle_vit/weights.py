"""Pretrained weights: read timm, JAX and paddle-vit checkpoints into a `ViT`.

``load_pretrained(model, source)`` reads a file (``.pdparams``, ``.safetensors``, ``.pth`` /
``.bin``, ``.npz``) or an in-memory dict of arrays, tells the naming scheme from the keys, converts
to this project's names and layouts, and fits the result to the model:

- the position embedding is resampled when the checkpoint's patch grid differs from the
  model's (paper Section 3.2: "2D interpolation of the pre-trained position embeddings");
- the head is re-initialised to zeros when the class count differs (paper Section 3.2: "a
  zero-initialized D x K feedforward layer"), and a ``pre_logits`` layer the model lacks (the
  JAX in21k checkpoints) is dropped, as fine-tuning does;
- anything else that does not fit (a shape of another architecture, a missing or unexpected
  tensor in strict mode) raises `WeightsError` naming the tensor and both shapes. Paddle's
  ``set_state_dict`` only warns on a shape mismatch and leaves the tensor random; here nothing
  is skipped silently, and the values are read back after setting them.

Layouts (DESIGN.md): Paddle Linear weights are [in, out], PyTorch's [out, in]; conv weights are
OIHW in both; JAX Dense kernels are [in, out], the JAX conv kernel is HWIO, and JAX attention
kernels are split per head: query/key/value [D, heads, head_dim], out [heads, head_dim, D].
"""
import dataclasses
import io
import json
import logging
import math
import os
import re
import struct
from collections.abc import Mapping

import numpy as np
import paddle
import paddle.nn.functional as F

from .errors import WeightsError
from .fileio import atomic_write

logger = logging.getLogger(__name__)

POSITION_EMBEDDING = "patch_embed.position_embedding"
HEAD = ("head.weight", "head.bias")
FILE_TYPES = ".pdparams, .pdckpt, .safetensors, .pth, .bin or .npz"


# ---- the report ------------------------------------------------------------------------------

@dataclasses.dataclass
class LoadReport:
    """What `load_pretrained` did. Every model tensor is in exactly one of `loaded`,
    `resampled`, `reinitialized` or `missing`.

    Attributes:
        source: the file, or "<dict>".
        format: the naming scheme detected: "paddle-vit", "timm" or "jax".
        loaded: model tensors set from the checkpoint (after layout conversion).
        resampled: (model tensor, old grid, new grid) for position embeddings interpolated to
            the model's patch grid.
        reinitialized: model tensors set to zeros instead (the head, see `notes`).
        ignored: checkpoint tensors not used (checkpoint names).
        missing: model tensors the checkpoint lacks, left at their initial values (strict=False).
        notes: why tensors were re-initialised or ignored, one sentence each.
    """
    source: str
    format: str
    loaded: list = dataclasses.field(default_factory=list)
    resampled: list = dataclasses.field(default_factory=list)
    reinitialized: list = dataclasses.field(default_factory=list)
    ignored: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)

    def __str__(self):
        lines = [f"loaded {len(self.loaded)} tensors from {self.source} ({self.format} naming)"]
        for name, old_grid, new_grid in self.resampled:
            lines.append(f"resampled {name}: grid {old_grid[0]}x{old_grid[1]} -> {new_grid[0]}x{new_grid[1]} "
                         f"(bicubic, antialias)")
        if self.reinitialized:
            lines.append(f"re-initialised to zeros: {_names(self.reinitialized)}")
        if self.ignored:
            lines.append(f"ignored from the checkpoint: {_names(self.ignored)}")
        if self.missing:
            lines.append(f"missing, left at their initial values: {_names(self.missing)}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def _names(names, limit=6):
    shown = ", ".join(names[:limit])
    return shown + (f" ... ({len(names) - limit} more)" if len(names) > limit else "")


def _shape(shape):
    return "[" + ", ".join(str(size) for size in shape) + "]"


# ---- reading checkpoints ---------------------------------------------------------------------

def read_checkpoint(source):
    """A checkpoint as a flat {name: numpy array} dict, and a description of where it came from.

    `source` is a path or a mapping of arrays (numpy, Paddle or PyTorch tensors). Training
    checkpoints that wrap the weights (``{"state_dict": ...}``, ``{"model": ...}``) and the
    ``module.`` prefix of data-parallel wrappers are unwrapped.
    """
    if isinstance(source, Mapping):
        description = "<dict>"
        state = source
    elif isinstance(source, (str, os.PathLike)):
        description = os.fspath(source)
        state = _read_file(description)
    else:
        raise WeightsError(f"weights source must be a file path or a dict of arrays, got {type(source).__name__}")
    state = _unwrap(state, description)
    if any(str(name) in ("LR_Scheduler", "master_weights") or re.search(r"_(moment[12]|beta[12]_pow_acc)_\d+$", str(name))
           for name in state):
        raise WeightsError(f"{description} holds optimizer state (AdamW moments), not model weights; pass the "
                           f".pdparams or .pdckpt written beside it")
    arrays = {}
    for name, value in state.items():
        array = _to_numpy(value)
        if array is None:
            raise WeightsError(f"{description}: entry {name!r} is a {type(value).__name__}, not an array")
        arrays[str(name)] = array
    if not arrays:
        raise WeightsError(f"{description} holds no tensors; expected the weights of a ViT")
    if all(name.startswith("module.") for name in arrays):
        arrays = {name[len("module."):]: array for name, array in arrays.items()}
    return arrays, description


def _read_file(path):
    if not os.path.exists(path):
        raise WeightsError(f"weights file {path} does not exist; expected a {FILE_TYPES} file")
    if os.path.isdir(path):
        raise WeightsError(f"{path} is a directory; expected a weights file ({FILE_TYPES})")
    extension = os.path.splitext(path)[1].lower()
    readers = {".safetensors": _read_safetensors, ".npz": _read_npz, ".pdparams": _read_pdparams,
               ".pdckpt": _read_pdparams, ".pdopt": _read_pdparams,
               ".pth": _read_torch, ".pt": _read_torch, ".bin": _read_torch}
    if extension not in readers:
        raise WeightsError(f"{path}: unknown weights file type {extension or '(no extension)'!r}; "
                           f"expected {FILE_TYPES}")
    return readers[extension](path)


def _read_safetensors(path):
    from safetensors.numpy import load_file
    try:
        header = _safetensors_header(path)
        if any(entry.get("dtype") == "BF16" for key, entry in header.items() if key != "__metadata__"):
            return _read_safetensors_bf16(path, header)
        return load_file(path)
    except WeightsError:
        raise
    except Exception as error:  # safetensors raises its own SafetensorError, OSError, ...
        raise WeightsError(f"cannot read {path} as a .safetensors file ({_first_line(error)}); "
                           f"it may be truncated or corrupt") from error


def _safetensors_header(path):
    """The JSON header of a safetensors file: 8 bytes little-endian length, then JSON."""
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise WeightsError(f"cannot read {path} as a .safetensors file: only {len(prefix)} bytes; "
                               f"it is truncated or not a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > os.path.getsize(path) - 8:
            raise WeightsError(f"cannot read {path} as a .safetensors file: the header says {length} bytes "
                               f"but the file is shorter; it is truncated or not a safetensors file")
        return json.loads(handle.read(length))


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
    import zipfile
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
        import torch
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
                               f"{', '.join(_WRAPPER_KEYS)}; keys: {_names(list(map(str, state)), 5)}")
        state = inner
    return state


def _is_array(value):
    return isinstance(value, np.ndarray) or hasattr(value, "shape") and hasattr(value, "dtype")


def _to_numpy(value):
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


# ---- naming schemes --------------------------------------------------------------------------

@dataclasses.dataclass
class ConvertedCheckpoint:
    """A checkpoint in this project's names and layouts.

    tensors: {our name: array}; origin: {our name: (checkpoint name, checkpoint shape)};
    unknown: checkpoint names no rule maps (unexpected in strict mode);
    skipped: checkpoint names outside the parameters (e.g. optimizer state), always ignored.
    """
    format: str
    tensors: dict
    origin: dict
    unknown: list
    skipped: list = dataclasses.field(default_factory=list)


def detect_format(names, description="checkpoint"):
    """"paddle-vit", "timm" or "jax", from a checkpoint's tensor names."""
    names = list(names)
    if any(name.endswith("embedding/kernel") or name.startswith("Transformer/") or "/Transformer/" in name
           for name in names):
        return "jax"
    if any(name.startswith(("encoder.layers.", "patch_embed.patch_embedding.")) or name == POSITION_EMBEDDING
           for name in names):
        return "paddle-vit"
    if any(name in ("cls_token", "pos_embed") or name.startswith(("blocks.", "patch_embed.proj."))
           for name in names):
        return "timm"
    raise WeightsError(f"{description}: cannot tell the naming scheme from names such as {_names(names, 3)}; "
                       f"expected timm (cls_token, blocks.0.attn.qkv.weight, ...), JAX (embedding/kernel, "
                       f"Transformer/encoderblock_0/...) or paddle-vit (encoder.layers.0.attn.qkv.weight, ...)")


def convert_paddle_vit(state):
    """This project's own names: nothing to convert."""
    return ConvertedCheckpoint("paddle-vit", dict(state), {name: (name, array.shape) for name, array in state.items()},
                               [])


_TIMM_RENAMES = [
    (r"cls_token", "patch_embed.class_token"),
    (r"pos_embed", POSITION_EMBEDDING),
    (r"patch_embed\.proj\.(weight|bias)", r"patch_embed.patch_embedding.\1"),
    (r"blocks\.(\d+)\.(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)", r"encoder.layers.\1.\2.\3"),
    (r"norm\.(weight|bias)", r"encoder.norm.\1"),
    (r"fc_norm\.(weight|bias)", r"fc_norm.\1"),
    (r"pre_logits\.fc\.(weight|bias)", r"pre_logits.fc.\1"),  # timm < 0.9 kept the in21k representation layer
    (r"head\.(weight|bias)", r"head.\1"),
]


def convert_timm(state):
    """timm `VisionTransformer` names -> ours. Linear weights are transposed ([out, in] -> [in, out]);
    the patch-embedding conv keeps its OIHW layout."""
    tensors, origin, unknown = {}, {}, []
    for name, array in state.items():
        for pattern, replacement in _TIMM_RENAMES:
            if re.fullmatch(pattern, name):
                ours = re.sub(pattern, replacement, name)
                break
        else:
            unknown.append(name)
            continue
        if name.endswith(".weight") and array.ndim == 2:  # every 2-D weight of a ViT is a Linear
            array = array.T
        tensors[ours] = np.ascontiguousarray(array)
        origin[ours] = (name, state[name].shape)
    return ConvertedCheckpoint("timm", tensors, origin, unknown)


_JAX_PREFIXES = ("opt/target/", "params/img/", "params/", "")
_JAX_BLOCK = re.compile(r"Transformer/encoderblock(?:_(\d+))?/(LayerNorm|MultiHeadDotProductAttention|MlpBlock)_(\d+)/"
                        r"(.+)")
_JAX_TOP = {
    "embedding/bias": "patch_embed.patch_embedding.bias",
    "cls": "patch_embed.class_token",
    "Transformer/posembed_input/pos_embedding": POSITION_EMBEDDING,
    "pos_embedding": POSITION_EMBEDDING,  # big_vision
    "Transformer/encoder_norm/scale": "encoder.norm.weight",
    "Transformer/encoder_norm/bias": "encoder.norm.bias",
    "pre_logits/kernel": "pre_logits.fc.weight",
    "pre_logits/bias": "pre_logits.fc.bias",
    "head/kernel": "head.weight",
    "head/bias": "head.bias",
}


def convert_jax(state):
    """Original JAX/Flax ViT checkpoints (google-research/vision_transformer ``.npz``, and the
    big_vision variants timm also reads) -> ours.

    Key variants handled as timm's ``_load_weights`` does: a prefix ``opt/target/``, ``params/``
    or ``params/img/``; blocks numbered ``encoderblock_N`` or stacked along a leading axis in
    one ``encoderblock``; sublayers ``LayerNorm_0/MultiHeadDotProductAttention_1/LayerNorm_2/
    MlpBlock_3`` (original) or ``LayerNorm_0/MultiHeadDotProductAttention_0/LayerNorm_1/
    MlpBlock_0`` (big_vision).
    """
    prefix = next((p for p in _JAX_PREFIXES if f"{p}embedding/kernel" in state), "")
    tensors, origin, unknown, skipped = {}, {}, [], []
    blocks = {}  # index -> {(kind, role): (array, checkpoint name)}

    def put(ours, array, name):
        tensors[ours] = np.ascontiguousarray(array)
        origin[ours] = (name, state[name].shape)

    for name, array in state.items():
        if not name.startswith(prefix):
            skipped.append(name)
            continue
        key = name[len(prefix):]
        if key == "embedding/kernel":
            if array.ndim != 4:
                unknown.append(name)
                continue
            put("patch_embed.patch_embedding.weight", array.transpose(3, 2, 0, 1), name)  # HWIO -> OIHW
        elif key in _JAX_TOP:
            ours = _JAX_TOP[key]
            if ours == "patch_embed.class_token":
                array = array.reshape(1, 1, -1)
            elif ours == POSITION_EMBEDDING and array.ndim == 2:
                array = array[None]
            put(ours, array, name)
        elif _JAX_BLOCK.fullmatch(key):
            index, module, number, role = _JAX_BLOCK.fullmatch(key).groups()
            if index is None:  # stacked layers: one array with a leading depth axis
                for layer, layer_array in enumerate(array):
                    _collect_block(blocks, layer, module, int(number), role, layer_array, name, unknown)
            else:
                _collect_block(blocks, int(index), module, int(number), role, array, name, unknown)
        else:
            unknown.append(name)

    for index, parts in sorted(blocks.items()):
        layer = f"encoder.layers.{index}."
        for (kind, role), (array, name) in parts.items():
            if kind in ("norm1", "norm2"):
                put(layer + f"{kind}.{'weight' if role == 'scale' else 'bias'}", array, name)
            elif kind in ("fc1", "fc2"):
                put(layer + f"mlp.{kind}.{'weight' if role == 'kernel' else 'bias'}", array, name)
            elif kind == "out":
                if role == "kernel":  # [heads, head_dim, D] -> [heads * head_dim, D]
                    put(layer + "attn.proj.weight", array.reshape(-1, array.shape[-1]), name)
                else:
                    put(layer + "attn.proj.bias", array, name)
        for role, ours in (("kernel", "attn.qkv.weight"), ("bias", "attn.qkv.bias")):
            found = [parts.get((part, role)) for part in ("query", "key", "value")]
            if all(found):
                if role == "kernel":  # 3 x [D, heads, head_dim] -> [D, 3 * heads * head_dim], (q|k|v) heads-major
                    fused = np.concatenate([array.reshape(array.shape[0], -1) for array, _ in found], axis=1)
                else:  # 3 x [heads, head_dim] -> [3 * heads * head_dim]
                    fused = np.concatenate([array.reshape(-1) for array, _ in found])
                tensors[layer + ours] = fused
                origin[layer + ours] = (found[0][1].replace("/query/", "/{query,key,value}/"), found[0][0].shape)
            else:
                unknown.extend(item[1] for item in found if item)
    return ConvertedCheckpoint("jax", tensors, origin, unknown, skipped)


def _collect_block(blocks, index, module, number, role, array, name, unknown):
    parts = blocks.setdefault(index, {})
    path = role.split("/")
    if module == "LayerNorm" and len(path) == 1 and path[0] in ("scale", "bias"):
        kind = "norm1" if number == 0 else "norm2"  # LayerNorm_2 (original) or LayerNorm_1 (big_vision)
    elif module == "MlpBlock" and len(path) == 2 and path[0] in ("Dense_0", "Dense_1"):
        kind = "fc1" if path[0] == "Dense_0" else "fc2"
        role = path[1]
    elif module == "MultiHeadDotProductAttention" and len(path) == 2 and path[0] in ("query", "key", "value", "out"):
        kind, role = path
    else:
        unknown.append(name)
        return
    if (kind, role) in parts or role not in ("scale", "bias", "kernel"):
        unknown.append(name)  # e.g. both LayerNorm_1 and LayerNorm_2 in one block
        return
    parts[(kind, role)] = (array, name)


CONVERTERS = {"paddle-vit": convert_paddle_vit, "timm": convert_timm, "jax": convert_jax}


# ---- position embedding ----------------------------------------------------------------------

def resample_position_embedding(position_embedding, new_grid, old_grid=None, num_prefix_tokens=1, antialias=True):
    """Interpolate a [1, prefix + rows * cols, D] position embedding to another patch grid.

    The class-token row is kept as is; the grid rows are reshaped to [D, rows, cols] and resized
    with bicubic interpolation (align_corners=False), as timm's ``resample_abs_pos_embed`` does
    when it loads a checkpoint at another resolution (paper Section 3.2).

    `antialias=True` is timm's default and the default here. It matters even when upsampling:
    the antialiased bicubic filter has Keys' a = -0.5 (as PIL), the plain one a = -0.75, so the
    two differ by ~0.1-0.3 of the values' scale. On downsampling, antialias also widens the
    filter to the output's pixel footprint (a low-pass) where the plain kernel would sample and
    alias. Paddle's kernel reproduces PyTorch's to ~1e-6 either way. `old_grid` defaults to a
    square grid. Paddle's bicubic only takes float32, so the arithmetic is float32.
    """
    position_embedding = np.asarray(position_embedding)
    tokens, width = position_embedding.shape[-2:]
    if old_grid is None:
        side = math.isqrt(tokens - num_prefix_tokens)
        old_grid = (side, side)
    old_grid, new_grid = tuple(old_grid), tuple(new_grid)
    if old_grid[0] * old_grid[1] + num_prefix_tokens != tokens:
        raise WeightsError(f"a position embedding of {tokens} tokens is not {num_prefix_tokens} class token(s) "
                           f"+ a {old_grid[0]}x{old_grid[1]} grid")
    table = position_embedding.reshape(tokens, width)
    prefix, grid = table[:num_prefix_tokens], table[num_prefix_tokens:]
    grid = grid.reshape(1, old_grid[0], old_grid[1], width).transpose(0, 3, 1, 2)  # [1, D, rows, cols]
    with paddle.no_grad():
        resized = F.interpolate(paddle.to_tensor(grid.astype("float32")), size=list(new_grid), mode="bicubic",
                                align_corners=False, antialias=antialias)  # [1, D, new rows, new cols]
    resized = resized.numpy().transpose(0, 2, 3, 1).reshape(-1, width)  # [new rows * new cols, D]
    table = np.concatenate([prefix.astype("float32"), resized])  # [prefix + N', D]
    return table[None].astype(position_embedding.dtype)


def _position_embedding_grid(tokens, description, name):
    """The square grid of a checkpoint position embedding with a class-token row."""
    side = math.isqrt(tokens - 1)
    if side * side == tokens - 1:
        return side, side
    if math.isqrt(tokens) ** 2 == tokens:
        raise WeightsError(f"{description}: {name} has {tokens} rows, a square grid without a class-token row "
                           f"(a no_embed_class / big_vision layout), which the paddle-vit ViT does not support")
    raise WeightsError(f"{description}: {name} has {tokens} rows, which is not 1 class token + a square grid")


# ---- fitting to the model --------------------------------------------------------------------

def _fit(model, converted, description, strict):
    """Decide, for every model tensor, where its value comes from; raise on what does not fit.
    Returns ({model name: array}, LoadReport)."""
    report = LoadReport(source=description, format=converted.format)
    model_state = model.state_dict()
    shapes = {name: tuple(tensor.shape) for name, tensor in model_state.items()}
    tensors, origin = converted.tensors, converted.origin
    values = {}

    def mismatch(name, expected):
        checkpoint_name, file_shape = origin.get(name, (name, tensors[name].shape))
        layout = "" if tuple(file_shape) == tensors[name].shape else f" ({_shape(file_shape)} in the file)"
        return WeightsError(
            f"{description}: {checkpoint_name} has shape {_shape(tensors[name].shape)}{layout} but the model's "
            f"{name} is {_shape(expected)}; the checkpoint is of another architecture or size")

    model_pre_logits = any(name.startswith("pre_logits.") for name in shapes)
    checkpoint_pre_logits = any(name.startswith("pre_logits.") for name in tensors)
    drops_pre_logits = checkpoint_pre_logits and not model_pre_logits
    adds_pre_logits = model_pre_logits and not checkpoint_pre_logits

    for name, shape in shapes.items():
        if name in HEAD:
            continue
        if name not in tensors:
            report.missing.append(name)
        elif tensors[name].shape == shape:
            values[name] = tensors[name]
            report.loaded.append(name)
        elif name == POSITION_EMBEDDING and tensors[name].ndim == 3 and tensors[name].shape[2] == shape[2]:
            checkpoint_name = origin.get(name, (name,))[0]
            old_grid = _position_embedding_grid(tensors[name].shape[1], description, checkpoint_name)
            new_grid = tuple(model.patch_embed.grid_size)
            values[name] = resample_position_embedding(tensors[name], new_grid, old_grid)
            report.resampled.append((name, old_grid, new_grid))
        else:
            raise mismatch(name, shape)

    if "head.weight" in shapes:
        reason = None
        weight, bias = tensors.get("head.weight"), tensors.get("head.bias")
        model_features, model_classes = shapes["head.weight"]
        if weight is None or bias is None:
            reason = "the checkpoint has no classification head"
        elif drops_pre_logits:
            reason = "the checkpoint's head reads the pre_logits features the model does not have"
        elif adds_pre_logits:
            reason = "the model's head reads the features of a pre_logits layer the checkpoint does not have"
        elif weight.shape == shapes["head.weight"] and bias.shape == shapes["head.bias"]:
            values.update({"head.weight": weight, "head.bias": bias})
            report.loaded.extend(HEAD)
        elif weight.ndim == 2 and weight.shape[0] == model_features and weight.shape[1] != model_classes:
            reason = f"the checkpoint has {weight.shape[1]} classes, the model {model_classes}"
        else:
            name = "head.weight" if weight.shape != shapes["head.weight"] else "head.bias"
            raise mismatch(name, shapes[name])
        if reason:
            for name in HEAD:
                values[name] = np.zeros(shapes[name], "float32")
            report.reinitialized.extend(HEAD)
            report.notes.append(f"head re-initialised to zeros (paper Section 3.2): {reason}")

    unexpected = []
    for name in tensors:
        if name in shapes:
            continue
        checkpoint_name = origin.get(name, (name,))[0]
        if name.startswith("pre_logits.") and drops_pre_logits:
            report.ignored.append(checkpoint_name)
        elif name in HEAD and "head.weight" not in shapes:
            report.ignored.append(checkpoint_name)
        else:
            unexpected.append(checkpoint_name)
    unexpected.extend(converted.unknown)
    if drops_pre_logits:
        report.notes.append("pre_logits (the pre-training head's hidden layer) dropped, as in fine-tuning")
    if any(name in HEAD for name in tensors) and "head.weight" not in shapes:
        report.notes.append("the checkpoint's head is ignored: the model has num_classes=0")
    if converted.skipped:
        report.ignored.extend(converted.skipped)
        report.notes.append(f"{len(converted.skipped)} entries outside the parameters ignored")

    if strict and (report.missing or unexpected):
        problems = []
        if report.missing:
            problems.append(f"missing {_names(report.missing)}")
        if unexpected:
            problems.append(f"unexpected {_names(unexpected)}")
        raise WeightsError(f"{description} does not fit the model: {'; '.join(problems)}"
                           f"{_layout_hint(report.missing, unexpected)} (strict=False loads what fits)")
    report.ignored.extend(unexpected)
    return values, report


def _layout_hint(missing, unexpected):
    if "fc_norm.weight" in unexpected and "encoder.norm.weight" in missing:
        return "; the checkpoint pools by mean with fc_norm: build the model with pool='mean'"
    if "encoder.norm.weight" in unexpected and "fc_norm.weight" in missing:
        return "; the checkpoint pools with the class token: build the model with pool='cls'"
    if any(name.startswith("pre_logits.") for name in missing):
        return "; the checkpoint has no pre_logits layer: build the model with representation_size=None"
    return ""


def load_pretrained(model, source, *, strict=True):
    """Load a checkpoint into `model` (a `paddle_vit.ViT`) and return a `LoadReport`.

    Args:
        model: the model to fill in place.
        source: a path (``.pdparams``/``.safetensors`` in paddle-vit names, timm
            ``.safetensors``/``.pth``/``.bin``, JAX ``.npz``) or a dict of arrays named as in
            timm, as in the JAX checkpoints or as in this project; the scheme is detected.
        strict: raise on checkpoint tensors the model lacks and model tensors the checkpoint
            lacks; with False they are ignored / left at their initial values and reported.

    A shape that does not fit is always an error, except the position embedding (resampled to
    the model's grid) and the head's class count (re-initialised to zeros).
    """
    state, description = read_checkpoint(source)
    scheme = detect_format(state, description)
    converted = CONVERTERS[scheme](state)
    values, report = _fit(model, converted, description, strict)

    model_state = model.state_dict()
    for name in report.missing:  # set too, so that set_state_dict has nothing to warn about
        values[name] = model_state[name]
    tensors = {}
    for name, value in values.items():
        target = model_state[name]
        tensor = value if isinstance(value, paddle.Tensor) else paddle.to_tensor(np.ascontiguousarray(value))
        tensors[name] = tensor.astype(target.dtype)
    missing_keys, unexpected_keys = model.set_state_dict(tensors)
    if missing_keys or unexpected_keys:
        raise WeightsError(f"{description}: Paddle did not set {_names(list(missing_keys) + list(unexpected_keys))}")
    model_state = model.state_dict()
    for name, tensor in tensors.items():  # set_state_dict skips mismatches with a warning: check
        if not np.array_equal(model_state[name].astype("float32").numpy(), tensor.astype("float32").numpy()):
            raise WeightsError(f"{description}: {name} was not set by set_state_dict")
    logger.debug("%s", report)
    return report


# ---- saving ----------------------------------------------------------------------------------

def save_weights(model_or_state_dict, path):
    """Write a model's weights (or a state dict) in this project's names, atomically: to
    ``.safetensors`` (readable without Paddle or pickle) or ``.pdparams`` (what
    ``paddle.save(model.state_dict())`` writes), chosen by the extension. Returns the path."""
    path = os.fspath(path)
    state = model_or_state_dict.state_dict() if hasattr(model_or_state_dict, "state_dict") else model_or_state_dict
    extension = os.path.splitext(path)[1].lower()
    if extension == ".safetensors":
        from safetensors.numpy import save
        arrays = {}
        for name, value in state.items():
            array = _to_numpy(value)
            if array is None:
                raise WeightsError(f"cannot save {name!r} to {path}: a {type(value).__name__} is not an array")
            arrays[name] = np.ascontiguousarray(array)
        data = save(arrays, metadata={"format": "paddle-vit"})
    elif extension == ".pdparams":
        buffer = io.BytesIO()
        paddle.save({name: value if isinstance(value, paddle.Tensor) else paddle.to_tensor(_to_numpy(value))
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
        atomic_write(path, write)
    except OSError as error:
        raise WeightsError(f"cannot write {path}: {error.strerror or error}") from error

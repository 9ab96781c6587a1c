"""int8 ONNX files of a ViT with ONNX Runtime's quantizer, and the accuracy they keep.

`quantize_onnx(fp32_path, int8_path)` quantizes the deployment-grade export of
`paddle_vit.deploy.onnx_export.export_onnx` (whose every weight product reads an initializer):

- mode "dynamic" (the default): int8 weights, one scale per output channel, activations
  quantized per batch at run time (`DynamicQuantizeLinear` + `MatMulInteger`); no calibration;
- mode "static": QDQ (QuantizeLinear/DequantizeLinear pairs that ONNX Runtime fuses into its
  int8 kernels), activation ranges calibrated over the given float32 [B, 3, H, W] batches.

Which nodes stay float32 (`keep_fp32`, roles found in the graph, not by name):
- "patch_embedding": every Conv (the patch projection, a hybrid's ResNet); int8 convolution
  (ConvInteger) is slower than float32 Conv in ONNX Runtime's CPU kernels, and the first layer
  sees the raw pixels;
- "head": the products after the last LayerNorm (pre-logits layer, classifier): the logits
  themselves, a small share of the work;
- "attention_products": the two products of activations in each attention (q k^T, attention v).
  Kept in float32 in dynamic mode, each attention is first fused into ONNX Runtime's Attention
  kernel (`onnx_fusion.fuse_attention`), which the quantizer turns into QAttention: the q/k/v
  projection in int8 (always 7-bit weights per channel: ONNX Runtime's choice for that kernel),
  the products and the softmax in float32, no split copies or transposes. Static QDQ has no
  fused form: there the products are simply left unquantized;
- softmax, LayerNorm, GELU: never quantized (ONNX Runtime has no int8 kernel a ViT gains from).
What the defaults keep and why is measured in docs/deployment.md.

reduce_range (7-bit weights): x86 CPUs without VNNI multiply uint8 activations by int8 weights
with VPMADDUBSW, whose 16-bit sums can saturate; 7-bit weights cannot. None chooses it from this
CPU: off where it has AVX512-VNNI, AVX-VNNI or AMX, on otherwise.
"""
import contextlib
import errno
import logging
import os

import numpy as np

from .. import runtime
from ..data.datasets import AugmentedDataset, build_datasets
from ..errors import ExportError, check_choice
from ..fileio import file_system_full
from .onnx_export import import_onnx_extra, work_folder
from .onnx_fusion import fuse_attention
from .predict import iter_batches, list_images

MODES = ("dynamic", "static")
ROLES = ("patch_embedding", "head", "attention_products")
DEFAULT_KEEP_FP32 = ("patch_embedding", "head", "attention_products")
INT8_FILE = "model.int8.onnx"
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def _import_quantization():
    """(onnx, onnxruntime.quantization), or an ExportError saying how to install the extra."""
    return import_onnx_extra("int8 quantization", "onnx", "onnxruntime.quantization")


def cpu_has_vnni(flags=None):
    """Whether this CPU has an int8 dot-product instruction (VNNI or AMX), from /proc/cpuinfo."""
    if flags is None:
        _, flags = runtime.cpu_vendor_and_flags()
    return any(flag in flags for flag in VNNI_FLAGS)


def node_roles(graph):
    """{role: [node names]} of an onnx GraphProto, for the roles of `ROLES`, and "weight_products":
    the MatMul/Gemm nodes whose second input is a 2-D initializer (a Linear's weight) and the
    fused Attention nodes (whose q/k/v projection int8 speeds up). Products in no role (a
    dynamic-size model's position-embedding resampling) are never quantized."""
    initializers = {tensor.name: len(tensor.dims) for tensor in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    readers = {}  # tensor name -> the nodes that read it
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    layer_norms = [index for index, node in enumerate(graph.node) if node.op_type == "LayerNormalization"]
    last_norm = layer_norms[-1] if layer_norms else -1  # nodes are stored in topological order
    roles = {role: [] for role in (*ROLES, "weight_products")}
    for index, node in enumerate(graph.node):
        if node.op_type == "Attention":
            roles["weight_products"].append(node.name)
        elif node.op_type == "Conv":
            roles["patch_embedding"].append(node.name)
        elif node.op_type in ("MatMul", "Gemm"):
            if initializers.get(node.input[1]) == 2:
                roles["head" if index > last_norm else "weight_products"].append(node.name)
            elif node.input[1] not in initializers and _in_attention(node, producer, readers):
                roles["attention_products"].append(node.name)
    return roles


def _in_attention(product, producer, readers):
    """Whether the product of two activations is one of an attention's: softmax(q k^T * scale) v."""
    def only_reader(name):
        found = readers.get(name, [])
        return found[0] if len(found) == 1 else None

    source = producer.get(product.input[0])
    if source is not None and source.op_type == "Softmax":
        return True  # attention-weighted v
    after = only_reader(product.output[0])
    if after is not None and after.op_type in ("Mul", "Div"):  # the scale, then the softmax: q k^T
        after = only_reader(after.output[0])
    return after is not None and after.op_type == "Softmax"


@contextlib.contextmanager
def _quiet_root_logger():
    """onnxruntime's quantizer logs a line per tensor it leaves alone through the root logger
    (`logging.info`): keep them out of the tool's output while it runs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))  # and its advice to pre-process: the export is already clean
    try:
        yield
    finally:
        root.setLevel(level)


class _BatchReader:
    """onnxruntime's CalibrationDataReader over float32 [B, 3, H, W] batches."""

    def __init__(self, input_name, batches):
        self.input_name = input_name
        self.batches = iter(batches)

    def get_next(self):
        batch = next(self.batches, None)
        return None if batch is None else {self.input_name: np.ascontiguousarray(batch, dtype=np.float32)}


def quantize_onnx(fp32_path, int8_path, *, mode="dynamic", calibration_batches=None, keep_fp32=DEFAULT_KEEP_FP32,
                  reduce_range=None, per_channel=True):
    """Write the int8 version of the float32 ONNX file `fp32_path` to `int8_path`; returns a report
    {"mode", "per_channel", "reduce_range", "quantized": [node names], "fused_attention": the
    attentions fused before quantizing, "kept_fp32": {role: [node names]}, "nodes", "node_counts":
    {op_type: n} of the int8 graph}. With the attention fused, "attention_products" lists no
    nodes: its products are inside the QAttention nodes, in float32.

    mode: "dynamic" (weights int8 per channel, activations quantized at run time) or "static"
        (QDQ, activation ranges from `calibration_batches`, an iterable of float32 [B, 3, H, W]).
    keep_fp32: the roles left in float32 (see the module's doc), any of ROLES.
    """
    onnx, quantization = _import_quantization()
    check_choice("quantization mode", mode, MODES, error=ExportError)
    unknown = [role for role in keep_fp32 if role not in ROLES]
    if unknown:
        raise ExportError(f"keep_fp32 takes {', '.join(ROLES)}; got {', '.join(unknown)}")
    if mode == "static" and calibration_batches is None:
        raise ExportError("static quantization needs calibration batches (--calibration N images)")
    reduce_range = (not cpu_has_vnni()) if reduce_range is None else bool(reduce_range)

    model = onnx.load(os.fspath(fp32_path))
    fused = fuse_attention(model) if mode == "dynamic" and "attention_products" in keep_fp32 else 0
    roles = node_roles(model.graph)
    quantized = list(roles["weight_products"])
    quantized += [name for role in ROLES if role not in keep_fp32 for name in roles[role]]
    options = {"MatMulConstBOnly": "attention_products" in keep_fp32,
               "DefaultTensorType": onnx.TensorProto.FLOAT}  # the Attention node's output type
    common = dict(per_channel=per_channel, reduce_range=reduce_range, weight_type=quantization.QuantType.QInt8,
                  nodes_to_quantize=quantized, op_types_to_quantize=["MatMul", "Gemm", "Conv", "Attention"],
                  extra_options=options)
    folder = os.path.dirname(os.path.abspath(os.fspath(int8_path)))
    with work_folder(folder, ".quantize-") as work:
        staged = os.path.join(work, "model.int8.onnx")
        source = os.fspath(fp32_path)
        if fused:
            source = os.path.join(work, "fused.onnx")
            with _writing(int8_path, folder, f"its attention-fused float32 copy of {fp32_path}"):
                onnx.save(model, source)
        with _writing(int8_path, folder):
            try:
                with _quiet_root_logger():
                    _run_quantizer(quantization, mode, source, staged, model, calibration_batches, common)
            except (ExportError, OSError):
                raise
            except Exception as error:  # onnxruntime's own failures: one line
                _raise_if_disk_full(folder, int8_path)
                raise ExportError(f"onnxruntime could not quantize {fp32_path} ({mode}): {_first_line(error)}") \
                    from None
            int8_model = _load_written(onnx, staged, folder, int8_path)
            os.replace(staged, os.fspath(int8_path))
    counts = {}
    for node in int8_model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return {
        "mode": mode,
        "per_channel": per_channel,
        "reduce_range": reduce_range,
        "quantized": quantized,
        "fused_attention": fused,
        "kept_fp32": {role: roles[role] for role in ROLES if role in keep_fp32},
        "nodes": len(int8_model.graph.node),
        "node_counts": dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
    }


@contextlib.contextmanager
def _writing(int8_path, folder, what=None):
    """Run a write of the int8 file (or of `what` for it): an OSError is an ExportError naming
    the write; no space left on device says so (never what a truncated file then looks like)."""
    try:
        yield
    except OSError as error:
        if error.errno == errno.ENOSPC or file_system_full(folder):
            raise _no_space(int8_path, what) from None
        raise ExportError(f"cannot write {int8_path}{f' ({what})' if what else ''}: "
                          f"{error.strerror or error}") from None


def _no_space(int8_path, what=None):
    return ExportError(f"no space left on device while writing {int8_path}{f' ({what})' if what else ''}")


def _raise_if_disk_full(folder, int8_path):
    """onnxruntime's quantizer writes (a shape-inferred copy, the int8 file) through onnx's C++
    writer, which leaves a truncated file without an error when the disk fills: whatever fails
    after that is really the full disk."""
    if file_system_full(folder):
        raise _no_space(int8_path) from None


def _load_written(onnx, staged, folder, int8_path):
    """The int8 file the quantizer wrote, read back; truncated by a full disk, it says so."""
    try:
        return onnx.load(staged)
    except Exception as error:  # protobuf's DecodeError, onnx's errors
        _raise_if_disk_full(folder, int8_path)
        raise ExportError(f"the int8 file onnxruntime wrote cannot be read back: {_first_line(error)}") from None


def _first_line(error):
    text = str(error)
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _run_quantizer(quantization, mode, fp32_path, target, model, calibration_batches, common):
    if mode == "dynamic":
        quantization.quantize_dynamic(os.fspath(fp32_path), target, **common)
        return
    reader = _BatchReader(model.graph.input[0].name, calibration_batches)
    quantization.quantize_static(os.fspath(fp32_path), target, reader, quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QUInt8,
                                 calibrate_method=quantization.CalibrationMethod.MinMax, **common)


def compare_logits(fp32_path, int8_path, batches, labels=None, threads=None):
    """The accuracy gate of an int8 file: run both files over `batches` (float32 [B, 3, H, W]) and
    return {"images", "top1_agreement", "max_logit_difference", "max_relative_difference" (to the
    largest fp32 logit of the image), and with `labels` (one int per image) "top1_fp32",
    "top1_int8"}; fractions in [0, 1]."""
    (onnxruntime,) = import_onnx_extra("the int8 accuracy gate", "onnxruntime")

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = int(threads)
    sessions = [onnxruntime.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
                for path in (fp32_path, int8_path)]
    name = sessions[0].get_inputs()[0].name
    fp32, int8 = [], []
    for batch in batches:
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        fp32.append(sessions[0].run(None, {name: batch})[0])
        int8.append(sessions[1].run(None, {name: batch})[0])
    fp32, int8 = np.concatenate(fp32), np.concatenate(int8)  # [N, K]
    difference = np.abs(fp32 - int8).max(axis=1)  # [N]
    report = {
        "images": int(len(fp32)),
        "top1_agreement": float((fp32.argmax(1) == int8.argmax(1)).mean()),
        "max_logit_difference": float(difference.max()),
        "max_relative_difference": float((difference / np.maximum(np.abs(fp32).max(axis=1), 1e-12)).max()),
    }
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)[:len(fp32)]
        report["top1_fp32"] = float((fp32.argmax(1) == labels).mean())
        report["top1_int8"] = float((int8.argmax(1) == labels).mean())
    return report


def recipe_images(data_config, preprocess, image_size, split, limit=None, batch_size=64):
    """(float32 [B, 3, S, S] batches, int64 labels, number of classes) of the recipe's data as the
    model sees it at evaluation (`preprocess`, a `paddle_vit.preprocess.Preprocess`): the val split
    (split="val") for the accuracy gate, or the first `limit` images of the train split in a fixed
    shuffled order (split="train", never augmented) for calibration."""
    train, val, class_names = build_datasets(data_config, image_size, eval_preprocess=preprocess)
    if split == "val":
        dataset, order = val, np.arange(len(val))
    else:
        source = train.source
        if hasattr(source, "decode") and hasattr(val.source, "decode"):
            source.decode = val.source.decode  # files: decoded by the eval pipeline too
        dataset = AugmentedDataset(source, val.transform, image_size)
        order = np.random.default_rng(0).permutation(len(dataset))
    order = order[:limit] if limit is not None else order
    batches, labels = [], []
    for start in range(0, len(order), batch_size):
        samples = [dataset[int(index)] for index in order[start:start + batch_size]]
        samples = [(image, label) for image, label in samples if label >= 0]  # an unreadable val file: left out
        if not samples:
            continue
        batches.append(np.stack([np.asarray(image, dtype=np.float32) for image, _ in samples]))
        labels.extend(int(label) for _, label in samples)
    return batches, np.asarray(labels, dtype=np.int64), len(class_names)


def image_batches(inputs, preprocess, limit=None, batch_size=32):
    """float32 [B, 3, S, S] batches of the image files and folders `inputs` (the first `limit`),
    read as the model reads them at evaluation (`preprocess`); unreadable files are skipped."""
    paths = list_images(inputs)[:limit]
    return [batch for _, batch in iter_batches(paths, preprocess, batch_size)]

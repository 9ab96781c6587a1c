"""Export a trained ViT for deployment: a Paddle inference model, optionally ONNX, its weights as
.safetensors and a ``preprocess.json`` that says everything else a predictor needs.

The folder written by `export_classifier`:

- ``inference.json`` + ``inference.pdiparams``: ``paddle.jit.save`` of the eval model with a
  dynamic batch, input ``image`` float32 [N, 3, S, S] ([N, 3, H, W], any H and W, for a model
  built with ``dynamic_img_size``), output [N, K] logits (or probabilities with ``softmax=True``).
  Paddle 3 writes its PIR program as ``.json``; Paddle 2 and Paddle 3 with
  ``FLAGS_enable_pir_api=0`` wrote a ``.pdmodel`` (`paddle_vit.deploy.inference` reads both);
- ``model.onnx`` with ``formats`` including "onnx": the deployment-grade graph of
  `paddle_vit.deploy.onnx_export.export_onnx` (opset 17, weights as initializers, constants
  folded; through paddle2onnx and onnxruntime, the optional extra);
- ``model.safetensors``: the weights alone, in this project's names (arrays only, safe to
  share; `paddle_vit.load_pretrained` reads it into ``ViT(ViTConfig(**model_config))``);
- ``preprocess.json``: the eval preprocessing (`paddle_vit.preprocess.Preprocess`), the class
  names, the model name and configuration, what the output is, and which files hold what.

Everything is written to a hidden staging folder beside the target first and swapped in for the
previous export in one step at the end (`paddle_vit.staged_writes.staged_folder`): a failed or killed
export leaves the previous one whole or the new one whole. Where a folder cannot be swapped (a
mount point) the staging folder is inside the target and its files are moved in,
``preprocess.json`` last: a folder killed meanwhile has no ``preprocess.json`` and is replaced by
the next export.
"""
import dataclasses
import json
import logging
import os

import numpy as np

import paddle

from .. import __version__, fileio, staged_writes
from ..errors import ConfigError, ExportError
from ..weights import save_weights
from .onnx_export import DEFAULT_OPSET, ONNX_FILE, export_onnx, import_paddle2onnx
from .quantize import INT8_FILE, compare_logits, quantize_onnx
from .tracing import INPUT_NAME, input_shape, save_traced

logger = logging.getLogger("paddle_vit")

EXPORT_FORMAT = "paddle_vit.export/1"
METADATA_FILE = "preprocess.json"
MODEL_PREFIX = "inference"  # inference.json / inference.pdmodel + inference.pdiparams
WEIGHTS_FILE = "model.safetensors"
FORMATS = ("paddle", "onnx")
STAGING_KIND = "export"  # the staging folder: PARENT/.OUT.export-XXXX/OUT, or OUT/.export-XXXX
# every file an export writes (Paddle 2 wrote .pdmodel and .pdiparams.info): what a folder killed
# while they were moved in may hold
EXPORT_FILES = (METADATA_FILE, WEIGHTS_FILE, ONNX_FILE, INT8_FILE, f"{MODEL_PREFIX}.json", f"{MODEL_PREFIX}.pdmodel",
                f"{MODEL_PREFIX}.pdiparams", f"{MODEL_PREFIX}.pdiparams.info")


def build_metadata(classifier, softmax, files):
    """The ``preprocess.json`` content of an export."""
    config = classifier.model.config
    return {
        "format": EXPORT_FORMAT,
        "model_name": classifier.model_name,
        "num_classes": int(config.num_classes),
        "class_names": list(classifier.class_names) if classifier.class_names else None,
        "output": "probabilities" if softmax else "logits",
        "outputs_embedding": bool(config.num_classes == 0 or getattr(classifier.model, "head_is_projection", False)),
        "input_name": INPUT_NAME,
        "input_shape": input_shape(config),
        "preprocess": classifier.preprocess.to_dict(),
        "files": files,
        "model_config": dataclasses.asdict(config),
        "paddle_version": paddle.__version__,
        "paddle_vit_version": __version__,
    }


SPACE_MARGIN = 256 * 1024  # inference.json, preprocess.json, the ONNX graphs' structure


def space_needed(model, formats, int8):
    """(the bytes an export takes on disk at its largest, the bytes of its float32 weights W):
    the Paddle model (W) and model.safetensors (W) stay; an ONNX export holds the traced model,
    paddle2onnx's output, ONNX Runtime's folded copy and model.onnx at once (4 W), int8 the fused
    and shape-inferred copies beside model.onnx (2 W) and the int8 file (W / 4). Measured on a
    tmpfs: the walkthrough ViT of 0.8 MiB of weights needs 4.2-4.5 MiB for all three formats,
    this says 4.3."""
    weights = sum(int(np.prod(parameter.shape)) for parameter in model.parameters()) * 4
    paddle_model = weights if "paddle" in formats else 0
    onnx, quantized = "onnx" in formats, int8 is not None
    peaks = [paddle_model + weights + (weights if onnx else 0) + (weights // 4 if quantized else 0)]  # the end
    if onnx:
        peaks.append(paddle_model + 4 * weights)
    if quantized:
        peaks.append(paddle_model + weights + 2 * weights + weights // 4)
    return max(peaks) + SPACE_MARGIN, weights


def _check_out(out_dir):
    """`out_dir` must be absent, empty or an earlier export (complete, or one whose files were
    being moved in when it was killed): its files are replaced as a whole, never mixed with
    others. Checked before any work is done."""
    if not os.path.lexists(out_dir):
        return
    if not os.path.isdir(out_dir):
        kind = "a file" if os.path.isfile(out_dir) else fileio.kind_of_special_file(out_dir)
        raise ExportError(f"--out {out_dir} is {kind}; expected a folder for the export")
    try:
        holds = staged_writes.output_entries(out_dir, STAGING_KIND)
        replaceable = (not holds or _is_export(out_dir)
                       or staged_writes.interrupted_output(out_dir, STAGING_KIND, EXPORT_FILES))
    except OSError as error:
        raise ExportError(f"cannot read --out {out_dir}: {error.strerror or error}") from None
    if not replaceable:
        raise ExportError(f"--out {out_dir} holds files that are not an export; give a new or empty folder, "
                          f"or an earlier export to replace")


def _is_export(folder):
    try:
        with open(os.path.join(folder, METADATA_FILE), encoding="utf-8") as stream:
            return json.load(stream).get("format") == EXPORT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


@dataclasses.dataclass
class Int8Export:
    """What `export_classifier` needs to write ``model.int8.onnx`` beside ``model.onnx``.

    mode: "dynamic" or "static" (`paddle_vit.deploy.quantize.quantize_onnx`);
    calibration_batches: float32 [B, 3, S, S] batches for "static";
    gate_batches, gate_labels: the images (and their labels, or None) on which the int8 file is
        compared with the float32 one (`compare_logits`); the report goes to ``preprocess.json``.
    """
    mode: str = "dynamic"
    calibration_batches: object = None
    gate_batches: object = ()
    gate_labels: object = None


def export_classifier(classifier, out_dir, softmax=False, formats=("paddle",), opset_version=DEFAULT_OPSET,
                      int8=None):
    """Export `classifier` (a `paddle_vit.deploy.predict.Classifier` built from weights: its `model`
    is what is written) to the folder `out_dir`.

    formats: any of "paddle" (the Paddle inference model) and "onnx" (needs paddle2onnx).
    softmax: put a softmax on the output, so the model returns probabilities.
    int8: an `Int8Export`: also write ``model.int8.onnx`` (needs "onnx" in formats) and record its
        quantization and accuracy gate under "int8" in ``preprocess.json``.
    Returns {role: path} of the files written (``preprocess.json`` under "metadata"). Everything
    is written to a staging folder first and put in place at the end, in one step where the
    folder can be swapped (`paddle_vit.staged_writes.staged_folder`): a failed or killed export leaves
    the earlier one whole, or is replaced by the next.
    """

    formats = list(dict.fromkeys(formats))
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise ConfigError(f"export formats are {', '.join(FORMATS)}; got {', '.join(formats) or 'none'}")
    if int8 is not None and "onnx" not in formats:
        raise ConfigError("an int8 export quantizes the ONNX model: add --format onnx")
    if "onnx" in formats:
        import_paddle2onnx()  # say what to install before any work is done
    out_dir = os.fspath(out_dir)
    _check_out(out_dir)
    needed, weights = space_needed(classifier.model, formats, int8)
    with staged_writes.staged_folder(out_dir, STAGING_KIND, METADATA_FILE, error_type=ExportError,
                                     description="the export", needed_bytes=needed,
                                     largest_file_bytes=weights) as staging:
        files = _write_export(classifier, staging, softmax, formats, opset_version, int8)
    written = {role: os.path.join(out_dir, name) for role, name in files.items()}
    written["metadata"] = os.path.join(out_dir, METADATA_FILE)
    logger.info("exported %s to %s: %s", classifier.model_name, out_dir, ", ".join(sorted(files.values())))
    return written


def _write_export(classifier, folder, softmax, formats, opset_version, int8):
    """Write the export's files into `folder` (the staging folder), ``preprocess.json`` too;
    returns the "files" entry of ``preprocess.json``: {role: file name}."""
    files = {}
    if "paddle" in formats:
        model_file, params_file = save_traced(classifier.model, os.path.join(folder, MODEL_PREFIX), softmax)
        files["paddle_model"] = os.path.basename(model_file)
        files["paddle_params"] = os.path.basename(params_file)
    if "onnx" in formats:
        files["onnx"] = ONNX_FILE
    if int8 is not None:
        files["onnx_int8"] = INT8_FILE
    files["weights"] = WEIGHTS_FILE
    metadata = build_metadata(classifier, softmax, files)
    if "onnx" in formats:
        report = export_onnx(classifier.model, os.path.join(folder, ONNX_FILE), opset=opset_version,
                             softmax=softmax, metadata=metadata)
        metadata["onnx_graph"] = report
        logger.info("ONNX graph: opset %d, %d nodes (%s), %d initializers", report["opset"], report["nodes"],
                    ", ".join(f"{op} {count}" for op, count in report["node_counts"].items()),
                    report["initializers"])
        if report["opset"] != opset_version:  # paddle2onnx raises an opset too low for the graph's ops
            logger.warning("opset %d was asked for; paddle2onnx wrote opset %d, the lowest it can write this "
                           "graph in", opset_version, report["opset"])
    if int8 is not None:
        metadata["int8"] = _write_int8(os.path.join(folder, ONNX_FILE), os.path.join(folder, INT8_FILE), int8)
    save_weights(classifier.model, os.path.join(folder, WEIGHTS_FILE), model_name=classifier.model_name)
    with open(os.path.join(folder, METADATA_FILE), "w", encoding="utf-8") as stream:
        json.dump(metadata, stream, indent=2, ensure_ascii=False)
        stream.write("\n")
    return files


def _write_int8(fp32_path, int8_path, int8):
    """Quantize the exported ONNX file and measure it against the float32 one: the "int8" entry
    of ``preprocess.json`` (the quantization without its node lists, and the accuracy gate)."""
    report = quantize_onnx(fp32_path, int8_path, mode=int8.mode, calibration_batches=int8.calibration_batches)
    gate = compare_logits(fp32_path, int8_path, int8.gate_batches, int8.gate_labels) if int8.gate_batches else None
    summary = {key: value for key, value in report.items() if key not in ("quantized", "kept_fp32")}
    summary["quantized_nodes"] = len(report["quantized"])
    summary["kept_fp32"] = {role: len(names) for role, names in report["kept_fp32"].items()}
    summary["gate"] = gate
    return summary


"""Publishing a model for the PyTorch world: a timm Hub folder (as timm 1.0's ``save_for_hf``
writes one) or a transformers ``ViTForImageClassification`` folder.

``save_pretrained(model, directory, format="timm")`` writes

- ``config.json``: ``architecture`` (timm's registered name the model is built on), ``num_classes``,
  ``num_features``, ``global_pool``, ``model_args`` (every `ViTConfig` field that differs from the
  architecture's, as timm's argument), ``label_names`` (``model.class_names``) and
  ``pretrained_cfg`` (the model's eval preprocessing as timm's keys: input_size, interpolation,
  crop_pct, crop_mode, mean, std; only keys timm's ``PretrainedCfg`` knows);
- ``model.safetensors``: timm's names (the inverse of timm.py's `RENAMES`) in PyTorch's layout
  (Linear weights [out, in]);
- ``README.md``: a model card (the model, where it comes from, how to load it).

``timm.create_model("local-dir:DIR", pretrained=True)`` loads it strictly and computes this
project's logits, and so does transformers' ``AutoModelForImageClassification`` (its timm
wrapper). ``format="huggingface"`` writes config.json, preprocessor_config.json and
model.safetensors (q, k, v apart; the readers' names, hf_*.py, inverted) for the model's
transformers class (`hf_family`): ``ViTForImageClassification`` (model_type ``vit``, ViT's, DeiT's
or Bit's image processor) for the plain ViT reading the class token; ``Dinov2Model`` /
``Dinov2WithRegistersModel`` (layer scale, SwiGLU as ``use_swiglu_ffn``, no head; the registers'
class token written back unfolded: its position row zero, the class token ours, which holds the
row) with BitImageProcessor; ``CLIPVisionModel`` (no head) or ``CLIPVisionModelWithProjection``
(a head without bias: the visual projection) with CLIPImageProcessor; ``SiglipVisionModel`` (the
MAP head, no class token) with SiglipImageProcessor (a square resize, no crop);
``DeiTForImageClassificationWithTeacher`` (the distilled DeiT) with DeiTImageProcessor.
tests/test_publish.py checks both against the libraries' own reading, recorded in
tests/fixtures/publish_reference.*. What the target cannot express (timm: a 2-D position
embedding, a q.k scale other than head_dim^-0.5, a LayerNorm epsilon or ResNet its architecture
does not have, ...; transformers: any pooling but the class token's, today's tokens and options)
is refused in one WeightsError before anything is written. The folder is written into a hidden
staging folder beside the target and swapped in for what the target held in one step
(`paddle_vit.staged_writes.staged_folder`): a failure leaves nothing new, a kill leaves the old folder
or the new one whole. Where a folder cannot be swapped (a mount point) the staging folder is
inside the target and its files are moved in, ``config.json`` last: a folder killed meanwhile has
no ``config.json`` and is replaced by the next run.
"""
import errno
import json
import logging
import os

import yaml
from safetensors import SafetensorError
from safetensors.numpy import save_file

from .. import staged_writes
from ..checkpoint import run_folder_of_checkpoint
from ..errors import WeightsError
from .publish_hf import hf_export
from .publish_timm import timm_export

logger = logging.getLogger("paddle_vit")
FORMATS = ("timm", "huggingface")
WEIGHTS_FILE = "model.safetensors"
PROCESSOR_FILE = "preprocessor_config.json"
CONFIG_FILE = "config.json"
CARD_FILE = "README.md"
SPACE_MARGIN = 64 * 1024  # config.json, README.md, preprocessor_config.json
STAGING_KIND = "publish"  # the staging folder: PARENT/.OUT.publish-XXXX/OUT, or OUT/.publish-XXXX
PUBLISHED_FILES = (CONFIG_FILE, WEIGHTS_FILE, PROCESSOR_FILE, CARD_FILE)


def save_pretrained(model, directory, format="timm", overwrite=False, *, name=None, preprocess=None,
                    class_names=None, source=None, run=None):
    """Write `model` (a `ViT`) as a `format` folder into `directory`; returns the directory.

    format: "timm" (a timm Hub folder) or "huggingface" (a folder for the model's transformers
        class: config.json, preprocessor_config.json, model.safetensors; ViTForImageClassification,
        Dinov2Model, Dinov2WithRegistersModel, CLIPVisionModel[WithProjection], SiglipVisionModel,
        DeiTForImageClassificationWithTeacher, DINOv3ViTModel; what the class or its image processor cannot
        compute refused naming --to timm).
    name: the registered name the model was built as (else the registered timm name whose
        architecture it has); preprocess: the eval `Preprocess` to publish (default
        ``model.preprocess``, else timm's default for the name, else this project's recipe
        defaults); class_names: default ``model.class_names``; source, run: for the model card
        (the weights it was read from; a training run's {"folder", "data", "epochs",
        "best_top1"}).
    An existing non-empty `directory` is refused unless `overwrite`; nothing is left half
    written when anything fails."""
    if format not in FORMATS:
        raise WeightsError(f"cannot publish as {format!r}: the formats are {', '.join(FORMATS)}")
    directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    check_target(directory, overwrite)
    if format == "huggingface":
        export = hf_export(model, name=name, preprocess=preprocess, class_names=class_names)
    else:
        export = timm_export(model, name=name, preprocess=preprocess, class_names=class_names)
    card = model_card(export, model, source, run)
    _write_folder(directory, export, card)
    if not export.preprocess_exact:
        logger.warning("preprocessing: %s", export.preprocess_note)
    return directory


def check_target(directory, overwrite):
    """`directory` must be absent, empty (leftover staging folders and a disk's lost+found aside)
    or what a run killed while moving its files in left (`staged_writes.interrupted_output`), unless
    `overwrite`, which replaces whatever it holds."""
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise WeightsError(f"--out {directory} exists and is not a folder")
    if not os.path.isdir(directory) or overwrite:
        return
    try:
        taken = (staged_writes.output_entries(directory, STAGING_KIND)
                 and not staged_writes.interrupted_output(directory, STAGING_KIND, PUBLISHED_FILES))
    except OSError as error:
        raise WeightsError(f"cannot read --out {directory}: {error.strerror or error}") from None
    if taken:
        raise WeightsError(f"--out {directory} exists and is not empty: choose a new folder, or --overwrite to "
                           f"replace what it holds")


# ---- README.md --------------------------------------------------------------------------------

def model_card(export, model, source=None, run=None):
    """The README.md of a published folder: the model, its source or training run, how to load it."""
    values, config = export.config, model.config
    timm = export.format == "timm"
    lines = ["---", f"library_name: {'timm' if timm else 'transformers'}", "tags:", "- image-classification",
             f"- {'timm' if timm else values.get('model_type', 'vit')}", "- paddle-vit", "---", ""]
    if timm:
        args = values.get("model_args", {})
        arguments = ", ".join(f"{key}={value!r}" for key, value in args.items()) or "none (the architecture's own)"
        cfg = values["pretrained_cfg"]
        lines += [f"# {export.architecture} (published by paddle-vit)", "",
                  f"A Vision Transformer in timm's `{export.architecture}` architecture, with "
                  f"{config.depth} layers of width {config.embed_dim}, {config.num_heads} heads, "
                  f"{config.patch_size} px "
                  f"patches at {config.image_size} px, pooling `{values['global_pool']}`"
                  f"{' over every token, the class token included' if config.pool == 'walkthrough' else ''} and "
                  f"{config.num_classes} classes.", "",
                  f"- timm arguments beyond the architecture's (`model_args`): {arguments}",
                  f"- eval preprocessing (`pretrained_cfg`): {cfg['crop_mode']} crop, crop_pct {cfg['crop_pct']:g}, "
                  f"{cfg['interpolation']}, mean {cfg['mean']}, std {cfg['std']}; {export.preprocess_note}"]
        labels = values.get("label_names")
    else:
        cls = export.architecture
        if "id2label" in values:
            outputs = f"{config.num_classes} classes"
        elif config.num_classes:
            outputs = f"a {config.num_classes}-wide projection (image_embeds)"
        else:
            outputs = "no head (pooler_output: the pooled features)"
        lines += [f"# {cls} (published by paddle-vit)", "",
                  f"A Vision Transformer for transformers' `{cls}`, with {config.depth} layers "
                  f"of width {config.embed_dim}, {config.num_heads} heads, {config.patch_size} px patches at "
                  f"{config.image_size} px, hidden_act `{values['hidden_act']}`, layer_norm_eps "
                  f"{values['layer_norm_eps']:g} and {outputs}.", "",
                  f"- eval preprocessing (`preprocessor_config.json`): {export.preprocess_note}"]
        names = list(values.get("id2label", {}).values())
        labels = None if names[:1] in ([], ["LABEL_0"]) else names
    if labels:
        shown = ", ".join(labels[:10]) + (", ..." if len(labels) > 10 else "")
        lines.append(f"- classes (`{'label_names' if timm else 'id2label'}`): {shown}")
    lines += ["", "## Where it comes from", ""]
    if run:
        lines.append(f"Trained with paddle-vit: run `{run.get('folder')}`, data `{run.get('data')}`, "
                     f"{run.get('epochs')} epochs; best validation top-1 {_percent(run.get('best_top1'))} "
                     f"(metrics.jsonl).")
    if source:
        lines.append(f"Converted by paddle-vit from `{source}`.")
    if not run and not source:
        lines.append("Written by paddle-vit from a model in memory.")
    lines += ["", "## Load it", ""]
    if timm:
        lines += ["timm (PyTorch):", "", "```python", "import timm",
                  "from timm.data import resolve_data_config, create_transform",
                  'model = timm.create_model("local-dir:THIS_FOLDER", pretrained=True).eval()',
                  "transform = create_transform(**resolve_data_config({}, model=model))", "```", "",
                  "transformers (its timm wrapper; timm installed):", "", "```python",
                  "from transformers import AutoModelForImageClassification",
                  'model = AutoModelForImageClassification.from_pretrained("THIS_FOLDER").eval()  '
                  '# TimmWrapperForImageClassification', "```", ""]
    else:
        lines += ["transformers (PyTorch):", "", "```python",
                  f"from transformers import AutoImageProcessor, {export.architecture}",
                  f'model = {export.architecture}.from_pretrained("THIS_FOLDER").eval()',
                  'processor = AutoImageProcessor.from_pretrained("THIS_FOLDER"' + _processor_backend(export) + ")",
                  "```", ""]
    lines += ["paddle-vit (PaddlePaddle):", "", "```python", "import paddle_vit",
              'model = paddle_vit.create_model(pretrained="THIS_FOLDER").eval()  # model.preprocess: the same eval '
              'transform', "```", "",
              "or `tools/predict.py --weights THIS_FOLDER IMAGE`.", ""]
    return "\n".join(lines)


def _percent(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{100 * value:.2f}%" if value <= 1 else f"{value:.2f}%"
    return "unknown"


def run_summary(checkpoint_path):
    """{"folder", "data", "epochs", "best_top1"} of the training run a .pdckpt belongs to, or None."""
    folder = run_folder_of_checkpoint(checkpoint_path)
    if folder is None:
        return None
    summary = {"folder": folder, "data": None, "epochs": None, "best_top1": None}
    try:
        with open(os.path.join(folder, "config.yaml"), encoding="utf-8") as stream:
            recipe = yaml.safe_load(stream) or {}
        data = recipe.get("data") or {}
        summary["data"] = data.get("dataset") and (data["dataset"] + (f" ({data['root']})" if data.get("root") else ""))
        summary["epochs"] = (recipe.get("train") or {}).get("epochs")
    except (OSError, yaml.YAMLError, AttributeError):
        pass
    try:
        with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as stream:
            records = [json.loads(line) for line in stream if line.strip()]
        tops = [record["val_top1"] for record in records if isinstance(record.get("val_top1"), (int, float))]
        summary["best_top1"] = max(tops) if tops else None
        if records and summary["epochs"] and len(records) != summary["epochs"]:
            summary["epochs"] = f"{len(records)} of {summary['epochs']}"
    except (OSError, ValueError):
        pass
    return summary


# ---- writing ----------------------------------------------------------------------------------

def _write_folder(directory, export, card):
    """Write the folder's files into a staging folder beside `directory` and swap it in, or
    where it cannot be swapped (a mount point) into one inside it and move them in, ``config.json``
    last (`staged_writes.staged_folder`)."""
    weights = sum(tensor.nbytes for tensor in export.tensors.values())
    with staged_writes.staged_folder(directory, STAGING_KIND, CONFIG_FILE, error_type=WeightsError,
                                     description=f"the {export.format} folder",
                                     needed_bytes=weights + SPACE_MARGIN, largest_file_bytes=weights) as staging:
        _write_files(staging, export, card)


def _write_files(folder, export, card):
    _save_tensors(export.tensors, os.path.join(folder, WEIGHTS_FILE))
    with open(os.path.join(folder, CONFIG_FILE), "w", encoding="utf-8") as stream:
        json.dump(export.config, stream, indent=2)
        stream.write("\n")
    if export.processor is not None:
        with open(os.path.join(folder, PROCESSOR_FILE), "w", encoding="utf-8") as stream:
            json.dump(export.processor, stream, indent=2)
            stream.write("\n")
    _write_card(os.path.join(folder, CARD_FILE), card)
    umask = _umask()
    for name in os.listdir(folder):  # safetensors writes 0600; the folder's files as any file's
        os.chmod(os.path.join(folder, name), 0o666 & ~umask)


def _save_tensors(tensors, path):
    """safetensors' `save_file`, whose writer reports a full disk as a SafetensorError naming no
    file ("I/O error: No space left on device (os error 28)"): raised as the OSError it is, with
    the file, so that the error says which write the disk stopped."""
    try:
        save_file(tensors, path, metadata={"format": "pt"})
    except SafetensorError as error:
        if f"os error {errno.ENOSPC})" in str(error):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from None
        raise


def _write_card(path, card):
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(card)


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _processor_backend(export):
    """The backend argument of the card's AutoImageProcessor line: PIL where the processor has a
    PIL implementation; DINOv3ViTImageProcessor has only torchvision's (torchvision installed)."""
    processor = (export.processor or {}).get("image_processor_type", "")
    return "" if processor.startswith("DINOv3") else ', backend="pil"'

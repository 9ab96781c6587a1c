"""Convert any ViT checkpoint into paddle-vit weights for a named model.

    paddle-vit convert --weights SRC --model NAME --out OUT.safetensors|OUT.pdparams [-o key=value ...]
    paddle-vit convert --weights FOLDER --out OUT.safetensors   (a timm Hub or Hugging Face folder names its model)
    paddle-vit convert -c CONFIG [--weights SRC] --out OUT ...
    paddle-vit convert --weights SRC [--model NAME | -c CONFIG] --out DIR --to timm [--overwrite]

SRC is a timm .safetensors/.pth/.bin, a JAX .npz, a Hugging Face save_pretrained folder (or its
model.safetensors), a PaddleClas/PLSC .pdparams, a torchvision ViT state dict (.pth/.safetensors)
or a paddle-vit file (the positional form
`convert_weights.py SRC ...` still works). The model is built with the options the checkpoint
implies (class count, pre-logits layer, Hugging Face's config.json, the JAX tanh GELU, ...);
overrides are model (ViTConfig) fields, values read as YAML: -o num_classes=10 -o image_size=384,
and win. With -c, the model is the recipe's (model.name and the model keys it sets) and SRC
defaults to its model.pretrained. The position embedding is resampled and the head
re-initialised as paddle_vit.load_pretrained does; the report says what happened.
.safetensors records the model's options in its metadata; .pdparams holds tensors only.

With --to timm, DIR becomes a timm Hub folder (config.json, model.safetensors in timm's names,
README.md), as timm's save_for_hf writes one: ``timm.create_model("local-dir:DIR",
pretrained=True)`` loads it and computes the same logits. With --to huggingface, a transformers
folder (config.json, preprocessor_config.json, model.safetensors, README.md) for the model's
transformers class, whose ``from_pretrained(DIR)`` loads it: ViTForImageClassification (the plain
ViT reading the class token), Dinov2Model, Dinov2WithRegistersModel, CLIPVisionModel[WithProjection],
SiglipVisionModel or DeiTForImageClassificationWithTeacher. SRC may then also be a training
run's .pdckpt (its recipe names the model and gives the preprocessing and class names). A model
the target cannot express is one error line saying why; an existing non-empty DIR needs
--overwrite.
"""
import dataclasses
import json
import logging
import os

import yaml

from . import ArgumentParser, add_common_arguments, run
from .. import create_model, fileio
from ..config import load_config
from ..deploy.predict import load_classifier
from ..engine.logging_utils import setup_logging
from ..errors import ConfigError
from ..models import ViTConfig
from ..weights import RESAMPLE_METHODS, save_pretrained, save_weights
from ..weights.folders import resolve_name
from ..weights.source import resolve_weights
from ..weights.publish import check_target, run_summary

# options a .pdparams cannot record, which a later load must be told
COMPUTED_OPTIONS = ("layer_norm_epsilon", "gelu", "qk_scale")


def parse_override(text):
    """"key=value" or "model.key=value" -> (key, value), the value read as YAML (10 -> int, null -> None)."""
    key, separator, value = text.partition("=")
    key = key.strip()
    if key.startswith("model."):
        key = key[len("model."):]
    if not separator or not key:
        raise ConfigError(f"override {text!r} is not key=value, e.g. -o num_classes=10")
    try:
        return key, yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as error:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({error.problem})") from None


def build_parser():
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", metavar="SRC", nargs="?", help="checkpoint to convert (or --weights)")
    parser.add_argument("--weights", metavar="SRC", help="checkpoint to convert: a file or a Hugging Face folder")
    parser.add_argument("--model", help="registered model name, e.g. vit_base_patch16_224")
    parser.add_argument("-c", "--config", help="a YAML recipe: its model section names the model")
    parser.add_argument("--out", required=True, help="output file, .safetensors or .pdparams (with --to: a folder)")
    parser.add_argument("--to", choices=("timm", "huggingface"),
                        help="publish as a timm Hub folder, or a folder for the model's transformers class "
                             "(ViTForImageClassification, Dinov2Model, CLIPVisionModel, SiglipVisionModel, ...)")
    parser.add_argument("--overwrite", action="store_true", help="with --to: replace a non-empty --out folder")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="model argument override (repeatable), e.g. -o num_classes=10")
    parser.add_argument("--resample", choices=sorted(RESAMPLE_METHODS),
                        help="position-embedding resampling (default: as the checkpoint's own code does)")
    parser.add_argument("--non-strict", action="store_true",
                        help="leave tensors the checkpoint lacks at their initial values, ignore extra ones")
    add_common_arguments(parser)
    return parser


def model_request(args):
    """(model name, the checkpoint's `WeightsSource`, overrides, resample) from the command line
    and the recipe; the checkpoint is resolved once, here."""
    if args.source and args.weights:
        raise ConfigError("give the checkpoint once: as SRC or as --weights, not both")
    if args.model and args.config:
        raise ConfigError("name the model with --model NAME or with a recipe -c CONFIG (one of them)")
    source, resample = args.weights or args.source, args.resample
    overrides = {}
    if args.config:
        config = load_config(args.config)
        name = config.model.name
        overrides.update(config.model.vit_overrides())
        source = source or config.model.pretrained
        resample = resample or config.model.pretrained_resample
        if not source:
            raise ConfigError(f"{args.config} has no model.pretrained: name the checkpoint with --weights SRC")
    else:
        name = args.model
    if not source:
        raise ConfigError("name the checkpoint to convert: --weights SRC")
    overrides.update(parse_override(text) for text in args.override)
    source = resolve_weights(source)
    if name is None and source.model is None:
        raise ConfigError("name the model with --model NAME or with a recipe -c CONFIG (one of them); only a "
                          "timm Hub or Hugging Face folder says what model it is")
    # a name checked against the folder here, so that the error names the option it came from
    name = resolve_name(name, overrides, source.model, "--model" if args.model else f"{args.config}: model.name",
                        source.description)
    return name, source, overrides, resample


def convert(argv):
    args = build_parser().parse_args(argv)
    setup_logging(logging.WARNING, to="stderr")  # a warning is one "warning:" line; stdout says what was written
    if args.to is not None:
        return publish(args)
    if args.overwrite:
        raise ConfigError("--overwrite replaces a --to folder; a converted .safetensors/.pdparams is always replaced")
    name, source, overrides, resample = model_request(args)
    # --out is checked before the checkpoint is read; a folder made for it goes when the conversion fails
    with fileio.output_file(args.out, "--out", (".safetensors", ".pdparams")):
        model = create_model(name, pretrained=source, resample=resample, strict=not args.non_strict, **overrides)
        save_weights(model, args.out, model_name=name)
    print(model.load_report)
    print(f"wrote {args.out}")
    defaults = {field.name: field.default for field in dataclasses.fields(ViTConfig)}
    unusual = {option: getattr(model.config, option) for option in COMPUTED_OPTIONS
               if getattr(model.config, option) != defaults[option]}
    if unusual and args.out.lower().endswith(".pdparams"):
        flags = " ".join(f"-o model.{option}={value}" for option, value in unusual.items())
        print(f"note: a .pdparams records no options; load it with {flags} (a .safetensors output records them)")
    return 0


def publish(args):
    """--to timm|huggingface: the model SRC gives, written by `save_pretrained` as a timm Hub folder or a
    folder for the model's transformers class."""
    if args.source and args.weights:
        raise ConfigError("give the checkpoint once: as SRC or as --weights, not both")
    if args.model and args.config:
        raise ConfigError("name the model with --model NAME or with a recipe -c CONFIG (one of them)")
    if args.resample or args.non_strict:
        raise ConfigError("--resample and --non-strict are not used with --to: the model is published as it loads")
    source = args.weights or args.source
    if source is None and args.config:
        source = load_config(args.config).model.pretrained
    if not source:
        raise ConfigError("name the checkpoint to publish: --weights SRC")
    if args.out.lower().endswith((".safetensors", ".pdparams", ".pth", ".bin", ".json")):
        raise ConfigError(f"--to {args.to} writes a folder (config.json, model.safetensors, ...), and --out "
                          f"{args.out} names a file: give a folder, e.g. --out {os.path.splitext(args.out)[0]}")
    check_target(os.path.abspath(os.path.expanduser(args.out)), args.overwrite)  # before the weights are read
    overrides = [text if text.split("=", 1)[0].strip().count(".") else f"model.{text}" for text in args.override]
    classifier = load_classifier(source, config_path=args.config, model_name=args.model, overrides=overrides)
    run = run_summary(source) if str(source).endswith(".pdckpt") else None
    folder = save_pretrained(classifier.model, args.out, format=args.to, overwrite=args.overwrite,
                             name=classifier.model_name, preprocess=classifier.preprocess,
                             class_names=classifier.class_names, source=None if run else source, run=run)
    if args.to == "timm":
        print(f"wrote {folder} (timm Hub folder: config.json, model.safetensors, README.md); load it with "
              f"timm.create_model(\"local-dir:{folder}\", pretrained=True)")
    else:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as stream:
            architecture = json.load(stream)["architectures"][0]
        print(f"wrote {folder} (config.json, preprocessor_config.json, model.safetensors, README.md); load it with "
              f"transformers' {architecture}.from_pretrained(\"{folder}\")")
    return 0


COMMAND = convert


def main(argv=None):
    """``paddle-vit convert`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)

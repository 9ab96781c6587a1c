"""Export trained weights as a Paddle inference model (and ONNX) for deployment.

    paddle-vit export --weights PATH -c CONFIG --out DIR [--softmax] [--format paddle|onnx ...]
                      [--quantize int8 [--calibration N]]

Writes to DIR: inference.json + inference.pdiparams (paddle.jit.save, any batch size),
model.onnx with --format onnx (opset 17, built for ONNX Runtime; needs pip install -e ".[onnx]"),
model.int8.onnx with --quantize int8 (dynamic int8, or static QDQ calibrated on N train images
with --calibration N; its accuracy against fp32 on the recipe's val images is printed and
recorded in preprocess.json), model.safetensors (the weights alone, safe to share) and
preprocess.json (image size, resize and crop, mean, std, interpolation, class names, model
name), all that tools/predict.py --inference-model DIR needs.
"""
import argparse
import json
import logging

import paddle

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer
from ..deploy.export import Int8Export, export_classifier, import_paddle2onnx
from ..deploy.onnx_export import DEFAULT_OPSET
from ..deploy.predict import load_classifier
from ..deploy.quantize import image_batches, recipe_images
from ..engine.logging_utils import setup_logging
from ..errors import ConfigError, DataError


def build_parser():
    parser = ArgumentParser(description=__doc__.splitlines()[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="\n".join(__doc__.splitlines()[3:]))
    parser.add_argument("--weights", required=True, metavar="PATH",
                        help=".pdckpt, .pdparams, .safetensors or .npz weights, or a Hugging Face or timm Hub "
                             "folder")
    parser.add_argument("-c", "--config", help="the YAML recipe the weights were trained with (a .pdckpt "
                                               "carries its own)")
    parser.add_argument("--model", metavar="NAME", help="a registered model name instead of a recipe (default "
                                                        "data config's eval transform at the model's image size); "
                                                        "optional when --weights is a timm Hub or Hugging Face "
                                                        "folder")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="config override (repeatable)")
    parser.add_argument("--ema", action="store_true", help="export the EMA weights of a .pdckpt")
    parser.add_argument("--labels", metavar="FILE", help="class names to store, one per line (default: those "
                                                         "of a .pdckpt)")
    parser.add_argument("--out", required=True, metavar="DIR", help="the folder to write (created if needed)")
    parser.add_argument("--softmax", action="store_true",
                        help="end the network with a softmax: it outputs probabilities instead of logits")
    parser.add_argument("--format", action="append", choices=("paddle", "onnx"), metavar="{paddle,onnx}",
                        help="what to write (repeatable; default paddle): the Paddle inference model and/or "
                             "model.onnx through paddle2onnx")
    parser.add_argument("--opset", type=integer(1), help="ONNX opset version (default 17, the first with "
                                                         "LayerNormalization)")
    parser.add_argument("--quantize", choices=("int8",), help="also write model.int8.onnx (implies --format onnx): "
                                                             "onnxruntime's int8, dynamic unless --calibration "
                                                             "is given, with its accuracy gate against fp32 on "
                                                             "the recipe's val images")
    parser.add_argument("--calibration", type=integer(1), metavar="N",
                        help="static int8 (QDQ) calibrated on N images of the recipe's train split (or of "
                             "--gate-images)")
    parser.add_argument("--gate-images", nargs="+", metavar="PATH",
                        help="image files or folders for the int8 accuracy gate (top-1 agreement and logit "
                             "difference against fp32) instead of the recipe's val split, e.g. real photos for "
                             "converted ImageNet weights")
    add_common_arguments(parser)
    return parser


def export(argv):
    args = build_parser().parse_args(argv)
    setup_logging()
    formats = args.format or ["paddle"]
    if args.calibration is not None and not args.quantize:
        raise ConfigError("--calibration N goes with --quantize int8")
    if args.gate_images and not args.quantize:
        raise ConfigError("--gate-images goes with --quantize int8")
    if args.calibration is not None and args.calibration < 1:
        raise ConfigError(f"--calibration takes a positive number of images, got {args.calibration}")
    if args.quantize and "onnx" not in formats:
        formats = [*(args.format or []), "onnx"]
    if args.opset is not None and "onnx" not in formats:
        raise ConfigError(f"--opset {args.opset} goes with --format onnx (or --quantize int8)")
    if "onnx" in formats:
        import_paddle2onnx()  # say what to install before any work is done
    paddle.set_device("cpu")
    classifier = load_classifier(args.weights, args.config, args.model, args.override, use_ema=args.ema,
                                 labels=args.labels)
    int8 = int8_export(classifier, args.calibration, args.gate_images) if args.quantize else None
    written = export_classifier(classifier, args.out, softmax=args.softmax, formats=formats,
                                opset_version=args.opset or DEFAULT_OPSET, int8=int8)
    for role, path in written.items():
        print(f"{role}: {path}")
    if int8 is not None:
        print(int8_gate_line(written["metadata"]))
    print(f"predict with: python tools/predict.py --inference-model {args.out} IMAGE_OR_FOLDER")
    return 0


def int8_export(classifier, calibration, gate_images=None):
    """The int8 part of an export: the images of the accuracy gate (`gate_images`, unlabelled, or
    else the recipe's val split, labelled when its classes are the model's; none when the
    recipe's data cannot be read: the gate is then left out) and, for static int8, `calibration`
    images (of `gate_images`, or else of the recipe's train split)."""
    config, size = classifier.config, int(classifier.model.config.image_size)
    calibration_batches = None
    if calibration and gate_images:
        calibration_batches = image_batches(gate_images, classifier.preprocess, limit=calibration)
    elif calibration:
        calibration_batches, _, _ = recipe_images(config.data, classifier.preprocess, size, "train",
                                                  limit=calibration)
    gate_batches, gate_labels = (), None
    if gate_images:
        gate_batches = image_batches(gate_images, classifier.preprocess)
        if not gate_batches:  # asked for a gate: none is not a gate left out
            raise DataError(f"--gate-images: none of the images in {' '.join(gate_images)} could be read; "
                            f"expected image files the model can read")
    else:
        try:
            gate_batches, labels, classes = recipe_images(config.data, classifier.preprocess, size, "val")
            gate_labels = labels if classes == classifier.num_classes else None  # another label set: no top-1
        except (DataError, ConfigError) as error:
            logging.getLogger("paddle_vit").warning("no accuracy gate for the int8 model: the recipe's val images "
                                                    "cannot be read (%s); give --gate-images", error)
    return Int8Export(mode="static" if calibration else "dynamic", calibration_batches=calibration_batches,
                      gate_batches=gate_batches, gate_labels=gate_labels)


def int8_gate_line(metadata_path):
    """One line saying what the int8 model keeps of the float32 one, from the export's record."""
    with open(metadata_path, encoding="utf-8") as stream:
        int8 = json.load(stream)["int8"]
    gate = int8["gate"]
    if not gate:
        return f"int8 ({int8['mode']}): no accuracy gate (no images)"
    line = (f"int8 ({int8['mode']}) vs fp32 on {gate['images']} images: top-1 agreement "
            f"{gate['top1_agreement']:.4f}, largest logit difference {gate['max_logit_difference']:.4g} "
            f"({gate['max_relative_difference']:.2%} of the largest logit)")
    if "top1_fp32" in gate:
        points = 100 * (gate["top1_int8"] - gate["top1_fp32"])
        line += f"; val top-1 fp32 {gate['top1_fp32']:.4f}, int8 {gate['top1_int8']:.4f} ({points:+.2f} points)"
    return line


COMMAND = export


def main(argv=None):
    """``paddle-vit export`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)

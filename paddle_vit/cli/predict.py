"""Classify images with trained weights or an exported model.

    paddle-vit predict --weights PATH (-c CONFIG | --model NAME) IMAGE_OR_FOLDER ... [--topk 5]
    paddle-vit predict --weights FOLDER IMAGE_OR_FOLDER ...   (a timm Hub or Hugging Face folder)
    paddle-vit predict --inference-model DIR IMAGE_OR_FOLDER ... [--topk 5]

Prints ``file  label  probability`` lines (the top-k of every image, best first) or, with
--json, one JSON object per image (JSON Lines). A file that cannot be read is skipped with one
warning on stderr; the exit code is 0 when at least one image was classified.
"""
import argparse
import logging

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer
from ..deploy.inference import InferenceOptions, engine_for_model, load_export
from ..deploy.predict import (check_class_names, embed_files, format_embedding_json, format_embedding_text,
                              format_json, format_text, list_images, load_classifier, predict_files, read_labels)
from ..device import resolve_device, select_device
from ..engine.logging_utils import setup_logging
from ..errors import ConfigError, DataError

EPILOG = """\
where the model and its preprocessing come from:
  --weights with -c CONFIG   the recipe's model and its eval transform (data.eval_crop_pct,
                             mean, std, interpolation), exactly as tools/eval.py uses them
  --weights with --model NAME  the registered model (its image size) and the eval transform of
                             the default data config: plain resize to the model's size
                             (eval_crop_pct 1.0), bicubic, mean = std = 0.5; -o data.KEY=VALUE
                             and -o model.KEY=VALUE change them
  --weights FOLDER           a timm Hub or Hugging Face folder: the model its config.json says
                             (--model may be left out; one that contradicts it is an error)
  checkpoints that imply their own preprocessing (a timm Hub folder's pretrained_cfg, a Hugging
  Face preprocessor_config.json, PaddleClas/PLSC and JAX files) are fed as their own pipeline
  feeds them, file decoding included; each -o data.KEY (interpolation, mean, std,
  eval_crop_pct) or recipe data key replaces that value, and a warning says so
  --weights PATH.pdckpt alone  the recipe stored in the training checkpoint
  --inference-model DIR      the preprocess.json that tools/export.py wrote next to the model
class names: --labels FILE (one per line), else those the weights record (a .pdckpt, a Hugging
Face config.json's id2label) or an export's, else the class index.
the model's options (epsilon, GELU, q.k scale, pre-logits layer, class count) follow what the
weights imply, as paddle_vit.create_model(name, pretrained=...) does; -o model.KEY=VALUE wins.
"""


def build_parser():
    parser = ArgumentParser(description=__doc__.splitlines()[0], epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="IMAGE_OR_FOLDER",
                        help="image files, or folders searched recursively for .jpg .jpeg .png .bmp .webp .tif .tiff files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--weights", metavar="PATH",
                        help=".pdckpt, .pdparams, .safetensors, .npz weights, or a Hugging Face or timm Hub folder")
    source.add_argument("--inference-model", metavar="DIR", help="a folder written by tools/export.py")
    parser.add_argument("-c", "--config", help="the YAML recipe the weights were trained with")
    parser.add_argument("--model", metavar="NAME",
                        help="a registered model name instead of a recipe (default data config's eval transform "
                             "at the model's image size); optional when --weights is a timm Hub or Hugging Face "
                             "folder, which says what it is")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="config override for --weights (repeatable), e.g. -o model.image_size=384")
    parser.add_argument("--ema", action="store_true", help="use the EMA weights of a .pdckpt")
    parser.add_argument("--labels", metavar="FILE", help="class names, one per line, in class-index order")
    parser.add_argument("--topk", type=integer(1), default=5, help="how many classes to print per image (default 5)")
    parser.add_argument("--batch-size", type=integer(1), default=8, help="images per forward pass (default 8)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object per image: {"file", "predictions": [{"index", "label", '
                             '"probability"}, ...]}')
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                        help="auto: a GPU when Paddle has CUDA and one is visible, else the CPU")
    deploy = parser.add_argument_group("--inference-model options (GPU and TensorRT not measured on this "
                                       "project's machines)")
    parser.add_argument("--backend", choices=("auto", "paddle", "onnxruntime"), default="auto",
                        help="--inference-model: paddle.inference on the Paddle model, or onnxruntime on model.onnx "
                             "(auto: model.onnx where onnxruntime is the engine measured fastest on this kind of "
                             "CPU, AVX2, else the Paddle model when the export has one; model.int8.onnx with "
                             "--precision int8); --weights: onnxruntime runs the model exported to ONNX on the fly "
                             "(auto: eager, which starts fastest; onnxruntime for --precision int8)")
    deploy.add_argument("--no-mkldnn", action="store_true", help="switch oneDNN (MKLDNN) off on CPU")
    deploy.add_argument("--cpu-threads", type=integer(1),
                        help="threads of the CPU math library (default: all cores this process may use)")
    deploy.add_argument("--tensorrt", action="store_true", help="TensorRT subgraphs on GPU (needs --device gpu)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16", "int8"), default="fp32",
                        help="fp32 (default); bf16: oneDNN's bfloat16 kernels through paddle.inference on a CPU "
                             "with AVX512-BF16 or AMX (exported models and --weights); int8 on CPU: onnxruntime on "
                             "the dynamically quantized ONNX model (an export's model.int8.onnx, or --weights "
                             "quantized on the fly), any x86-64 CPU; fp16, int8 on GPU: TensorRT "
                             "(--inference-model with --tensorrt)")
    add_common_arguments(parser)
    return parser


def check_arguments(args):
    if args.inference_model:
        given = [flag for flag, value in (("-c", args.config), ("--model", args.model), ("-o", args.override),
                                          ("--ema", args.ema)) if value]
        if given:
            raise ConfigError(f"{', '.join(given)} only apply to --weights; an exported model carries its "
                              f"preprocessing in preprocess.json")
    else:
        given = [flag for flag, value in (("--no-mkldnn", args.no_mkldnn), ("--cpu-threads", args.cpu_threads),
                                          ("--tensorrt", args.tensorrt), ("--backend paddle", args.backend == "paddle"))
                 if value]
        if given:
            raise ConfigError(f"{', '.join(given)} only apply to --inference-model")
        if args.precision == "fp16":
            raise ConfigError("--precision fp16 is TensorRT's (--inference-model with --tensorrt on a GPU); "
                              "with --weights use fp32, bf16 or int8")
        if args.precision == "bf16" and args.backend == "onnxruntime":
            raise ConfigError("--precision bf16 is paddle.inference's oneDNN path; with --backend onnxruntime "
                              "use fp32 or int8")


def predict(argv):
    args = build_parser().parse_args(argv)
    setup_logging(logging.WARNING, to="stderr")  # a skipped image: one warning line; stdout: predictions
    check_arguments(args)
    paths = list_images(args.inputs)
    if args.weights:
        select_device(args.device, "--device")
        predictor = load_classifier(args.weights, args.config, args.model, args.override, use_ema=args.ema,
                                    labels=args.labels)
        if args.precision == "bf16":  # the model traced and run by paddle.inference with oneDNN bf16
            predictor.engine = engine_for_model(predictor.model, "predictor", "bf16")
        elif args.backend == "onnxruntime" or args.precision == "int8":  # exported (and quantized) on the fly
            predictor.engine = engine_for_model(predictor.model, "onnxruntime", args.precision)
        transform, class_names = predictor.preprocess, predictor.class_names  # files decoded as its pipeline does
    else:
        device = resolve_device(args.device, "--device")
        options = InferenceOptions(device=device, mkldnn=not args.no_mkldnn, cpu_threads=args.cpu_threads,
                                   tensorrt=args.tensorrt, precision=args.precision)
        predictor = load_export(args.inference_model, options, backend=args.backend)
        transform, class_names = predictor.preprocess, predictor.class_names
        if args.labels:
            class_names = check_class_names(read_labels(args.labels), predictor.num_classes,
                                            f"labels file {args.labels}")

    skipped, classified = [], 0
    if predictor.outputs_embedding:  # no head (DINOv2, SigLIP) or a projection (CLIP): an embedding
        results = embed_files(predictor, paths, transform, args.batch_size, skipped)
        formats = (format_embedding_json, format_embedding_text)
    else:
        results = predict_files(predictor, paths, transform, args.batch_size, args.topk, class_names, skipped)
        formats = (format_json, format_text)
    for path, result in results:
        lines = [formats[0](path, result)] if args.json else formats[1](path, result)
        print("\n".join(lines), flush=True)
        classified += 1
    if not classified:
        raise DataError(f"none of the {len(paths)} image(s) could be read")
    return 0


COMMAND = predict


def main(argv=None):
    """``paddle-vit predict`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)

"""Export trained weights as a Paddle inference model (and ONNX) for deployment.

    paddle-vit export --weights PATH -c CONFIG --out DIR [--softmax] [--format paddle|onnx ...]

Writes to DIR: inference.json + inference.pdiparams (paddle.jit.save, any batch size),
model.onnx with --format onnx (needs pip install -e ".[onnx]"), model.safetensors (the weights
alone, safe to share) and preprocess.json (image size, resize and crop, mean, std,
interpolation, class names, model name), all that tools/predict.py --inference-model DIR needs.
"""
import argparse

from . import ArgumentParser, add_common_arguments, in_process, setup_logging


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
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset version (default 17, the first with "
                                                            "LayerNormalization)")
    add_common_arguments(parser)
    return parser


def export(argv):
    args = build_parser().parse_args(argv)
    setup_logging()
    import paddle

    from ..deploy.export import export_classifier, import_paddle2onnx
    from ..deploy.predict import load_classifier

    formats = args.format or ["paddle"]
    if "onnx" in formats:
        import_paddle2onnx()  # say what to install before any work is done
    paddle.set_device("cpu")
    classifier = load_classifier(args.weights, args.config, args.model, args.override, use_ema=args.ema,
                                 labels=args.labels)
    written = export_classifier(classifier, args.out, softmax=args.softmax, formats=formats,
                                opset_version=args.opset)
    for role, path in written.items():
        print(f"{role}: {path}")
    print(f"predict with: python tools/predict.py --inference-model {args.out} IMAGE_OR_FOLDER")
    return 0


COMMAND = export
main = in_process(COMMAND)  # main(argv=None) -> exit code, in this process

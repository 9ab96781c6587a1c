"""Evaluate weights on a validation split.

    python tools/eval.py -c CONFIG --weights PATH [-o section.key=value ...]
    python tools/eval.py --model NAME --weights PATH [-o data.dataset=imagefolder -o data.root=DIR ...]

Prints per-class accuracy, then one JSON line with top1, top5, loss and num_samples (the
last line of stdout, for scripts). Accepts training checkpoints (.pdckpt, --ema for their EMA
weights), .pdparams, and any checkpoint `paddle_vit.load_pretrained` reads (timm, Hugging Face
folders, PaddleClas/PLSC, JAX .npz): the model is built with the options the weights imply, so
--model NAME needs no hand-typed overrides.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddle_vit.cli import add_common_arguments, run, setup_logging  # noqa: E402
from paddle_vit.errors import ConfigError  # noqa: E402
from paddle_vit.runtime import relaunch_with_allocator  # noqa: E402


def main(argv):
    parser = argparse.ArgumentParser(description="Evaluate a Vision Transformer on a validation split.")
    parser.add_argument("-c", "--config", help="the YAML recipe the weights were trained with")
    parser.add_argument("--model", metavar="NAME",
                        help="a registered model name instead of a recipe (the default data config; -o data.KEY=...)")
    parser.add_argument("--weights", required=True,
                        help=".pdckpt, .pdparams, .safetensors, .npz weights or a Hugging Face folder")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--ema", action="store_true", help="evaluate the EMA weights of a .pdckpt")
    parser.add_argument("--confusion-matrix", metavar="PNG", help="also draw the confusion matrix to PNG")
    add_common_arguments(parser)
    args = parser.parse_args(argv)

    from paddle_vit.config import load_config
    from paddle_vit.engine.evaluator import run_evaluation

    setup_logging()
    if bool(args.config) == bool(args.model):
        raise ConfigError("name the model with a recipe (-c CONFIG) or a registered name (--model NAME), one of them")
    config = (load_config(args.config, args.override) if args.config
              else load_config(data={"model": {"name": args.model}}, overrides=args.override))
    png = args.confusion_matrix or (os.path.join(config.output_dir, "confusion_matrix.png")
                                    if config.eval.confusion_matrix else None)
    metrics = run_evaluation(config, args.weights, use_ema=args.ema, confusion_png=png)
    names = metrics["class_names"]
    for name, accuracy in zip(names, metrics["per_class_accuracy"]):
        print(f"class {name}: accuracy {accuracy:.4f}")
    if png:
        print(f"confusion matrix: {png}")
    summary = {key: metrics[key] for key in ("top1", "top5", "loss", "num_samples")}
    summary["per_class_accuracy"] = dict(zip(names, metrics["per_class_accuracy"]))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    relaunch_with_allocator()  # with tcmalloc as malloc when installed (paddle_vit/runtime.py)
    sys.exit(run(main))

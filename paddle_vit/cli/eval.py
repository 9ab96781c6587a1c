"""Evaluate weights on a validation split.

    paddle-vit eval -c CONFIG --weights PATH [-o section.key=value ...]
    paddle-vit eval --model NAME --weights PATH [-o data.dataset=imagefolder -o data.root=DIR ...]
    paddle-vit eval --weights FOLDER [-o ...]      (a timm Hub or Hugging Face folder names its model)
    paddle-vit eval ... --protocol fewshot [--shots 1,5,10,25] [--l2-reg 1024] [--seeds 3]

Prints per-class accuracy, then one JSON line with top1, top5, loss and num_samples (the
last line of stdout, for scripts). With --protocol fewshot it measures the paper's other metric
instead, few-shot linear accuracy of the frozen representation as big_vision computes it
(paddle_vit/fewshot.py): the training split is the pool the shots are drawn from, the
validation split the test; the features of both are computed once and every (shots, seed)
regression reuses them; one line per shots, then a JSON line with every accuracy, the mean per
shots, num_train, num_test and feature_dim. Its defaults are the recipe's eval.fewshot_shots,
eval.fewshot_l2_reg and eval.fewshot_seeds. Accepts training checkpoints (.pdckpt, --ema for their EMA
weights), .pdparams, and any checkpoint `paddle_vit.load_pretrained` reads (timm, Hugging Face
folders, PaddleClas/PLSC, JAX .npz, torchvision state dicts): the model is built with the options the weights imply, so
--model NAME needs no hand-typed overrides.
"""
import collections
import contextlib
import json
import os

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer, integer_list, number
from .. import fileio
from ..config import keys_set
from ..device import rank
from ..engine.evaluator import run_evaluation, save_confusion_matrix_png
from ..engine.fewshot_eval import run_fewshot_evaluation
from ..engine.logging_utils import setup_logging
from ..errors import ConfigError
from ..recipe import config_for_weights
from ..viz import FIGURE_FORMATS
from ..weights.source import resolve_weights


def evaluate(argv):
    parser = ArgumentParser(description="Evaluate a Vision Transformer on a validation split.")
    parser.add_argument("-c", "--config", help="the YAML recipe the weights were trained with")
    parser.add_argument("--model", metavar="NAME",
                        help="a registered model name instead of a recipe (the default data config; -o data.KEY=...); "
                             "optional when --weights is a timm Hub or Hugging Face folder, which says what it is")
    parser.add_argument("--weights", required=True,
                        help=".pdckpt, .pdparams, .safetensors, .npz weights, or a Hugging Face or timm Hub folder")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--ema", action="store_true", help="evaluate the EMA weights of a .pdckpt")
    parser.add_argument("--confusion-matrix", metavar="PNG",
                        help="also draw the confusion matrix to PNG (.png, .svg or .pdf; the folder is created)")
    parser.add_argument("--protocol", choices=("classification", "fewshot"), default="classification",
                        help="classification (default): the head's accuracy; fewshot: the few-shot linear accuracy "
                             "of the frozen representation (the paper's Figure 4/5 metric)")
    parser.add_argument("--shots", metavar="K,K,...", type=integer_list(1, distinct=True, example="1,5,10,25"),
                        help="(fewshot) images per class, comma-separated (default: eval.fewshot_shots, 1,5,10,25)")
    parser.add_argument("--l2-reg", metavar="L2", type=number(0),
                        help="(fewshot) the ridge penalty (default: eval.fewshot_l2_reg, 1024)")
    parser.add_argument("--seeds", metavar="N", type=integer(1), help="(fewshot) draws, seeds 0 .. N-1 (default: eval.fewshot_seeds, 3)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging()
    if args.protocol == "fewshot":
        if args.confusion_matrix:
            raise ConfigError("--confusion-matrix draws the head's predictions: it goes with --protocol classification")
        config, source = evaluation_config(args)
        report_fewshot(args, config, source, *fewshot_options(args, config))
        return 0
    given = [option for option, value in (("--shots", args.shots), ("--l2-reg", args.l2_reg),
                                          ("--seeds", args.seeds)) if value is not None]
    if given:
        raise ConfigError(f"{', '.join(given)} set the few-shot evaluation: add --protocol fewshot")
    config, source = evaluation_config(args)
    target = confusion_matrix_target(args, config)
    # the figure's place is checked before the evaluation runs; a folder made for it goes when it fails
    with fileio.output_file(*target, FIGURE_FORMATS) if target else contextlib.nullcontext() as figure:
        report(args, config, source, figure)
    return 0


def evaluation_config(args):
    """(the config to evaluate with, the weights' `WeightsSource`): the weights resolved once
    here, the recipe chosen by `paddle_vit.recipe.config_for_weights` of the options."""
    source = resolve_weights(args.weights)
    return config_for_weights(source, args.config, args.model, args.override), source


def unique_class_keys(names):
    """The class names as JSON keys: a name that several classes share (ImageNet's two "crane"s,
    134 and 517) gets its class index, "crane (134)", so that no class drops out of the dict."""
    counts = collections.Counter(names)
    return [f"{name} ({index})" if counts[name] > 1 else name for index, name in enumerate(names)]


def report(args, config, source, figure):
    """Evaluate `source`, print the per-class accuracy and the JSON summary, draw the confusion matrix to
    `figure` (None: none)."""
    metrics = run_evaluation(config, source, use_ema=args.ema,
                             chosen_data_keys=keys_set("data", args.config, args.override))
    names = metrics["class_names"]
    for name, accuracy in zip(names, metrics["per_class_accuracy"]):
        print(f"class {name}: accuracy {accuracy:.4f}")
    summary = {key: metrics[key] for key in ("top1", "top5", "loss", "num_samples", "precision", "engine")}
    chosen = "" if config.eval.engine == metrics["engine"] else f": {metrics['engine']}, {metrics['engine_choice']}"
    print(f"precision: {metrics['precision']} (eval.engine={config.eval.engine}{chosen})")
    summary["per_class_accuracy"] = dict(zip(unique_class_keys(names), metrics["per_class_accuracy"]))
    if figure and rank() == 0:  # after the numbers are out: a full disk costs the figure only
        save_confusion_matrix_png(metrics["confusion_matrix"], names, figure)
        print(f"confusion matrix: {figure}")
    print(json.dumps(summary))


def fewshot_options(args, config):
    """(shots, l2_reg, seeds) from --shots, --l2-reg, --seeds or the recipe's eval.fewshot_* keys."""
    shots = list(config.eval.fewshot_shots)
    if args.shots is not None:
        shots = args.shots
    l2_reg = config.eval.fewshot_l2_reg if args.l2_reg is None else args.l2_reg
    seeds = config.eval.fewshot_seeds if args.seeds is None else args.seeds
    return shots, l2_reg, seeds


def report_fewshot(args, config, source, shots, l2_reg, seeds):
    """Measure the few-shot accuracy of `source`; print one line per shots, then the JSON summary."""
    metrics = run_fewshot_evaluation(config, source, shots, l2_reg, seeds, use_ema=args.ema,
                                     chosen_data_keys=keys_set("data", args.config, args.override))
    print(f"few-shot linear accuracy: {metrics['num_train']} pool images, {metrics['num_test']} test images, "
          f"{metrics['feature_dim']} features, {metrics['num_classes']} classes, l2_reg {metrics['l2_reg']:g}")
    for k in metrics["shots"]:
        per_seed = ", ".join(f"{value:.4f}" for value in metrics["accuracy"][k])
        print(f"{k}-shot: {metrics['mean'][k]:.4f} (seeds {metrics['seeds']}: {per_seed})")
    summary = {"protocol": "fewshot", "shots": metrics["shots"], "seeds": metrics["seeds"],
               "l2_reg": metrics["l2_reg"],
               "accuracy": {str(k): values for k, values in metrics["accuracy"].items()},
               "mean": {str(k): value for k, value in metrics["mean"].items()},
               "num_train": metrics["num_train"], "num_test": metrics["num_test"],
               "feature_dim": metrics["feature_dim"], "num_classes": metrics["num_classes"]}
    print(json.dumps(summary))


def confusion_matrix_target(args, config):
    """(where the confusion matrix goes, the option that says so): --confusion-matrix, or with
    eval.confusion_matrix true confusion_matrix_<weights>.png in the run folder the weights
    belong to (else in config.output_dir); None for no figure."""
    if args.confusion_matrix:
        return args.confusion_matrix, "--confusion-matrix"
    if not config.eval.confusion_matrix:
        return None
    weights = os.path.abspath(os.path.expanduser(args.weights))
    folder = os.path.dirname(weights)
    if os.path.basename(folder) == "checkpoints":
        folder = os.path.dirname(folder)  # <run>/checkpoints/best.pdparams -> <run>
    else:
        folder = config.output_dir
    stem = os.path.splitext(os.path.basename(weights.rstrip(os.sep)))[0]
    return os.path.join(folder, f"confusion_matrix_{stem}.png"), "eval.confusion_matrix"


COMMAND = evaluate


def main(argv=None):
    """``paddle-vit eval`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)

"""The paper's data-size experiment in miniature: ViT, hybrid and ResNet on growing fractions of
the digits (paper Section 4.3, Figures 3-4; notebooks/03_data_size_and_inductive_bias.ipynb).

    paddle-vit data-size-experiment --out docs/images [--fractions 0.1 0.25 0.5 1] [--seeds 0 1 2] [--shots 1 5 10]

Each trained model is measured the paper's two ways: its validation top-1, and the few-shot linear
accuracy of its frozen representation (k images of each class from the run's own training subset,
regularised least squares as big_vision's fewshot_lsr; the paper's Figure 4 metric). Writes
data_size_experiment.png (two panels), data_size_experiment.json (every run's numbers and the
spread over the seeds) and data_size_experiment.csv (one row per family, fraction and metric: mean,
std, min, max and each seed's value) into --out, and prints both tables (mean +- std).
"""
import contextlib
import csv
import json
import logging
import os
import signal
import tempfile

import paddle

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer, number
from ..engine.logging_utils import setup_logging
from ..errors import DataError
from ..experiments.data_size import (BATCH_SIZE, check_fractions_keep_a_batch, data_size_figure, result_rows,
                                     run_data_size_experiment)
from ..fileio import atomic_write, output_folder


def experiment(argv):
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the figure and the numbers")
    parser.add_argument("--fractions", type=number(above=0, maximum=1), nargs="+", default=[0.1, 0.25, 0.5, 1.0])
    parser.add_argument("--seeds", type=integer(0, 2 ** 32 - 1), nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=integer(1), default=150, help="optimizer steps of every run (default 150)")
    parser.add_argument("--shots", type=integer(1), nargs="+", default=[1, 5, 10],
                        help="few-shot evaluation: images of each class (default 1 5 10)")
    parser.add_argument("--workers", type=integer(1), help="runs side by side (default: one per core, at most 4)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    args.fractions, args.seeds = sorted(set(args.fractions)), sorted(set(args.seeds))  # a run each, once
    check_fractions_keep_a_batch(args.fractions, BATCH_SIZE)  # said now, not after the other runs
    # a file, a read-only folder: said now, not after the runs; a folder made here goes if they fail
    with output_folder(args.out, "--out"), sigterm_as_interrupt():
        run_and_report(args)
    return 0


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM (a scheduler's stop, `kill`) as Ctrl-C while the runs go: they end, the work
    folder is removed, one line and exit code 130; not Paddle's handler, which printed its C++
    stack and left the work folder in /tmp. The previous handler is back after."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_and_report(args):
    """Train every (family, fraction, seed), write the figure and the numbers into args.out,
    print the tables."""
    setup_logging(logging.WARNING)
    paddle.set_device("cpu")

    def progress(family, fraction, seed, accuracy, seconds, fewshot):
        shots = ", ".join(f"{k}-shot {value:.3f}" for k, value in fewshot.items())
        print(f"{family:7} fraction {fraction:<5} seed {seed}: val top-1 {accuracy:.3f}, {shots} ({seconds:.1f} s)",
              flush=True)
    with tempfile.TemporaryDirectory(prefix="data_size_") as work:
        results = run_data_size_experiment(work, args.fractions, args.seeds, steps=args.steps, workers=args.workers,
                                           shots=sorted(set(args.shots)), progress=progress)
    write_results(results, args.out)
    print_tables(results)
    print(f"wrote {os.path.join(args.out, 'data_size_experiment.png')}")


def write_results(results, out):
    """data_size_experiment.json, .csv and .png into `out`, each written whole or not at all."""
    def write_json(temporary):
        with open(temporary, "w") as stream:
            json.dump(results, stream, indent=1)

    def write_csv(temporary):
        header, rows = result_rows(results)
        with open(temporary, "w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(header)
            writer.writerows(rows)

    def write_png(temporary):
        data_size_figure(results).savefig(temporary, dpi=110, format="png")

    for name, write in (("json", write_json), ("csv", write_csv), ("png", write_png)):
        path = os.path.join(out, f"data_size_experiment.{name}")
        try:
            atomic_write(path, write)
        except OSError as error:
            raise DataError(f"cannot write {path}: {error.strerror or error}; the previous one is kept") from None


def print_tables(results):
    """One Markdown table per metric: mean +- std over the seeds, per family and training-set size."""
    metrics = [("val_top1", "validation top-1 of the trained model")] + [
        (f"fewshot_{k}shot", f"linear {k}-shot accuracy of the frozen representation") for k in results["shots"]]
    for metric, title in metrics:
        print(f"\n{title}:")
        print("| family | parameters | " + " | ".join(f"{n} images" for n in results["train_images"]) + " |")
        print("|---|---|" + "---|" * len(results["train_images"]))
        for family, by_metric in results["summary"].items():
            cells = [f"{point['mean']:.3f} +- {point['std']:.3f}" for point in by_metric[metric]]
            print(f"| {family} | {results['parameters'][family]:,} | " + " | ".join(cells) + " |")


COMMAND = experiment


def main(argv=None):
    """``paddle-vit data-size-experiment`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)

"""DeiT's answer to the ViT's data-hunger with DeiT's budget: no teacher, hard and soft distillation.

The digits ViT is trained long with DeiT's augmentation, without a teacher and with hard and soft
distillation from the digits ResNet (Touvron et al. 2021;
notebooks/03_data_size_and_inductive_bias.ipynb, section 6).

    paddle-vit deit-budget-experiment --out docs/images [--fractions 0.25 1] [--seeds 0 1 2] [--steps 5500]
    paddle-vit deit-budget-experiment --out /tmp/deit --quick      # a few steps: checks it runs

Every student is read DeiT's three ways (Table 3: its class head, its distillation head, their
mean) on the 359 validation digits, with its agreement with the teacher (Table 4). Writes
deit_budget_experiment.json (every run's numbers and the spread over the seeds) and
deit_budget_experiment.png (and deit_budget_experiment.zh-CN.png, its words in Chinese, where the
machine has a CJK font) into --out, and prints the table (mean ± std over the seeds).

The runs are kept in --work (default output/deit_budget_experiment/), one folder each with its
answer written last: run again, the experiment goes on from the runs that finished.
"""
import json
import logging
import os

import paddle

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer, number
from ..engine.logging_utils import setup_logging
from ..errors import ConfigError, DataError
from ..experiments.data_size import check_fractions_keep_a_batch
from ..experiments.deit_budget import (BATCH_SIZE, FRACTIONS, HEADS, MODES, QUICK, SEEDS, STEPS, deit_budget_figure,
                                       head_accuracy, run_deit_budget_experiment, table_rows)
from ..fileio import atomic_write, output_folder, writable_folder
from ..figure_text import find_cjk_font, use_language

NAME = "deit_budget_experiment"


def experiment(argv):
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the figure and the numbers")
    parser.add_argument("--work", default=os.path.join("output", NAME),
                        help="folder of the runs, kept to go on from (default output/deit_budget_experiment)")
    parser.add_argument("--fractions", type=number(above=0, maximum=1), nargs="+",
                        help=f"of the training split (default {' '.join(map(str, FRACTIONS))})")
    parser.add_argument("--seeds", type=integer(0, 2 ** 32 - 1), nargs="+",
                        help=f"(default {' '.join(map(str, SEEDS))})")
    parser.add_argument("--steps", type=integer(1),
                        help=f"optimizer steps of batch {BATCH_SIZE} of every run (default {STEPS})")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES), metavar="MODE",
                        help="students: " + ", ".join(repr(mode) for mode in MODES) + " (default: all)")
    parser.add_argument("--workers", type=integer(1), help="runs side by side (default: one per core, at most 4)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['steps']} steps, fraction {QUICK['fractions'][0]}, seed 0: checks that it runs")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    given = [f"--{name}" for name in ("fractions", "seeds", "steps") if getattr(args, name) is not None]
    if args.quick and given:  # --quick would set them over the user's values
        raise ConfigError(f"--quick sets {', '.join(given)} itself; give --quick or {' and '.join(given)}, not both")
    defaults = QUICK if args.quick else {"fractions": FRACTIONS, "seeds": SEEDS, "steps": STEPS}
    args.fractions = sorted(set(args.fractions or defaults["fractions"]))
    args.seeds = sorted(set(args.seeds or defaults["seeds"]))
    args.steps = args.steps or defaults["steps"]
    args.modes = [mode for mode in MODES if mode in args.modes]
    check_fractions_keep_a_batch(args.fractions, BATCH_SIZE)  # said now, not after the other runs
    # a file, a read-only folder: said now, not after the runs; a folder made here goes if they fail
    with output_folder(args.out, "--out"):
        writable_folder(args.work, "--work")
        run_and_report(args)
    return 0


def run_and_report(args):
    """Train every run not yet in args.work, write the numbers and the figures, print the table."""
    setup_logging(logging.WARNING)
    paddle.set_device("cpu")

    def progress(job, outcome, skipped):
        who = "teacher (ResNet)" if job["role"] == "teacher" else f"ViT, {job['mode']}"
        heads = ", ".join(f"{head} {head_accuracy(outcome, head):.3f}"
                          for head in HEADS if head in outcome["predictions"])
        when = "finished before" if skipped else f"{outcome['seconds']:.0f} s"
        print(f"{who:17} fraction {job['fraction']:<5} seed {job['seed']}: val top-1 {heads} ({when})", flush=True)

    results = run_deit_budget_experiment(args.work, args.fractions, args.seeds, args.steps, args.modes,
                                         workers=args.workers, progress=progress)
    write_results(results, args.out)
    print_table(results)
    print(f"{results['seconds'] / 60:.1f} minutes in all ({results['run_seconds'] / 60:.1f} minutes of runs); "
          f"wrote {os.path.join(args.out, NAME + '.json')} and the figure")


def write_results(results, out):
    """deit_budget_experiment.json and .png (and .zh-CN.png with a CJK font) into `out`, each
    written whole or not at all."""
    def write_json(temporary):
        with open(temporary, "w") as stream:
            json.dump(results, stream, indent=1)

    def png_writer(language):
        def write_png(temporary):
            use_language(language)
            try:
                deit_budget_figure(results).savefig(temporary, dpi=110, format="png")
            finally:
                use_language("en")
        return write_png

    files = [(f"{NAME}.json", write_json), (f"{NAME}.png", png_writer("en"))]
    if find_cjk_font() is not None:
        files.append((f"{NAME}.zh-CN.png", png_writer("zh-CN")))
    for name, write in files:
        path = os.path.join(out, name)
        try:
            atomic_write(path, write)
        except OSError as error:
            raise DataError(f"cannot write {path}: {error.strerror or error}; the previous one is kept") from None


def print_table(results):
    """DeiT's Table 3 in Markdown: per run and training-set size, the class head, the distillation
    head, their mean and the mean's agreement with the teacher (mean ± std over the seeds)."""
    print(f"\nvalidation top-1 on the 359 digits, {len(results['seeds'])} seeds, {results['steps']} steps per run:")
    header = ("run", "training images", "class head", "distillation head", "mean of the heads",
              "agreement with the teacher")
    print("| " + " | ".join(header) + " |")
    print("|---" * len(header) + "|")
    for row in table_rows(results):
        print("| " + " | ".join(map(str, row)) + " |")


COMMAND = experiment


def main(argv=None):
    """``paddle-vit deit-budget-experiment`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)

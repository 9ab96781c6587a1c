"""The paper's data-size experiment in miniature (Section 4.3, Figures 3-4): the three model
families, trained on growing fractions of a training set, the validation accuracy each reaches.

The families are one `ViTConfig` each, of about the same size (70-100 thousand parameters), on
the same 4 x 4 grid of tokens, with the same head (the tokens averaged, LayerNorm, Linear:
pool "mean") and the same recipe (`tools/train.py`'s Trainer):
- "ViT": the plain ViT, 4 x 4 patches of the 16 x 16 image, 2 encoder layers;
- "hybrid": the ResNet-v2 stem (7x7/2 convolution, GroupNorm, ReLU, 3x3/2 max pool) whose 4 x 4
  feature map the same 2 encoder layers read, 1 x 1 patches;
- "ResNet": the stem and one bottleneck stage, no Transformer (depth 0): its feature map
  averaged, LayerNorm and the head; no position embedding.
Every run takes the same number of optimizer steps whatever the fraction (smaller fractions are
seen more often): the families and the sizes differ in data, not in compute.
"""
import math
import os

import numpy as np

from . import runtime
from .config import load_config
from .engine.logging_utils import setup_logging
from .engine.trainer import Trainer
from .errors import TrainingError
from .viz import new_figure

FAMILIES = {
    "ViT": dict(name="vit_tiny_patch16_224", patch_size=4, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2,
                pool="mean"),
    "hybrid": dict(name="vit_tiny_r_s16_p8_224", patch_size=1, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2,
                   pool="mean"),
    "ResNet": dict(name="vit_tiny_r_s16_p8_224", patch_size=1, embed_dim=64, depth=0, num_heads=4,
                   backbone_layers=[1], pool="mean", position_embedding="none"),
}
IMAGE_SIZE = 16  # the 8 x 8 digits, resized
BATCH_SIZE = 32  # every run's, whatever its fraction: the smallest fraction must keep a batch
RECIPE = {
    "optimizer": {"lr": 0.003, "weight_decay": 0.05},
    "data": {"dataset": "digits", "train_crop": "resize", "hflip": 0.0},
    "train": {"device": "cpu", "vdl": False, "log_interval": 100000, "label_smoothing": 0.0},
    "eval": {"interval": 100000, "batch_size": 512},  # evaluated once, after the last epoch
}


def experiment_config(family, fraction, seed, output_dir, steps=150, batch_size=BATCH_SIZE, train_size=1438):
    """The `Config` of one run: `family` (a key of FAMILIES) on `fraction` of the training split
    (`train_size` images in full), `steps` optimizer steps of `batch_size`, warm-up a tenth."""
    images = max(1, round(train_size * fraction))
    epochs = math.ceil(steps * batch_size / images)
    model = dict(FAMILIES[family], image_size=IMAGE_SIZE, num_classes=None, dropout=0.0, drop_path=0.0)
    data = dict(RECIPE["data"], train_fraction=fraction)
    train = dict(RECIPE["train"], epochs=epochs, batch_size=batch_size, seed=seed, output_dir=output_dir)
    return load_config(data={"model": model, "data": data, "optimizer": RECIPE["optimizer"],
                             "schedule": {"warmup_epochs": 0.1 * epochs}, "train": train, "eval": RECIPE["eval"]})


def training_images(fractions, batch_size=BATCH_SIZE):
    """{fraction: images of the digits training split it keeps} for the experiment's runs (at
    least one image of each class, as `data.train_fraction` keeps), and the smallest fraction,
    in thousandths, that keeps a whole batch of `batch_size`."""
    from .data.datasets import digits_sources, stratified_subset

    data = experiment_config("ViT", 1.0, 0, "unused").data
    labels = digits_sources(data.val_fraction, data.split_seed)[0].labels

    def kept(fraction):  # the same count for every seed: only which images are kept differs
        return len(stratified_subset(labels, fraction, data.split_seed, 0))

    smallest = math.floor(1000 * batch_size / len(labels)) / 1000
    while kept(smallest) < batch_size:
        smallest += 0.001
    return {fraction: kept(fraction) for fraction in fractions}, round(smallest, 3)


def train_one(family, fraction, seed, output_dir, steps, batch_size, threads=None):
    """One run of the experiment: (validation top-1, parameters, training images, seconds)."""
    import time

    import paddle


    start = time.time()
    paddle.set_device("cpu")
    if threads:
        paddle.base.core.set_num_threads(threads)
    trainer = Trainer(experiment_config(family, fraction, seed, output_dir, steps, batch_size))
    parameters = sum(int(np.prod(parameter.shape)) for parameter in trainer.vit.parameters())
    accuracy = trainer.fit()["last_epoch"]["val_top1"]
    return accuracy, parameters, len(trainer.train_set), time.time() - start


def run_data_size_experiment(work_dir, fractions=(0.1, 0.25, 0.5, 1.0), seeds=(0, 1, 2), families=tuple(FAMILIES),
                             steps=150, batch_size=BATCH_SIZE, workers=None, progress=None):
    """Train every family on every fraction with every seed; returns {"accuracy": {family:
    [[val top-1 per seed] per fraction]}, "train_images": [per fraction], "parameters": {family:
    count}, ...}. The runs are independent: `workers` processes (default: one per core, at most
    4) share them out and run side by side with one math thread each, since a model this small
    keeps a core busy with Python and Paddle's dispatch, not with arithmetic. `progress(family,
    fraction, seed, accuracy, seconds)` is called as each run ends."""
    import threading

    runs = [(family, fraction, seed) for family in families for fraction in fractions for seed in seeds]
    workers = max(1, min(workers or min(4, os.cpu_count() or 1), len(runs)))
    outcomes, errors, lock = {}, [], threading.Lock()

    def record(run, outcome):
        with lock:
            outcomes[run] = outcome
            if progress:
                progress(*run, outcome[0], outcome[3])

    if workers == 1:
        for run in runs:
            record(run, train_one(*run, os.path.join(work_dir, "-".join(map(str, run))), steps, batch_size))
    else:
        shares = [runs[index::workers] for index in range(workers)]
        threads = [threading.Thread(target=_run_in_worker, args=(share, work_dir, steps, batch_size, record, errors))
                   for share in shares]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        missing = [run for run in runs if run not in outcomes]
        if missing:
            raise TrainingError(f"{len(missing)} of the {len(runs)} runs did not finish: {errors[-1] if errors else '?'}")
    return {"fractions": list(fractions), "seeds": list(seeds), "steps": steps, "batch_size": batch_size,
            "accuracy": {family: [[outcomes[(family, fraction, seed)][0] for seed in seeds] for fraction in fractions]
                         for family in families},
            "train_images": [outcomes[(families[0], fraction, seeds[0])][2] for fraction in fractions],
            "parameters": {family: outcomes[(family, fractions[0], seeds[0])][1] for family in families}}


def _run_in_worker(share, work_dir, steps, batch_size, record, errors):
    """Run `share` in a child Python (``python -m paddle_vit.experiments``), one JSON line back
    per run to `record`; the child's last stderr line to `errors` if it fails. A child process,
    not multiprocessing: multiprocessing's resource tracker outlives a notebook's kernel and holds
    up its shutdown (which then ends in a SIGTERM)."""
    import json
    import subprocess
    import sys
    import tempfile

    request = {"runs": [list(run) for run in share], "work_dir": work_dir, "steps": steps, "batch_size": batch_size}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
                       GLOG_minloglevel="2", OMP_NUM_THREADS="1")
    with tempfile.TemporaryFile("w+") as stderr:  # a file, not a pipe: a full pipe would block the child
        child = subprocess.Popen([sys.executable, "-m", "paddle_vit.experiments"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=stderr, text=True, env=environment)
        child.stdin.write(json.dumps(request))
        child.stdin.close()
        for line in child.stdout:
            if line.startswith(_RESULT):
                answer = json.loads(line[len(_RESULT):])
                record(tuple(answer["run"]), tuple(answer["outcome"]))
        child.wait()
        stderr.seek(0)
        messages = stderr.read()
    if child.returncode != 0:
        errors.append(messages.strip().splitlines()[-1] if messages.strip() else f"exit code {child.returncode}")


_RESULT = "DATA_SIZE_RUN "


def _worker_main():
    """The child's side of `_run_in_worker`: read the request from stdin, train each run."""
    import json
    import logging
    import sys


    runtime.configure()  # a process of its own: the settings the tools make
    setup_logging(logging.WARNING, to="stderr")
    request = json.load(sys.stdin)
    for family, fraction, seed in request["runs"]:
        output_dir = os.path.join(request["work_dir"], f"{family}-{fraction}-{seed}")
        outcome = train_one(family, fraction, seed, output_dir, request["steps"], request["batch_size"], threads=1)
        print(_RESULT + json.dumps({"run": [family, fraction, seed], "outcome": list(outcome)}), flush=True)


def data_size_figure(results, title=None):
    """Validation top-1 against training images (log scale), mean and standard deviation over
    the seeds for each family: the paper's Figure 3/4 in miniature. Returns the figure."""

    figure = new_figure(5.0, 3.4)
    axis = figure.subplots()
    sizes = np.asarray(results["train_images"])
    for family, rows in results["accuracy"].items():
        accuracy = np.asarray(rows)  # [fractions, seeds]
        axis.errorbar(sizes, accuracy.mean(axis=1), yerr=accuracy.std(axis=1), marker="o", capsize=3,
                      label=f"{family} ({results['parameters'][family] / 1000:.0f}k parameters)")
    axis.set_xscale("log")
    axis.set_xticks(sizes, [str(size) for size in sizes])
    axis.minorticks_off()
    axis.set_xlabel("training images (digits, stratified subsets)")
    axis.set_ylabel("validation top-1")
    axis.axhline(0.1, color="grey", linestyle="--", linewidth=1)
    axis.legend(fontsize=8, loc="lower right")
    axis.set_title(title or f"{len(results['seeds'])} seeds per point (mean, std); {results['steps']} steps of "
                            f"{results['batch_size']} for every run", fontsize=9)
    figure.tight_layout()
    return figure


if __name__ == "__main__":
    _worker_main()

"""The paper's data-size experiment in miniature (Section 4.3, Figures 3-4): the three model
families, trained on growing fractions of a training set, measured the paper's two ways:
- the validation accuracy the trained model reaches (the paper's "fine-tuning accuracy"; here the
  model is trained and validated on the same task, the digits);
- the few-shot linear accuracy of its frozen representation (the paper's Figure 4 metric,
  Section 4.1): k training images of each class, drawn from that run's own fraction (the data the
  representation was trained on), their features mapped to {-1, 1}^10 targets by regularised
  least squares (`paddle_vit.fewshot_accuracy`, computed as big_vision's `fewshot_lsr`), tested
  on the same validation images.

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

DeiT's answer to the data-hunger (Touvron et al. 2021) adds two rows, the same ViT with a class
and a distillation token read by a head each (pool "cls", DeiT's design):
- "ViT distilled": taught by the ResNet run of the same fraction and seed (DeiT's hard
  distillation: the distillation head learns the teacher's argmax), so the teacher saw the same
  images and no more; these runs start once the ResNet runs have ended;
- "ViT two tokens": the same model without a teacher, both heads learning the labels through
  their mean, to tell the teacher's effect from the change of read-out.
"""
import logging
import math
import os
import threading
import time

import numpy as np
import paddle

from .. import runtime
from ..config import load_config
from ..engine.logging_utils import setup_logging
from ..engine.trainer import Trainer
from ..data.datasets import AugmentedDataset, digits_sources, stratified_subset
from ..data.loader import build_dataloader
from ..errors import ConfigError, TrainingError
from ..fewshot import extract_features, fewshot_accuracy
from ..viz import current_figure_text, new_figure
from .children import answer, end_children, read_request, run_child

FAMILIES = {
    "ViT": dict(name="vit_tiny_patch16_224", patch_size=4, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2,
                pool="mean"),
    "hybrid": dict(name="vit_tiny_r_s16_p8_224", patch_size=1, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2,
                   pool="mean"),
    "ResNet": dict(name="vit_tiny_r_s16_p8_224", patch_size=1, embed_dim=64, depth=0, num_heads=4,
                   backbone_layers=[1], pool="mean", position_embedding="none"),
}
FAMILIES["ViT distilled"] = dict(FAMILIES["ViT"], pool="cls", distilled=True)
FAMILIES["ViT two tokens"] = dict(FAMILIES["ViT distilled"])
TEACHERS = {"ViT distilled": "ResNet"}  # family: the family whose run of the same fraction and seed teaches it
IMAGE_SIZE = 16  # the 8 x 8 digits, resized
BATCH_SIZE = 32  # every run's, whatever its fraction: the smallest fraction must keep a batch
# The few-shot protocol (Section 4.1). Shots 1, 5 and 10 of each of the 10 digits: the paper reads
# 1-, 5-, 10- and 25-shot, but the smallest fraction (10%) keeps only 13-15 images of a class, so
# 25 would be all of them. Each run's pool is drawn three times (big_vision's seeds 0, 1, 2); the
# run's number is the mean of the three draws, and the spread is over the training seeds.
FEWSHOT_SHOTS = (1, 5, 10)
FEWSHOT_L2_REG = 1024.0  # big_vision's default
FEWSHOT_DRAWS = (0, 1, 2)
FIGURE_SHOTS = 5  # the paper's Figure 4 plots linear 5-shot accuracy
RECIPE = {
    "optimizer": {"lr": 0.003, "weight_decay": 0.05},
    "data": {"dataset": "digits", "train_crop": "resize", "hflip": 0.0},
    "train": {"device": "cpu", "vdl": False, "log_interval": 100000, "label_smoothing": 0.0},
    "eval": {"interval": 100000, "batch_size": 512},  # evaluated once, after the last epoch
}


def experiment_config(family, fraction, seed, output_dir, steps=150, batch_size=BATCH_SIZE, train_size=1438,
                      teacher=None):
    """The `Config` of one run: `family` (a key of FAMILIES) on `fraction` of the training split
    (`train_size` images in full), `steps` optimizer steps of `batch_size`, warm-up a tenth;
    distilled from the checkpoint `teacher` (DeiT's hard distillation) when given."""
    images = max(1, round(train_size * fraction))
    epochs = math.ceil(steps * batch_size / images)
    model = dict(FAMILIES[family], image_size=IMAGE_SIZE, num_classes=None, dropout=0.0, drop_path=0.0)
    data = dict(RECIPE["data"], train_fraction=fraction)
    train = dict(RECIPE["train"], epochs=epochs, batch_size=batch_size, seed=seed, output_dir=output_dir)
    if teacher is not None:
        train["distillation"] = {"teacher": teacher, "type": "hard"}
    return load_config(data={"model": model, "data": data, "optimizer": RECIPE["optimizer"],
                             "schedule": {"warmup_epochs": 0.1 * epochs}, "train": train, "eval": RECIPE["eval"]})


def training_images(fractions, batch_size=BATCH_SIZE):
    """{fraction: images of the digits training split it keeps} for the experiment's runs (at
    least one image of each class, as `data.train_fraction` keeps), and the smallest fraction,
    in thousandths, that keeps a whole batch of `batch_size`."""
    data = experiment_config("ViT", 1.0, 0, "unused").data
    labels = digits_sources(data.val_fraction, data.split_seed)[0].labels

    def kept(fraction):  # the same count for every seed: only which images are kept differs
        return len(stratified_subset(labels, fraction, data.split_seed, 0))

    smallest = math.floor(1000 * batch_size / len(labels)) / 1000
    while kept(smallest) < batch_size:
        smallest += 0.001
    return {fraction: kept(fraction) for fraction in fractions}, round(smallest, 3)


def check_fractions_keep_a_batch(fractions, batch_size=BATCH_SIZE):
    """Refuse (ConfigError naming --fractions) a fraction of the digits whose training images are
    fewer than one batch of `batch_size`: a run of it could not take a step."""
    kept, smallest = training_images(fractions, batch_size)
    few = {fraction: images for fraction, images in kept.items() if images < batch_size}
    if few:
        fraction, images = next(iter(few.items()))
        raise ConfigError(f"--fractions {fraction:g} keeps {images} training images, fewer than one batch of "
                          f"{batch_size}; the smallest fraction that keeps a batch is {smallest:g}")


def train_one(family, fraction, seed, output_dir, steps, batch_size, threads=None, shots=FEWSHOT_SHOTS,
              teacher=None):
    """One run of the experiment (distilled from the checkpoint `teacher` when given): (validation
    top-1, parameters, training images, seconds, few-shot accuracies [[accuracy per draw of
    FEWSHOT_DRAWS] per shots])."""
    start = time.time()
    paddle.set_device("cpu")
    if threads:
        paddle.base.core.set_num_threads(threads)
    trainer = Trainer(experiment_config(family, fraction, seed, output_dir, steps, batch_size, teacher=teacher))
    parameters = sum(int(np.prod(parameter.shape)) for parameter in trainer.vit.parameters())
    accuracy = trainer.fit()["last_epoch"]["val_top1"]  # the weights saved as checkpoints/last.pdparams
    fewshot = fewshot_of_trained(trainer, shots)
    return accuracy, parameters, len(trainer.train_set), time.time() - start, fewshot


def fewshot_of_trained(trainer, shots=FEWSHOT_SHOTS):
    """Few-shot linear accuracy of the trained model's frozen representation: the pool is the
    run's own training images (its fraction), the test set its validation images, both through
    the eval transform (no augmentation). Returns [[accuracy per draw of FEWSHOT_DRAWS] per
    shots] (a list, not a dict: it crosses a process boundary as JSON, whose keys are text)."""
    train_set, val_set = trainer.train_set, trainer.val_set
    pool = AugmentedDataset(train_set.source, val_set.transform, train_set.image_size, train_set.seed)
    batch_size = trainer.config.eval.batch_size
    pool_features, pool_labels = extract_features(
        trainer.vit, build_dataloader(pool, batch_size, shuffle=False, drop_last=False, distributed=False))
    test_features, test_labels = extract_features(
        trainer.vit, build_dataloader(val_set, batch_size, shuffle=False, drop_last=False, distributed=False))
    accuracies = fewshot_accuracy(pool_features, pool_labels, test_features, test_labels, shots=tuple(shots),
                                  l2_reg=FEWSHOT_L2_REG, seeds=FEWSHOT_DRAWS, num_classes=len(trainer.class_names))
    return [list(map(float, accuracies[k])) for k in shots]


def run_data_size_experiment(work_dir, fractions=(0.1, 0.25, 0.5, 1.0), seeds=(0, 1, 2), families=tuple(FAMILIES),
                             steps=150, batch_size=BATCH_SIZE, workers=None, progress=None, shots=FEWSHOT_SHOTS):
    """Train every family on every fraction with every seed, and measure each trained model both
    ways. Returns a JSON-ready dict:
    - "accuracy": {family: [[val top-1 per seed] per fraction]} (the trained model's accuracy);
    - "fewshot": {family: {"<k>": [[k-shot accuracy, the mean of the draws, per seed] per
      fraction]}}; "fewshot_draws": the same with each draw's accuracy ([...[per draw] per seed]);
    - "summary": {family: {"val_top1" | "fewshot_<k>shot": [{"mean", "std", "min", "max"} over the
      seeds, per fraction]}} (`seed_spread`);
    - "train_images": [per fraction], "parameters": {family: count}, and the settings.
    Run i's model stays in work_dir/<family>-<fraction>-<seed>/ (checkpoints/last.pdparams); a family
    with a teacher (`TEACHERS`) needs the teacher family among `families` and runs after it.
    The runs are independent: `workers` processes (default: one per core, at most 4) share them
    out and run side by side with one math thread each, since a model this small keeps a core busy
    with Python and Paddle's dispatch, not with arithmetic. `progress(family, fraction, seed,
    accuracy, seconds, fewshot)` is called as each run ends (fewshot: {k: mean of the draws})."""
    shots = tuple(int(k) for k in shots)
    for family in families:
        if TEACHERS.get(family, family) not in families:
            raise ConfigError(f"the family {family!r} is taught by the {TEACHERS[family]} runs: add "
                              f"{TEACHERS[family]!r} to the families")
    runs = [(family, fraction, seed) for family in families for fraction in fractions for seed in seeds]
    workers = max(1, min(workers or min(4, os.cpu_count() or 1), len(runs)))
    outcomes, errors, lock = {}, [], threading.Lock()

    def record(run, outcome):
        with lock:
            outcomes[run] = outcome
            if progress:
                means = {k: float(np.mean(draws)) for k, draws in zip(shots, outcome[4])}
                progress(*run, outcome[0], outcome[3], means)

    # the teachers' runs end before their students' start
    for phase in ([run for run in runs if run[0] not in TEACHERS], [run for run in runs if run[0] in TEACHERS]):
        if workers == 1:
            for run in phase:
                record(run, train_one(*run, run_folder(work_dir, *run), steps, batch_size, shots=shots,
                                      teacher=teacher_checkpoint(work_dir, *run)))
            continue
        shares = [share for share in (phase[index::workers] for index in range(workers)) if share]
        threads = [threading.Thread(target=_run_in_worker, daemon=True,
                                    args=(share, work_dir, steps, batch_size, shots, record, errors))
                   for share in shares]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        except BaseException:  # Ctrl-C, SIGTERM: the runs end with the experiment, before work_dir goes
            end_children()
            raise
        missing = [run for run in phase if run not in outcomes]
        if missing:
            raise TrainingError(f"{len(missing)} of the {len(runs)} runs did not finish: {errors[-1] if errors else '?'}")

    def table(value):  # {family: [[value(outcome) per seed] per fraction]}
        return {family: [[value(outcomes[(family, fraction, seed)]) for seed in seeds] for fraction in fractions]
                for family in families}

    by_shots = [table(lambda outcome, i=i: outcome[4][i]) for i in range(len(shots))]  # [shots] {family: ...}
    draws = {family: {str(k): by_shots[i][family] for i, k in enumerate(shots)} for family in families}
    fewshot = {family: {k: [[float(np.mean(per_seed)) for per_seed in row] for row in rows]
                        for k, rows in per_k.items()}
               for family, per_k in draws.items()}  # the mean of each run's draws
    accuracy = table(lambda outcome: outcome[0])
    summary = {family: {"val_top1": [seed_spread(row) for row in accuracy[family]],
                        **{f"fewshot_{k}shot": [seed_spread(row) for row in rows]
                           for k, rows in fewshot[family].items()}}
               for family in families}
    return {"fractions": list(fractions), "seeds": list(seeds), "steps": steps, "batch_size": batch_size,
            "shots": list(shots), "fewshot_l2_reg": FEWSHOT_L2_REG, "fewshot_draw_seeds": list(FEWSHOT_DRAWS),
            "accuracy": accuracy, "fewshot": fewshot, "fewshot_draws": draws, "summary": summary,
            "train_images": [outcomes[(families[0], fraction, seeds[0])][2] for fraction in fractions],
            "parameters": {family: outcomes[(family, fractions[0], seeds[0])][1] for family in families}}


def run_folder(work_dir, family, fraction, seed):
    """Where run (family, fraction, seed) of an experiment in `work_dir` keeps its model."""
    return os.path.join(work_dir, f"{family}-{fraction}-{seed}")


def teacher_checkpoint(work_dir, family, fraction, seed):
    """The checkpoint that teaches run (family, fraction, seed): the last of its teacher family's
    run of the same fraction and seed (`TEACHERS`), or None for a family without a teacher."""
    if family not in TEACHERS:
        return None
    return os.path.join(run_folder(work_dir, TEACHERS[family], fraction, seed), "checkpoints", "last.pdckpt")


def seed_spread(values):
    """{"mean", "std", "min", "max"} of one point's values over the seeds (std: numpy's, ddof 0)."""
    values = np.asarray(values, dtype=np.float64)
    return {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()),
            "max": float(values.max())}


def _run_in_worker(share, work_dir, steps, batch_size, shots, record, errors):
    """Run `share` in a child Python (``python -m paddle_vit.experiments.data_size``), each run's
    outcome back to `record`; the child's last stderr line to `errors` if it fails."""
    request = {"runs": [list(run) for run in share], "work_dir": work_dir, "steps": steps, "batch_size": batch_size,
               "shots": list(shots)}
    error = run_child("paddle_vit.experiments.data_size", request,
                      lambda reply: record(tuple(reply["run"]), tuple(reply["outcome"])))
    if error is not None:
        errors.append(error)


def _worker_main():
    """The child's side of `_run_in_worker`: read the request from stdin, train each run."""

    runtime.configure()  # a process of its own: the settings the tools make
    setup_logging(logging.WARNING, to="stderr")
    request = read_request()
    for family, fraction, seed in request["runs"]:
        output_dir = run_folder(request["work_dir"], family, fraction, seed)
        outcome = train_one(family, fraction, seed, output_dir, request["steps"], request["batch_size"], threads=1,
                            shots=request["shots"], teacher=teacher_checkpoint(request["work_dir"], family, fraction, seed))
        answer({"run": [family, fraction, seed], "outcome": list(outcome)})


def figure_shots(results):
    """The shot count the figure plots: the paper's 5 when it was measured, else the largest."""
    return FIGURE_SHOTS if FIGURE_SHOTS in results["shots"] else max(results["shots"])


def data_size_figure(results, title=None):
    """The paper's Figures 3-4 in miniature, two panels against training images (log scale):
    left, the trained model's validation top-1; right, the k-shot linear accuracy of its frozen
    representation (`figure_shots`). Mean and standard deviation over the seeds for each family.
    Returns the figure."""
    words = current_figure_text()
    figure = new_figure(9.0, 3.6)
    left, right = figure.subplots(1, 2, sharey=True)
    sizes = np.asarray(results["train_images"])
    shots = figure_shots(results)
    for family in results["accuracy"]:
        label = words("{family} ({thousands}k parameters)", family=family,
                      thousands=f"{results['parameters'][family] / 1000:.0f}")
        for axis, rows in ((left, results["accuracy"][family]), (right, results["fewshot"][family][str(shots)])):
            values = np.asarray(rows)  # [fractions, seeds]
            axis.errorbar(sizes, values.mean(axis=1), yerr=values.std(axis=1), marker="o", capsize=3, label=label)
    for axis, what in ((left, words("trained on the subset: validation top-1")),
                       (right, words("frozen representation: linear {shots}-shot top-1", shots=shots))):
        axis.set_xscale("log")
        axis.set_xticks(sizes, [str(size) for size in sizes])
        axis.minorticks_off()
        axis.set_xlabel(words("training images (digits, stratified subsets)"))
        axis.axhline(0.1, color="grey", linestyle="--", linewidth=1)  # chance: 10 classes
        axis.set_title(what, fontsize=9)
    left.set_ylabel(words("accuracy on the {count} validation digits", count=359))
    right.legend(fontsize=8, loc="lower right")
    figure.suptitle(title or words("{seeds} seeds per point (mean, std); {steps} steps of {batch} for every run; "
                                   "{shots} shots per class drawn from the run's own subset, {draws} draws",
                                   seeds=len(results["seeds"]), steps=results["steps"], batch=results["batch_size"],
                                   shots=shots, draws=len(results["fewshot_draw_seeds"])), fontsize=9)
    figure.tight_layout()
    return figure


def result_rows(results):
    """The numbers as table rows, one per (family, fraction, metric): family, parameters,
    fraction, train_images, metric ("val_top1" or "fewshot_<k>shot"), mean, std, min, max over
    the seeds, then the value of each seed. The CSV the tool writes."""
    header = ["family", "parameters", "fraction", "train_images", "metric", "mean", "std", "min", "max",
              *[f"seed_{seed}" for seed in results["seeds"]]]
    rows = []
    for family in results["accuracy"]:
        metrics = {"val_top1": results["accuracy"][family],
                   **{f"fewshot_{k}shot": rows_ for k, rows_ in results["fewshot"][family].items()}}
        for index, (fraction, images) in enumerate(zip(results["fractions"], results["train_images"])):
            for metric, values in metrics.items():
                spread = results["summary"][family][metric][index]
                rows.append([family, results["parameters"][family], fraction, images, metric, spread["mean"],
                             spread["std"], spread["min"], spread["max"], *values[index]])
    return header, rows


if __name__ == "__main__":
    _worker_main()

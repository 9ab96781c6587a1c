"""DeiT's answer to the ViT's data-hunger, asked with DeiT's budget scaled to the digits.

The data-size experiment (data_size.py) trains every model for 150 steps without augmentation;
there a CNN teacher gives the ViT little, since a ResNet right on nearly every training image says
little more than the labels. DeiT (Touvron et al. 2021) trains for 300 epochs with mixup, CutMix
and RandAugment, where the teacher's answers on augmented and mixed images differ from the
labels. This experiment gives the digits' models that budget, scaled down:

- the recipe (`RECIPE`): RandAugment (2 ops, magnitude 9), mixup 0.8 and CutMix 1.0, random
  erasing 0.25, repeated augmentation x3, label smoothing 0.1, drop path 0.1 (DeiT's values), a
  shift of up to 2 pixels for DeiT's crop and no flip (a mirrored digit is another symbol); AdamW,
  cosine schedule, warm-up of 5% of the run (DeiT: 5 of 300 epochs);
- the same number of optimizer steps for every run (`STEPS` of batch 64: 182 epochs of the 1,438
  training digits, 800 of a quarter of them), so that the sizes differ in data, not compute; the
  whole experiment (24 runs) then takes about half an hour on two cores;
- the teacher: the data-size experiment's ResNet (stem and one bottleneck stage), trained with
  the same recipe on the same images (the same fraction and seed), so that it saw nothing the
  student did not;
- the student: the data-size experiment's ViT with a class and a distillation token, a head each
  (DeiT's design), in three modes (`MODES`): "no teacher" (both heads learn the labels through
  their mean), "hard" (DeiT's hard distillation: the distillation head learns the teacher's
  argmax, alpha 0.5) and "soft" (KL to the teacher's softened distribution, DeiT's tau 3 and
  lambda 0.1).

Each student is read DeiT's three ways (Table 3): the class head, the distillation head and the
mean of the two, on the 359 validation digits; and how often each agrees with its teacher there
(DeiT's Table 4). Runs go side by side in child processes and each leaves its answer in its run
folder (`outcome.json`, written whole), so that an experiment stopped at any point goes on from
the runs it finished and ends where an unbroken one does.
"""
import json
import logging
import math
import os
import shutil
import threading
import time

import numpy as np
import paddle

from .. import runtime
from ..config import load_config
from ..engine.logging_utils import setup_logging
from ..engine.runs import RunLock
from ..engine.trainer import Trainer
from ..errors import ConfigError, TrainingError
from ..fileio import atomic_write
from ..viz import current_figure_text, new_figure
from .children import answer, read_request, run_child
from .data_size import FAMILIES, IMAGE_SIZE, seed_spread, training_images

TEACHER_FAMILY, STUDENT_FAMILY = "ResNet", "ViT distilled"
MODES = {  # the student's mode: its train.distillation (None: no teacher, both heads learn the labels)
    "no teacher": None,
    "hard": {"type": "hard", "alpha": 0.5},
    "soft": {"type": "soft", "alpha": 0.1, "tau": 3.0},
}
HEADS = ("class", "distillation", "mean")  # how a student is read (DeiT's Table 3)
BATCH_SIZE = 64  # DeiT's per-GPU batch; the data-size experiment's 32 would halve the images seen
STEPS = 4000  # optimizer steps of every run: 182 epochs of the full training split
FRACTIONS = (0.25, 1.0)
SEEDS = (0, 1, 2)
QUICK = {"fractions": (0.25,), "seeds": (0,), "steps": 10}  # checks that it runs, not what it finds
RECIPE = {
    "data": {"dataset": "digits", "train_crop": "pad_crop", "crop_padding": 2, "hflip": 0.0,
             "randaugment_num_ops": 2, "randaugment_magnitude": 9, "mixup_alpha": 0.8, "cutmix_alpha": 1.0,
             "random_erasing": 0.25, "repeated_augmentation": 3},
    "optimizer": {"lr": 0.003, "weight_decay": 0.05},
    "train": {"device": "cpu", "vdl": False, "log_interval": 100000, "label_smoothing": 0.1,
              "batch_size": BATCH_SIZE},
    "eval": {"interval": 100000, "batch_size": 512},  # evaluated once, after the last epoch
    "drop_path": 0.1,
    "warmup": 0.05,  # of the run's epochs
}
OUTCOME = "outcome.json"


def run_config(role, mode, fraction, seed, output_dir, steps=STEPS, teacher=None):
    """The `Config` of one run: the teacher (`role` "teacher") or a student in `mode` (a key of
    MODES, distilled from the checkpoint `teacher`), on `fraction` of the training split, at
    least `steps` optimizer steps of batch 64 (whole epochs), DeiT's recipe."""
    epochs = epochs_for(steps, fraction)
    family = TEACHER_FAMILY if role == "teacher" else STUDENT_FAMILY
    model = dict(FAMILIES[family], image_size=IMAGE_SIZE, num_classes=None, dropout=0.0, drop_path=RECIPE["drop_path"])
    data = dict(RECIPE["data"], train_fraction=fraction)
    train = dict(RECIPE["train"], epochs=epochs, seed=seed, output_dir=output_dir)
    if role == "student" and MODES[mode] is not None:
        train["distillation"] = dict(MODES[mode], teacher=teacher)
    return load_config(data={"model": model, "data": data, "optimizer": RECIPE["optimizer"],
                             "schedule": {"warmup_epochs": RECIPE["warmup"] * epochs}, "train": train,
                             "eval": RECIPE["eval"]})


def epochs_for(steps, fraction):
    """The whole epochs that make at least `steps` optimizer steps on `fraction` of the digits'
    training split (an epoch: its images, in whole batches of 64; repeated augmentation keeps
    an epoch's length)."""
    images = training_images([fraction])[0][fraction]
    return math.ceil(steps / (images // BATCH_SIZE))


def head_predictions(model, images):
    """The predicted class of each image [B, 3, S, S] by a model's heads: {"class", "distillation",
    "mean"} for a student (DeiT's two tokens; "mean" is what its forward gives in evaluation),
    {"mean": ...} for a model with one head. Each [B] int."""
    model.eval()
    with paddle.no_grad():
        inputs = paddle.to_tensor(images)
        if not model.config.distilled:
            return {"mean": model(inputs).numpy().argmax(axis=1)}
        tokens = model.forward_features(inputs)  # [B, 2 + N, D]
        class_logits = model.head(tokens[:, 0]).numpy()  # [B, K]
        distillation_logits = model.head_dist(tokens[:, 1]).numpy()  # [B, K]
    return {"class": class_logits.argmax(axis=1), "distillation": distillation_logits.argmax(axis=1),
            "mean": ((class_logits + distillation_logits) / 2).argmax(axis=1)}


def train_run(job, work_dir):
    """Train one run (a job of `experiment_jobs`) into its folder and return its outcome: the
    validation labels, each head's predictions on them, the parameters and the seconds. The
    outcome is also written to the folder (`OUTCOME`), whole, last: a folder without it is a run
    that did not finish, started again from nothing."""
    start = time.time()
    folder = run_folder(work_dir, job)
    if os.path.exists(folder):  # a run that did not finish: started again, unless it is still running
        RunLock(folder).acquire().release()  # TrainingError naming the folder while another process trains there
        shutil.rmtree(folder)
    teacher = None
    if job["role"] == "student" and MODES[job["mode"]] is not None:
        teacher = os.path.join(run_folder(work_dir, teacher_job(job)), "checkpoints", "last.pdckpt")
    trainer = Trainer(run_config(job["role"], job["mode"], job["fraction"], job["seed"], folder, job["steps"], teacher))
    summary = trainer.fit()
    val_set = trainer.val_set
    images = np.stack([val_set[index][0] for index in range(len(val_set))])  # [359, 3, 16, 16]
    predictions = head_predictions(trainer.vit, images)
    outcome = {"job": job, "labels": [int(label) for label in val_set.labels],
               "predictions": {head: [int(p) for p in values] for head, values in predictions.items()},
               "val_top1": summary["last_epoch"]["val_top1"], "train_images": len(trainer.train_set),
               "parameters": sum(int(np.prod(parameter.shape)) for parameter in trainer.vit.parameters()),
               "seconds": time.time() - start}

    def write(temporary):
        with open(temporary, "w") as stream:
            json.dump(outcome, stream)
    atomic_write(os.path.join(folder, OUTCOME), write)
    return outcome


def experiment_jobs(fractions=FRACTIONS, seeds=SEEDS, steps=STEPS, modes=tuple(MODES)):
    """Every run of the experiment, teachers first: a list of {"role", "mode", "fraction", "seed",
    "steps"} (the teacher's mode is None)."""
    teachers = [{"role": "teacher", "mode": None, "fraction": fraction, "seed": seed, "steps": steps}
                for fraction in fractions for seed in seeds]
    students = [{"role": "student", "mode": mode, "fraction": fraction, "seed": seed, "steps": steps}
                for mode in modes for fraction in fractions for seed in seeds]
    return teachers + students


def teacher_job(job):
    """The teacher run of a job's fraction and seed."""
    return {"role": "teacher", "mode": None, "fraction": job["fraction"], "seed": job["seed"], "steps": job["steps"]}


def run_folder(work_dir, job):
    """Where a job keeps its model and its outcome."""
    who = "teacher" if job["role"] == "teacher" else f"student-{job['mode'].replace(' ', '_')}"
    return os.path.join(work_dir, f"{who}-{job['fraction']}-{job['seed']}-{job['steps']}steps")


def finished_outcome(work_dir, job):
    """The outcome a finished run left in its folder, or None (not run, killed, or another job)."""
    try:
        with open(os.path.join(run_folder(work_dir, job), OUTCOME)) as stream:
            outcome = json.load(stream)
    except (OSError, ValueError):
        return None
    return outcome if outcome.get("job") == job else None


def run_deit_budget_experiment(work_dir, fractions=FRACTIONS, seeds=SEEDS, steps=STEPS, modes=tuple(MODES),
                               workers=None, progress=None):
    """Train the teachers, then the students of every mode, on every fraction with every seed, in
    `work_dir` (runs finished there before are kept, not run again). `workers` runs side by side
    (default: one per core, at most 4), each in a child process with one math thread.
    `progress(job, outcome, skipped)` is called as each run ends. Returns `summarise`'s dict."""
    for mode in modes:
        if mode not in MODES:
            raise ConfigError(f"unknown mode {mode!r}: expected some of {', '.join(MODES)}")
    jobs = experiment_jobs(fractions, seeds, steps, modes)
    os.makedirs(work_dir, exist_ok=True)
    workers = max(1, workers or min(4, os.cpu_count() or 1))
    outcomes, errors, lock = {}, [], threading.Lock()
    started = time.time()

    def record(outcome, skipped=False):
        with lock:
            outcomes[job_key(outcome["job"])] = outcome
            if progress:
                progress(outcome["job"], outcome, skipped)

    for job in jobs:
        outcome = finished_outcome(work_dir, job)
        if outcome is not None:
            record(outcome, skipped=True)
    # the teachers and the students without one first, then the students that read a teacher;
    # the longest runs first in each phase, so that the workers end together
    pending = [job for job in jobs if job_key(job) not in outcomes]
    needs_teacher = [job for job in pending if job["role"] == "student" and MODES[job["mode"]] is not None]
    first = [job for job in pending if job not in needs_teacher]
    for phase in (first, needs_teacher):
        queue = sorted(phase, key=lambda job: -job["fraction"])
        take = threading.Lock()

        def worker():
            while True:
                with take:
                    if not queue:
                        return
                    job = queue.pop(0)
                error = run_child("paddle_vit.experiments.deit_budget", {"job": job, "work_dir": work_dir}, record)
                if error is not None:
                    with lock:
                        errors.append(error)

        # daemon threads: an interrupted experiment (Ctrl-C) ends without waiting for the queue
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(workers, len(queue)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        missing = [job for job in phase if job_key(job) not in outcomes]
        if missing:
            raise TrainingError(f"{len(missing)} of the {len(jobs)} runs did not finish: "
                                f"{errors[-1] if errors else '?'}")
    return summarise([outcomes[job_key(job)] for job in jobs], fractions, seeds, modes, steps,
                     seconds=time.time() - started)


def job_key(job):
    return (job["role"], job["mode"], job["fraction"], job["seed"], job["steps"])


def head_accuracy(outcome, head):
    """The share of a run's validation images its `head` ("class", "distillation", "mean") gets right."""
    return float(np.mean(np.asarray(outcome["predictions"][head]) == np.asarray(outcome["labels"])))


def summarise(outcomes, fractions, seeds, modes, steps, seconds=None):
    """The experiment's numbers from its runs' outcomes, JSON-ready:
    - "teacher": {"val_top1": [[per seed] per fraction]};
    - "students": {mode: {head: [[val top-1 per seed] per fraction]}} for the heads of `HEADS`,
      and {"agreement_<head>": ...}: the share of validation images where that head's prediction
      is the teacher's (of the same fraction and seed);
    - "summary": the same as {"mean", "std", "min", "max"} over the seeds (`seed_spread`);
    - "train_images", "parameters" {"teacher", "student"}, the settings, the recipe, and
      "run_seconds" (the sum over the runs) and "seconds" (the wall time, when given)."""
    found = {job_key(outcome["job"]): outcome for outcome in outcomes}

    def outcome_of(role, mode, fraction, seed):
        return found[(role, mode, fraction, seed, steps)]

    def agreement(outcome, teacher, head):
        return float(np.mean(np.asarray(outcome["predictions"][head]) == np.asarray(teacher["predictions"]["mean"])))

    teacher_rows = [[head_accuracy(outcome_of("teacher", None, fraction, seed), "mean") for seed in seeds]
                    for fraction in fractions]
    students = {}
    for mode in modes:
        table = {}
        for head in HEADS:
            table[head] = [[head_accuracy(outcome_of("student", mode, fraction, seed), head) for seed in seeds]
                           for fraction in fractions]
            table[f"agreement_{head}"] = [[agreement(outcome_of("student", mode, fraction, seed),
                                                     outcome_of("teacher", None, fraction, seed), head)
                                           for seed in seeds] for fraction in fractions]
        students[mode] = table
    summary = {"teacher": {"val_top1": [seed_spread(row) for row in teacher_rows]},
               **{mode: {metric: [seed_spread(row) for row in rows] for metric, rows in table.items()}
                  for mode, table in students.items()}}
    first = outcome_of("student", modes[0], fractions[0], seeds[0])
    results = {"fractions": list(fractions), "seeds": list(seeds), "modes": list(modes), "steps": steps,
               "batch_size": BATCH_SIZE, "recipe": RECIPE, "distillation": {mode: MODES[mode] for mode in modes},
               "teacher": {"val_top1": teacher_rows}, "students": students, "summary": summary,
               "train_images": [outcome_of("teacher", None, fraction, seeds[0])["train_images"]
                                for fraction in fractions],
               "epochs": [epochs_for(steps, fraction) for fraction in fractions],
               "parameters": {"teacher": outcome_of("teacher", None, fractions[0], seeds[0])["parameters"],
                              "student": first["parameters"]},
               "run_seconds": sum(outcome["seconds"] for outcome in outcomes)}
    if seconds is not None:
        results["seconds"] = seconds
    return results


def deit_budget_figure(results, title=None):
    """Two panels against training images: left, validation top-1 of each student mode (the mean
    of its heads) and of the teacher; right, how often each student agrees with its teacher. Mean
    and standard deviation over the seeds. Returns the figure."""
    words = current_figure_text()
    figure = new_figure(9.0, 3.9)
    left, right = figure.subplots(1, 2)
    sizes = np.asarray(results["train_images"])
    shift = {mode: 1 + 0.02 * (index - 1) for index, mode in enumerate(results["modes"])}  # error bars side by side
    teacher = np.asarray(results["teacher"]["val_top1"])  # [fractions, seeds]
    left.errorbar(sizes, teacher.mean(axis=1), yerr=teacher.std(axis=1), marker="s", color="black", capsize=3,
                  label=words("teacher: ResNet ({thousands}k parameters)",
                              thousands=f"{results['parameters']['teacher'] / 1000:.0f}"))
    for mode in results["modes"]:
        label = words("ViT, " + mode)
        for axis, metric in ((left, "mean"), (right, "agreement_mean")):
            values = np.asarray(results["students"][mode][metric])
            axis.errorbar(sizes * shift[mode], values.mean(axis=1), yerr=values.std(axis=1), marker="o", capsize=3,
                          label=label)
    for axis, what in ((left, words("validation top-1 (student: mean of its two heads)")),
                       (right, words("agreement with the teacher on the validation digits"))):
        axis.set_xscale("log")
        axis.set_xticks(sizes, [str(size) for size in sizes])
        axis.minorticks_off()
        axis.set_xlabel(words("training images (digits, stratified subsets)"))
        axis.set_title(what, fontsize=9)
    handles, labels = left.get_legend_handles_labels()  # one legend for both panels, below them
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    figure.suptitle(title or words("DeiT's recipe, {steps} steps of {batch} per run ({epochs} epochs); "
                                   "{seeds} seeds per point (mean, std)", steps=results["steps"],
                                   batch=results["batch_size"], epochs=" / ".join(map(str, results["epochs"])),
                                   seeds=len(results["seeds"])), fontsize=9)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    return figure


def table_rows(results):
    """DeiT's Table 3 in rows, one per (run, training-set size): (run, training images, class
    head, distillation head, their mean, the mean's agreement with the teacher), each a "mean ±
    std" over the seeds ("" where a run has no such head: the teacher has one)."""
    def cell(point):
        return f"{point['mean']:.3f} ± {point['std']:.3f}"
    rows = []
    for index, images in enumerate(results["train_images"]):
        rows.append(("teacher (ResNet)", images, "", "", cell(results["summary"]["teacher"]["val_top1"][index]), ""))
        for mode in results["modes"]:
            spread = results["summary"][mode]
            rows.append((f"ViT, {mode}", images, *(cell(spread[metric][index]) for metric in
                                                   ("class", "distillation", "mean", "agreement_mean"))))
    return rows


def _child_main():
    """A child of `run_deit_budget_experiment`: train the one run it was given, answer its outcome."""
    runtime.configure()  # a process of its own: the settings the tools make
    setup_logging(logging.WARNING, to="stderr")
    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(1)
    request = read_request()
    answer(train_run(request["job"], request["work_dir"]))


if __name__ == "__main__":
    _child_main()

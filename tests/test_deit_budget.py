"""DeiT's distillation with DeiT's budget (paddle_vit/experiments/deit_budget.py): each run's recipe
is DeiT's (Touvron et al. 2021, Table 9: mixup 0.8, CutMix 1.0, RandAugment 9/0.5, random
erasing 0.25, repeated augmentation, label smoothing 0.1, drop path 0.1; hard distillation with
alpha 0.5, soft with tau 3 and lambda 0.1), heads are read as DeiT reads them, the summary's
accuracies and agreements are the hand-counted ones, and an experiment stopped part way goes on
from the runs that finished."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

import paddle_vit
from paddle_vit.experiments import deit_budget
from paddle_vit.experiments.deit_budget import (MODES, experiment_jobs, finished_outcome, head_predictions,
                                                run_config, run_deit_budget_experiment, run_folder, summarise,
                                                table_rows)
from repo_paths import REPO


def test_every_run_has_deits_recipe_at_the_same_number_of_steps():
    for fraction, images in ((0.25, 359), (1.0, 1438)):
        config = run_config("teacher", None, fraction, 2, "unused", steps=4000)
        data, train = config.data, config.train
        assert (data.mixup_alpha, data.cutmix_alpha, data.random_erasing) == (0.8, 1.0, 0.25)
        assert (data.randaugment_num_ops, data.randaugment_magnitude, data.repeated_augmentation) == (2, 9, 3)
        assert (data.hflip, data.train_crop, data.train_fraction) == (0.0, "pad_crop", fraction)
        assert (train.label_smoothing, train.batch_size, train.seed) == (0.1, 64, 2)
        assert train.epochs == math.ceil(4000 / (images // 64))  # the same steps whatever the size (whole epochs)
        assert config.schedule.warmup_epochs == pytest.approx(0.05 * train.epochs)
        assert config.model.drop_path == 0.1
        assert config.model.depth == 0 and train.distillation is None  # the teacher: the digits ResNet


def test_the_students_modes_are_deits_distillations_from_the_runs_teacher():
    none = run_config("student", "no teacher", 1.0, 0, "unused")
    assert none.model.distilled and none.model.pool == "cls" and none.model.depth == 2
    assert none.train.distillation is None  # both heads learn the labels through their mean
    hard = run_config("student", "hard", 1.0, 0, "unused", teacher="teacher/checkpoints/last.pdckpt").train.distillation
    assert (hard.type, hard.alpha, hard.teacher) == ("hard", 0.5, "teacher/checkpoints/last.pdckpt")
    soft = run_config("student", "soft", 1.0, 0, "unused", teacher="t/last.pdckpt").train.distillation
    assert (soft.type, soft.alpha, soft.tau) == ("soft", 0.1, 3.0)


def test_the_students_heads_are_read_apart_and_their_mean_is_what_the_model_predicts():
    paddle.seed(0)
    model = paddle_vit.create_model("vit_tiny_patch16_224", image_size=16, patch_size=4, embed_dim=32, depth=1,
                                    num_heads=2, num_classes=10, pool="cls", distilled=True)
    with paddle.no_grad():  # heads that disagree: the class and distillation heads differ
        model.head_dist.weight.set_value(paddle.randn(model.head_dist.weight.shape))
    images = np.random.default_rng(0).standard_normal((16, 3, 16, 16)).astype("float32")
    read = head_predictions(model, images)
    model.eval()
    with paddle.no_grad():
        logits = model(paddle.to_tensor(images)).numpy()
        tokens = model.forward_features(paddle.to_tensor(images))
        by_class = model.head(tokens[:, 0]).numpy().argmax(1)
    np.testing.assert_array_equal(read["mean"], logits.argmax(1))
    np.testing.assert_array_equal(read["class"], by_class)
    assert (read["class"] != read["distillation"]).any()


def outcome(role, mode, fraction, seed, labels, predictions, steps=10):
    return {"job": {"role": role, "mode": mode, "fraction": fraction, "seed": seed, "steps": steps},
            "labels": labels, "predictions": predictions, "train_images": {0.5: 4, 1.0: 8}[fraction],
            "parameters": 100 if role == "teacher" else 50, "seconds": 2.0, "val_top1": 0.0}


def test_the_summary_counts_each_heads_accuracy_and_its_agreement_with_its_own_teacher():
    labels = [0, 1, 2, 3]
    outcomes = [
        outcome("teacher", None, 0.5, 0, labels, {"mean": [0, 1, 2, 0]}),  # 3 of 4 right
        outcome("teacher", None, 0.5, 1, labels, {"mean": [0, 1, 2, 3]}),  # 4 of 4
        outcome("student", "hard", 0.5, 0, labels, {"class": [0, 0, 0, 0], "distillation": [0, 1, 2, 0],
                                                     "mean": [0, 1, 0, 0]}),
        outcome("student", "hard", 0.5, 1, labels, {"class": [0, 1, 2, 3], "distillation": [3, 3, 3, 3],
                                                     "mean": [0, 1, 2, 2]}),
    ]
    results = summarise(outcomes, fractions=[0.5], seeds=[0, 1], modes=["hard"], steps=10, seconds=7.0)
    assert results["teacher"]["val_top1"] == [[0.75, 1.0]]
    hard = results["students"]["hard"]
    assert hard["class"] == [[0.25, 1.0]] and hard["distillation"] == [[0.75, 0.25]] and hard["mean"] == [[0.5, 0.75]]
    # seed 0's teacher says [0, 1, 2, 0]: its student's distillation head agrees on all four, even
    # where both are wrong; seed 1's mean agrees on three
    assert hard["agreement_distillation"] == [[1.0, 0.25]] and hard["agreement_mean"] == [[0.75, 0.75]]
    assert results["summary"]["hard"]["mean"] == [{"mean": 0.625, "std": 0.125, "min": 0.5, "max": 0.75}]
    assert results["train_images"] == [4] and results["epochs"] == [math.ceil(10 / (719 // 64))]
    assert (results["run_seconds"], results["seconds"]) == (8.0, 7.0)
    rows = table_rows(results)
    assert rows[0] == ("teacher (ResNet)", 4, "", "", "0.875 ± 0.125", "")
    assert rows[1] == ("ViT, hard", 4, "0.625 ± 0.375", "0.500 ± 0.250", "0.625 ± 0.125", "0.750 ± 0.000")


def test_an_experiment_goes_on_from_the_runs_that_finished_and_reruns_only_the_others(tmp_path, monkeypatch):
    jobs = experiment_jobs(fractions=(0.5,), seeds=(0,), steps=10)
    labels = [0, 1]
    for job in jobs:  # every run finished but the soft student, whose folder a kill left without its outcome
        folder = run_folder(str(tmp_path), job)
        os.makedirs(folder)
        if job["mode"] == "soft":
            continue
        heads = {"mean": [0, 1]} if job["role"] == "teacher" else {head: [0, 0] for head in deit_budget.HEADS}
        with open(os.path.join(folder, deit_budget.OUTCOME), "w") as stream:
            json.dump(outcome(job["role"], job["mode"], 0.5, 0, labels, heads), stream)
    ran = []

    def fake_child(module, request, record):
        job = request["job"]
        ran.append(job["mode"])
        record(outcome(job["role"], job["mode"], 0.5, 0, labels, {head: [0, 1] for head in deit_budget.HEADS}))
    monkeypatch.setattr(deit_budget, "run_child", fake_child)
    seen = []
    results = run_deit_budget_experiment(str(tmp_path), fractions=(0.5,), seeds=(0,), steps=10,
                                         progress=lambda job, outcome, skipped: seen.append((job["mode"], skipped)))
    assert ran == ["soft"]
    assert sorted(seen, key=str) == sorted([(None, True), ("hard", True), ("no teacher", True), ("soft", False)], key=str)
    assert results["students"]["soft"]["mean"] == [[1.0]] and results["students"]["hard"]["mean"] == [[0.5]]


def test_an_outcome_of_another_job_or_a_cut_file_is_not_taken_as_finished(tmp_path):
    job = experiment_jobs(fractions=(0.5,), seeds=(0,), steps=10)[0]
    folder = run_folder(str(tmp_path), job)
    os.makedirs(folder)
    path = os.path.join(folder, deit_budget.OUTCOME)
    with open(path, "w") as stream:
        json.dump(outcome("teacher", None, 0.5, 0, [0], {"mean": [0]}, steps=11), stream)  # other steps
    assert finished_outcome(str(tmp_path), job) is None
    with open(path, "w") as stream:
        stream.write('{"job": {"role": "tea')
    assert finished_outcome(str(tmp_path), job) is None
    with open(path, "w") as stream:
        json.dump(outcome("teacher", None, 0.5, 0, [0], {"mean": [0]}), stream)
    assert finished_outcome(str(tmp_path), job)["predictions"] == {"mean": [0]}


def test_an_unknown_mode_is_refused_naming_the_modes(tmp_path):
    with pytest.raises(paddle_vit.errors.ConfigError, match="no teacher, hard, soft"):
        run_deit_budget_experiment(str(tmp_path), modes=("medium",))


@pytest.mark.parametrize("arguments, expected", [
    (["--fractions", "0"], "--fractions"),
    (["--fractions", "0.01"], "fewer than one batch"),
    (["--steps", "-3"], "--steps"),
    (["--modes", "medium"], "--modes"),
    (["--quick", "--steps", "5"], "--quick sets --steps itself"),
])
@pytest.mark.slow  # 3-6 s (a subprocess, a tool run or a traced graph): out of the fast loop
def test_bad_arguments_are_one_error_line_and_exit_2(tmp_path, arguments, expected):
    result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "deit_budget_experiment.py"),
                             "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), *arguments],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # 3-6 s (a subprocess, a tool run or a traced graph): out of the fast loop
def test_out_that_is_a_file_is_refused_before_any_run(tmp_path):
    (tmp_path / "out").write_text("not a folder")
    result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "deit_budget_experiment.py"),
                             "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--quick"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("error: --out") and "Traceback" not in result.stderr
    assert not (tmp_path / "work").exists() or not os.listdir(tmp_path / "work")


@pytest.mark.slow
def test_the_quick_experiment_runs_and_a_killed_run_redone_gives_the_unbroken_result(tmp_path):
    command = [sys.executable, os.path.join(REPO, "tools", "deit_budget_experiment.py"), "--out", str(tmp_path / "out"),
               "--work", str(tmp_path / "work"), "--quick"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "| ViT, hard | 359 |" in first.stdout and "| teacher (ResNet) | 359 |" in first.stdout
    with open(tmp_path / "out" / "deit_budget_experiment.json") as stream:
        unbroken = json.load(stream)
    assert unbroken["train_images"] == [359] and set(unbroken["students"]) == set(MODES)
    assert (tmp_path / "out" / "deit_budget_experiment.png").stat().st_size > 10_000
    # a kill during the hard student's run: its folder without its outcome; the rest finished
    hard = next(job for job in experiment_jobs(**deit_budget.QUICK) if job["mode"] == "hard")
    os.remove(os.path.join(run_folder(str(tmp_path / "work"), hard), deit_budget.OUTCOME))
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("finished before") == 3
    with open(tmp_path / "out" / "deit_budget_experiment.json") as stream:
        resumed = json.load(stream)
    for key in ("teacher", "students", "summary"):
        assert resumed[key] == unbroken[key]

"""The data-size experiment (tools/data_size_experiment.py, notebooks/03) measures each trained
model the paper's two ways: its validation top-1, and the few-shot linear accuracy of its frozen
representation with the shots drawn from the run's own training subset (the paper's Figure 4).
"""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from paddle_vit import ConfigError

from repo_paths import REPO, load_tool


def test_the_reported_fewshot_accuracy_is_that_of_the_saved_models_features(tmp_path):
    """One tiny run in this process; its report against few-shot accuracy recomputed here from the
    weights it saved, on the fraction's training images and the validation images, built apart
    from the experiment's own plumbing."""
    import paddle

    from paddle_vit import experiments, fewshot_accuracy, load_pretrained
    from paddle_vit.data.datasets import AugmentedDataset, SubsetSource, digits_sources, stratified_subset
    from paddle_vit.data.transforms import build_transforms
    from paddle_vit.fewshot import representation
    from paddle_vit.factory import build_model

    results = experiments.run_data_size_experiment(str(tmp_path), fractions=(0.1,), seeds=(1,), families=("ViT",),
                                                   steps=2, workers=1, shots=(1, 3))
    config = experiments.experiment_config("ViT", 0.1, 1, "unused", steps=2)
    model = build_model(config, num_classes=10)
    load_pretrained(model, str(tmp_path / "ViT-0.1-1" / "checkpoints" / "last.pdparams"))
    model.eval()

    train, val, _ = digits_sources(config.data.val_fraction, config.data.split_seed)
    subset = stratified_subset(train.labels, 0.1, config.data.split_seed, 1)  # the fraction seed 1 trained on
    transform = build_transforms(config.data, experiments.IMAGE_SIZE, train=False)  # no augmentation

    def features(source):
        dataset = AugmentedDataset(source, transform, experiments.IMAGE_SIZE)
        images = np.stack([dataset[index][0] for index in range(len(dataset))])  # [N, 3, 16, 16]
        with paddle.no_grad():
            return representation(model, paddle.to_tensor(images)).numpy(), np.asarray(source.labels)
    pool, pool_labels = features(SubsetSource(train, subset))
    test, test_labels = features(val)
    assert len(pool) == results["train_images"][0] == 143 and len(test) == 359 and pool.shape[1] == 64

    expected = fewshot_accuracy(pool, pool_labels, test, test_labels, shots=(1, 3), l2_reg=1024.0, seeds=(0, 1, 2))
    for k in (1, 3):
        # the same features up to the batching's float rounding: at most one test image may differ
        np.testing.assert_allclose(results["fewshot_draws"]["ViT"][str(k)][0][0], expected[k], atol=1.01 / 359)
        assert results["fewshot"]["ViT"][str(k)] == [[pytest.approx(np.mean(results["fewshot_draws"]["ViT"][str(k)]
                                                                              [0][0]))]]
    assert results["shots"] == [1, 3] and results["fewshot_draw_seeds"] == [0, 1, 2]


def fake_train_one(family, fraction, seed, output_dir, steps, batch_size, threads=None, shots=(1, 5, 10),
                   teacher=None):
    """Known numbers per run: accuracy 0.5 + fraction / 4 + seed / 100 (+ 0.1 for the ResNet); the
    k-shot accuracy of draw d is a tenth below it, + k / 100 + d / 1000."""
    accuracy = 0.5 + fraction / 4 + seed / 100 + (0.1 if family == "ResNet" else 0.0)
    fewshot = [[accuracy - 0.1 + k / 100 + draw / 1000 for draw in (0, 1, 2)] for k in shots]
    return accuracy, 1000, round(1438 * fraction), 0.0, fewshot


def test_the_tool_writes_both_metrics_with_the_seeds_spread(tmp_path, monkeypatch, capsys):
    from paddle_vit.experiments import data_size as experiments

    monkeypatch.setattr(experiments, "train_one", fake_train_one)
    tool = load_tool("data_size_experiment")
    out = tmp_path / "figures"
    assert tool.main(["--out", str(out), "--fractions", "1", "0.1", "1", "--seeds", "2", "0", "2", "--shots", "5", "1",
                      "--workers", "1"]) == 0  # a value given twice is one run (it once trained it twice, then failed)
    printed = capsys.readouterr().out
    assert "linear 5-shot accuracy of the frozen representation" in printed

    report = json.loads((out / "data_size_experiment.json").read_text())
    assert report["shots"] == [1, 5]
    # ViT on 10%: seeds 0 and 2 trained to 0.525 and 0.545; 5-shot draws 0.475 + 0.05 + (0, 1, 2) / 1000
    assert report["accuracy"]["ViT"][0] == pytest.approx([0.525, 0.545])
    assert report["fewshot_draws"]["ViT"]["5"][0] == [pytest.approx([0.475, 0.476, 0.477]),
                                                      pytest.approx([0.495, 0.496, 0.497])]
    assert report["fewshot"]["ViT"]["5"][0] == pytest.approx([0.476, 0.496])
    assert report["summary"]["ViT"]["fewshot_5shot"][0] == pytest.approx(
        {"mean": 0.486, "std": 0.01, "min": 0.476, "max": 0.496})

    with open(out / "data_size_experiment.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert len(rows) == 5 * 2 * 3  # families x fractions x (val_top1, 1-shot, 5-shot)
    def row_of(family, fraction, metric):
        return next(row for row in rows
                    if (row["family"], row["fraction"], row["metric"]) == (family, fraction, metric))
    row = row_of("ResNet", "1.0", "fewshot_1shot")
    # seeds 0 and 2 trained to 0.85 and 0.87; their 1-shot draws average 0.761 and 0.781
    assert {key: float(row[key]) for key in ("mean", "std", "min", "max", "seed_0", "seed_2")} == pytest.approx(
        {"mean": 0.771, "std": 0.01, "min": 0.761, "max": 0.781, "seed_0": 0.761, "seed_2": 0.781})
    assert (row["train_images"], row["parameters"]) == ("1438", "1000")
    row = row_of("ViT", "0.1", "val_top1")
    assert (float(row["mean"]), float(row["min"]), float(row["max"])) == pytest.approx((0.535, 0.525, 0.545))

    figure = experiments.data_size_figure(report)  # two panels: trained accuracy, 5-shot (the paper's)
    assert [axis.get_title() for axis in figure.axes] == ["trained on the subset: validation top-1",
                                                          "frozen representation: linear 5-shot top-1"]
    assert (out / "data_size_experiment.png").stat().st_size > 0


def test_the_distilled_vit_learns_from_the_resnet_run_of_its_own_fraction_and_seed_after_it_ended(tmp_path,
                                                                                                monkeypatch):
    from paddle_vit.experiments import data_size as experiments

    calls = []

    def record(family, fraction, seed, output_dir, steps, batch_size, threads=None, shots=(1,), teacher=None):
        calls.append((family, fraction, seed, teacher))
        return fake_train_one(family, fraction, seed, output_dir, steps, batch_size, shots=shots)
    monkeypatch.setattr(experiments, "train_one", record)
    work = str(tmp_path)
    results = experiments.run_data_size_experiment(work, fractions=(0.25, 1.0), seeds=(3,), workers=1, shots=(1,),
                                                   families=("ViT distilled", "ViT", "ResNet"))
    assert [call[0] for call in calls] == ["ViT", "ViT", "ResNet", "ResNet", "ViT distilled", "ViT distilled"]
    assert calls[-1][3] == str(tmp_path / "ResNet-1.0-3" / "checkpoints" / "last.pdckpt")
    assert all(teacher is None for family, _, _, teacher in calls if family != "ViT distilled")
    assert list(results["accuracy"]) == ["ViT distilled", "ViT", "ResNet"]  # the tables keep the order asked for
    with pytest.raises(ConfigError, match="'ViT distilled' is taught by the ResNet runs: add 'ResNet'"):
        experiments.run_data_size_experiment(work, fractions=(1.0,), seeds=(0,), workers=1, families=("ViT distilled",))


def test_the_distilled_and_two_token_families_are_the_plain_vit_with_deits_tokens():
    from paddle_vit import experiments

    distilled = experiments.experiment_config("ViT distilled", 0.5, 0, "unused", teacher="t.pdckpt")
    control = experiments.experiment_config("ViT two tokens", 0.5, 0, "unused")
    plain = experiments.experiment_config("ViT", 0.5, 0, "unused")
    assert distilled.model.distilled and distilled.model.pool == "cls" and control.model == distilled.model
    assert (distilled.model.embed_dim, distilled.model.depth) == (plain.model.embed_dim, plain.model.depth)
    assert distilled.train.distillation.teacher == "t.pdckpt" and distilled.train.distillation.type == "hard"
    assert control.train.distillation is None and plain.train.distillation is None


def children_of(pid):
    """The process ids whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == pid:
            found.append(int(entry))
    return found


@pytest.mark.slow  # an experiment started and stopped: 5-10 s
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_experiment_ends_its_runs_and_removes_its_work_folder(tmp_path, signum):
    """A scheduler's SIGTERM, or Ctrl-C sent to the experiment's process alone: its runs side by
    side end, its work folder goes, one line and exit code 130. SIGTERM once left Paddle's C++
    stack on stdout and the work folder in /tmp; SIGINT left the runs going to the end."""
    temporary, out = tmp_path / "tmp", tmp_path / "out"
    temporary.mkdir()
    process = subprocess.Popen([sys.executable, os.path.join(REPO, "tools", "data_size_experiment.py"),
                                "--out", str(out), "--fractions", "0.5", "1", "--seeds", "0", "--steps", "5000",
                                "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, TMPDIR=str(temporary)))
    deadline = time.time() + 120
    while len(children_of(process.pid)) < 2 and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    children = children_of(process.pid)
    assert len(children) == 2 and os.listdir(temporary), "the runs did not start"
    time.sleep(1.0)  # the children are importing and training
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and stderr.splitlines() == ["error: interrupted"], stderr
    assert os.listdir(temporary) == [] and not out.exists()
    assert not [pid for pid in children if os.path.exists(f"/proc/{pid}")]

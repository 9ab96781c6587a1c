"""Few-shot linear evaluation (paddle_vit/fewshot.py): the regression, the per-class draw, the
frozen representation, and the one-line errors."""
import json
import os

import numpy as np
import paddle
import pytest

import paddle_vit
from paddle_vit.errors import ConfigError
from paddle_vit.fewshot import extract_features, fewshot_accuracy, representation

from repo_paths import REPO
from tiny_models import tiny_vit

FIXTURES = os.path.join(REPO, "tests", "fixtures")
BIG_VISION = np.load(os.path.join(FIXTURES, "fewshot_reference.npz"))
with open(os.path.join(FIXTURES, "fewshot_reference.json")) as _stream:
    BIG_VISION_CASES = json.load(_stream)["cases"]


def eigen_form_accuracy(x_train, y_train, x_test, y_test, num_classes, l2_reg):
    """The ridge regression as big_vision writes it (an eigendecomposition of x^T x or x x^T,
    scaled by 1 / (eigs + l2)), written here independently of paddle_vit.fewshot."""
    mean = x_train.mean(0, keepdims=True)
    std = x_train.std(0, keepdims=True) + 1e-5
    x = np.hstack([(x_train - mean) / std, np.full((len(x_train), 1), 100.0)])
    y = 2.0 * np.eye(num_classes)[y_train] - 1.0
    if len(x) >= x.shape[1]:
        eigs, q = np.linalg.eigh(x.T @ x)
        lhs, rhs = q, q.T @ (x.T @ y)
    else:
        eigs, q = np.linalg.eigh(x @ x.T)
        lhs, rhs = x.T @ q, q.T @ y
    w = (lhs / (eigs + l2_reg)[None, :]) @ rhs
    t = np.hstack([(x_test - mean) / std, np.full((len(x_test), 1), 100.0)])
    return float(np.mean(np.argmax(t @ w, 1) == y_test))


def clusters(num_classes, per_class, dim, spread, seed):
    """Gaussian clusters around fixed random centres (the same for every `seed`, so a training
    and a test draw share them): features [num_classes * per_class, dim], labels."""
    centres = np.random.default_rng(100 + dim).normal(size=(num_classes, dim)) * 3
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(num_classes), per_class)
    return (centres[labels] + spread * rng.normal(size=(len(labels), dim))).astype(np.float32), labels


@pytest.mark.parametrize("case", sorted(BIG_VISION_CASES))
def test_fewshot_accuracy_matches_big_vision_to_within_one_test_image(case):
    """big_vision's own evaluator code recorded the accuracies (tests/fixtures/make/fewshot_fixtures.py)."""
    spec = BIG_VISION_CASES[case]
    arrays = {name: BIG_VISION[f"{case}/{name}"] for name in
              ("train_features", "train_labels", "test_features", "test_labels", "accuracy")}
    got = fewshot_accuracy(arrays["train_features"], arrays["train_labels"], arrays["test_features"],
                           arrays["test_labels"], shots=spec["shots"], l2_reg=spec["l2_reg"], seeds=spec["seeds"],
                           num_classes=spec["num_classes"])
    table = np.array([got[k] for k in spec["shots"]])  # [shots, seeds]
    assert table.shape == arrays["accuracy"].shape
    num_test = len(arrays["test_labels"])
    assert np.abs(table - arrays["accuracy"]).max() * num_test <= 1 + 1e-4
    # the recorded numbers are not all alike: the cases discriminate
    assert len(np.unique(arrays["accuracy"].round(4))) >= 3


@pytest.mark.parametrize("dim", [3, 40], ids=["more_points_than_dimensions", "fewer_points_than_dimensions"])
def test_fewshot_accuracy_equals_the_eigendecomposition_form_on_the_same_draw(dim):
    train_x, train_y = clusters(4, 30, dim, spread=4.0, seed=1)
    test_x, test_y = clusters(4, 25, dim, spread=4.0, seed=2)
    shots, seeds, l2 = (1, 2, 5), (0, 1, 2), 16.0
    got = fewshot_accuracy(train_x, train_y, test_x, test_y, shots=shots, l2_reg=l2, seeds=seeds)
    assert list(got) == list(shots)
    for seed_position, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)  # one generator per seed, drawn class by class
        per_class = [rng.permutation(np.where(train_y == c)[0]) for c in range(4)]
        for k in shots:
            chosen = np.concatenate([p[:k] for p in per_class])
            want = eigen_form_accuracy(train_x[chosen].astype(np.float64), train_y[chosen],
                                       test_x.astype(np.float64), test_y, 4, l2)
            assert got[k][seed_position] == pytest.approx(want, abs=1e-12)
    # the task is hard enough that seeds and shots change the answer (the draw matters)
    assert len({a for values in got.values() for a in values}) > 3


def test_well_separated_classes_are_all_recognised_from_one_shot():
    train_x, train_y = clusters(5, 10, 8, spread=0.01, seed=3)
    test_x, test_y = clusters(5, 10, 8, spread=0.01, seed=3)
    assert fewshot_accuracy(train_x, train_y, test_x, test_y, shots=(1, 5), seeds=(0, 1)) == {
        1: [1.0, 1.0], 5: [1.0, 1.0]}


def test_a_class_with_fewer_images_than_shots_uses_what_it_has(caplog):
    train_x, train_y = clusters(3, 6, 5, spread=3.0, seed=4)
    keep = np.r_[0:6, 6:8, 12:18]  # class 1 keeps only 2 images
    train_x, train_y = train_x[keep], train_y[keep]
    test_x, test_y = clusters(3, 20, 5, spread=3.0, seed=5)
    with caplog.at_level("WARNING", logger="paddle_vit"):
        got = fewshot_accuracy(train_x, train_y, test_x, test_y, shots=(6, 50), seeds=(0, 7))
    assert got[6] == got[50]  # every class has <= 6 images: both take everything
    # 50 shots are more than any class has: said once; 6 are what the largest classes have
    assert [record.getMessage() for record in caplog.records] == [
        "few-shot: 50 shots is more than any class has (the most: 6 images): each class gives all its images, "
        "as big_vision does"]
    everything = eigen_form_accuracy(train_x.astype(np.float64), train_y, test_x.astype(np.float64), test_y, 3,
                                     1024.0)
    assert got[6] == pytest.approx([everything, everything], abs=1e-12)


def test_features_of_very_different_scales_give_the_same_accuracy_after_whitening():
    train_x, train_y = clusters(3, 20, 6, spread=3.0, seed=6)
    test_x, test_y = clusters(3, 20, 6, spread=3.0, seed=7)
    scales = np.array([1e-3, 1.0, 1e3, 1e4, 0.1, 10.0], dtype=np.float64)
    plain = fewshot_accuracy(train_x, train_y, test_x, test_y, shots=(2, 10))
    scaled = fewshot_accuracy(train_x * scales, train_y, test_x * scales, test_y, shots=(2, 10))
    for k in plain:
        assert scaled[k] == pytest.approx(plain[k], abs=1e-12)
    assert 0.6 < np.mean(plain[10]) < 1.0  # neither chance nor a trivial task


def test_fewshot_accuracy_is_exported_lazily_from_the_package():
    assert paddle_vit.fewshot_accuracy is fewshot_accuracy
    assert "fewshot_accuracy" in dir(paddle_vit)


GOOD = dict(train_features=np.zeros((4, 3)), train_labels=np.array([0, 0, 1, 1]),
            test_features=np.zeros((2, 3)), test_labels=np.array([0, 1]))


@pytest.mark.parametrize("change, message", [
    (dict(train_features=np.zeros((4,))), "train_features must be a 2-D array"),
    (dict(test_features=np.zeros((2, 4))), "test_features have 4"),
    (dict(train_labels=np.array([0, 0, 1])), "train_labels has 3 labels but train_features has 4 rows"),
    (dict(train_labels=np.array([0.0, 0.0, 1.0, 1.0])), "train_labels must be integer class indices"),
    (dict(test_labels=np.array([0, -1])), "test_labels has a negative class index -1"),
    (dict(train_features=np.array([[0, 0, 0], [0, np.nan, 0], [0, 0, 0], [0, 0, 0]])),
     "train_features has a non-finite value (nan or inf) at row 1, column 1"),
    (dict(shots=(1, 0)), "shots must be a non-empty list of positive integers"),
    (dict(shots=(2.5,)), "shots must be a non-empty list of positive integers"),
    (dict(shots=(5, 1, 5)), "shots must not repeat a value, got [5, 1, 5]"),
    (dict(seeds=(0, 0)), "seeds must not repeat a value"),
    (dict(l2_reg=-1.0), "l2_reg must be a finite number >= 0, got -1.0"),
    (dict(seeds=3), "seeds must be a list of integer seeds such as range(3)"),
    (dict(num_classes=1), "num_classes must be an integer >= 2"),
])
def test_bad_input_is_one_config_error_naming_it(change, message):
    with pytest.raises(ConfigError) as raised:
        fewshot_accuracy(**{**GOOD, **change})
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def batches(images, labels, batch_size):
    return [(paddle.to_tensor(images[i:i + batch_size]), paddle.to_tensor(labels[i:i + batch_size]))
            for i in range(0, len(images), batch_size)]


@pytest.mark.parametrize("overrides, dim", [(dict(), 32), (dict(representation_size=12), 12),
                                            (dict(pool="mean"), 32)], ids=["cls", "pre_logits", "mean_pool"])
def test_extract_features_is_the_representation_the_head_reads_in_eval_mode(overrides, dim):
    paddle.seed(0)
    model = tiny_vit(dropout=0.5, **overrides)  # dropout: features in train mode would differ
    model.train()
    images = np.random.default_rng(0).normal(size=(7, 3, 32, 32)).astype(np.float32)
    labels = np.array([0, 1, 2, 3, 4, 0, 1])
    features, got_labels = extract_features(model, batches(images, labels, 3))
    assert features.shape == (7, dim) and features.dtype == np.float32
    assert got_labels.dtype == np.int64 and got_labels.tolist() == labels.tolist()
    assert model.training  # its mode is given back
    model.eval()
    with paddle.no_grad():
        tokens = model.forward_features(paddle.to_tensor(images))
        pooled = model.pool_tokens(tokens)
        if model.config.representation_size:
            pooled = model.pre_logits(pooled)
        np.testing.assert_allclose(features, pooled.numpy(), rtol=1e-5, atol=1e-6)
        # the head applied to the representation is the model's output
        np.testing.assert_allclose(model.head(representation(model, paddle.to_tensor(images))).numpy(),
                                   model(paddle.to_tensor(images)).numpy(), rtol=1e-5, atol=1e-6)


# ---- on a recipe's data: training and tools/eval.py -----------------------------------------
def digits_config(output_dir, fewshot_interval):
    """Two seconds-long epochs of a tiny walkthrough ViT on the digits (1,438 train / 359 val)."""
    from paddle_vit.config import load_config
    return load_config(data={
        "model": {"name": "vit_walkthrough", "image_size": 14, "embed_dim": 16, "depth": 1, "num_heads": 2,
                  "num_classes": None, "dropout": 0.1},
        "data": {"dataset": "digits", "train_crop": "pad_crop", "crop_padding": 1, "hflip": 0.0},
        "optimizer": {"lr": 0.01},
        "schedule": {"warmup_epochs": 0},
        "train": {"epochs": 2, "batch_size": 128, "output_dir": str(output_dir), "device": "cpu",
                  "save_interval": 1, "keep_last": 5},
        "eval": {"batch_size": 400, "fewshot_interval": fewshot_interval, "fewshot_shots": [1, 5],
                 "fewshot_seeds": 2}})


def fewshot_of_checkpoint(config, path):
    """fewshot_accuracy on extract_features of the weights at `path`: the training split through
    the validation transform is the pool, the validation split the test."""
    from paddle_vit.data import AugmentedDataset, build_dataloader, build_datasets
    from paddle_vit.factory import model_for_evaluation
    model = model_for_evaluation(config, path)
    train_set, val_set, class_names = build_datasets(config.data, 14, seed=config.train.seed)
    pool = AugmentedDataset(train_set.source, val_set.transform, 14, config.train.seed)
    loaders = [build_dataloader(data, 400, shuffle=False, drop_last=False) for data in (pool, val_set)]
    (train_x, train_y), (test_x, test_y) = [extract_features(model, loader) for loader in loaders]
    assert len(train_y) + len(test_y) == 1797 and train_x.shape[1] == 16
    return fewshot_accuracy(train_x, train_y, test_x, test_y, shots=(1, 5), seeds=(0, 1), num_classes=10), len(test_y)


@pytest.mark.slow  # a training run and an eval: 2-4 s
def test_training_logs_the_fewshot_accuracy_of_its_checkpoints_and_eval_reproduces_it(tmp_path, capsys):
    from visualdl import LogReader
    from paddle_vit.engine.trainer import Trainer
    from repo_paths import load_tool

    config = digits_config(tmp_path / "run", fewshot_interval=1)
    Trainer(config).fit()
    with open(tmp_path / "run" / "metrics.jsonl") as stream:
        records = [json.loads(line) for line in stream]
    checkpoints = tmp_path / "run" / "checkpoints"
    for record, name in zip(records, ("epoch_0001.pdckpt", "epoch_0002.pdckpt")):
        want, num_test = fewshot_of_checkpoint(config, str(checkpoints / name))
        for k in (1, 5):
            assert record[f"fewshot_{k}shot"] == pytest.approx(np.mean(want[k]), abs=0.5 / num_test), (name, k)
    assert records[1]["fewshot_5shot"] > 0.3  # ten classes: chance is 0.1
    reader = LogReader(file_path=str(next((tmp_path / "run" / "vdl").glob("vdlrecords*"))))
    logged = [(r.id, r.value) for r in reader.get_data("scalar", "fewshot/5shot")]
    assert [step for step, _ in logged] == [r["step"] for r in records]
    assert [value for _, value in logged] == pytest.approx([r["fewshot_5shot"] for r in records], abs=1e-6)

    # the same numbers from the command line, on the run's recipe and last checkpoint
    config.save(str(tmp_path / "recipe.yaml"))
    capsys.readouterr()
    assert load_tool("eval").main(["-c", str(tmp_path / "recipe.yaml"), "--weights", str(checkpoints / "last.pdckpt"),
                                   "--protocol", "fewshot", "--shots", "1,5", "--seeds", "2"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["num_train"], summary["num_test"], summary["feature_dim"]) == (1438, 359, 16)
    assert summary["shots"] == [1, 5] and summary["seeds"] == [0, 1] and summary["l2_reg"] == 1024.0
    for k in ("1", "5"):
        assert len(summary["accuracy"][k]) == 2
        assert summary["mean"][k] == pytest.approx(np.mean(summary["accuracy"][k]), abs=1e-12)
        assert summary["mean"][k] == pytest.approx(records[1][f"fewshot_{k}shot"], abs=0.5 / 359)


@pytest.mark.slow
def test_a_run_with_fewshot_evaluation_trains_to_the_same_weights_as_one_without(tmp_path):
    """The few-shot evaluation draws from no generator of the run (eval mode, the unaugmented
    pool, its own default_rng): every weight and loss of the run is as without it."""
    from paddle_vit.checkpoint import load_checkpoint
    from paddle_vit.engine.trainer import Trainer
    runs = {}
    for interval in (1, 0):
        Trainer(digits_config(tmp_path / str(interval), fewshot_interval=interval)).fit()
        runs[interval] = load_checkpoint(str(tmp_path / str(interval) / "checkpoints" / "last.pdckpt"))
    for name, value in runs[1]["model"].items():
        np.testing.assert_array_equal(value.numpy(), runs[0]["model"][name].numpy(), err_msg=name)
    assert [r["train_loss"] for r in runs[1]["history"]] == [r["train_loss"] for r in runs[0]["history"]]
    assert "fewshot_1shot" in runs[1]["history"][0] and "fewshot_1shot" not in runs[0]["history"][0]


@pytest.mark.parametrize("options, message", [
    (["--shots", "1,x"], "argument --shots: expected different integers >= 1 separated by commas, e.g. 1,5,10,25"),
    (["--shots", "0"], "argument --shots: expected different integers >= 1 separated by commas"),
    (["--shots", "5,5"], "argument --shots: expected different integers >= 1 separated by commas, e.g. 1,5,10,25, got '5,5'"),
    (["--l2-reg", "-3"], "argument --l2-reg: expected a finite number >= 0, got '-3'"),
    (["--l2-reg", "nan"], "argument --l2-reg: expected a finite number >= 0, got 'nan'"),
    (["--seeds", "0"], "argument --seeds: expected an integer >= 1, got '0'"),
    (["--seeds", "\u00b2"], "argument --seeds: expected an integer >= 1"),  # str.isdigit() said yes: a traceback
    (["--protocol", "linear"], "invalid choice: 'linear'"),
    (["--protocol", "fewshot", "--confusion-matrix", "c.png"], "--confusion-matrix draws the head's predictions"),
])
def test_bad_fewshot_options_of_eval_are_one_error_line(tmp_path, capsys, options, message):
    from repo_paths import load_tool
    needs_protocol = options[0] in ("--shots", "--l2-reg", "--seeds")
    argv = ["--model", "vit_walkthrough", "--weights", str(tmp_path / "none.pdckpt"), *options]
    capsys.readouterr()
    assert load_tool("eval").main(argv + (["--protocol", "fewshot"] if needs_protocol else [])) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("error: ") and message in error[0], error
    if needs_protocol:  # without --protocol fewshot even a good value is a mistake
        good = {"--shots": "1,5", "--l2-reg": "1", "--seeds": "2"}[options[0]]
        assert load_tool("eval").main([*argv[:4], options[0], good]) == 2
        assert "add --protocol fewshot" in capsys.readouterr().err


@pytest.mark.parametrize("key, value, message", [
    ("fewshot_interval", -1, "eval.fewshot_interval must be >= 0"),
    ("fewshot_shots", [5, 0], "eval.fewshot_shots must be a non-empty list of different positive integers"),
    ("fewshot_shots", [5, 5], "eval.fewshot_shots must be a non-empty list of different positive integers"),
    ("fewshot_shots", 5, "eval.fewshot_shots must be a list of an integer"),
    ("fewshot_l2_reg", -1.0, "eval.fewshot_l2_reg must be >= 0.0"),
    ("fewshot_seeds", 0, "eval.fewshot_seeds must be >= 1"),
])
def test_bad_fewshot_config_keys_are_one_config_error(key, value, message):
    from paddle_vit.config import load_config
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("[", r"\[")):
        load_config(data={"eval": {key: value}})

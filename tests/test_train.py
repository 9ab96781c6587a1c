"""Training and evaluation end to end on small data: loss falls, logs, checkpoints, exact resume,
fine-tuning at a new resolution, eval output, device and AMP handling."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import paddle
import pytest

from paddle_vit import ConfigError
from paddle_vit.config import load_config
from paddle_vit.engine import trainer as trainer_module
from paddle_vit.checkpoint import find_latest_checkpoint, load_checkpoint
from paddle_vit.engine.trainer import Trainer
from paddle_vit.variants import compiled, fused_adamw, fused_layer

from kernel_calls import count_calls
from repo_paths import REPO, TOOLS, load_tool


def small_config(output_dir, **sections):
    """A seconds-long recipe: the walkthrough model at 14x14 (2x2 patches) on the synthetic set."""
    data = {
        "model": {"name": "vit_walkthrough", "image_size": 14, "embed_dim": 16, "depth": 2, "num_heads": 2,
                  "num_classes": None, "dropout": 0.1, "drop_path": 0.1},
        "data": {"dataset": "synthetic", "synthetic_train_size": 96, "synthetic_val_size": 40,
                 "synthetic_classes": 4, "train_crop": "pad_crop", "crop_padding": 1, "hflip": 0.5},
        "optimizer": {"lr": 0.003},
        "schedule": {"warmup_epochs": 0.5},
        "train": {"epochs": 2, "batch_size": 16, "output_dir": str(output_dir), "log_interval": 2, "device": "cpu"},
        "eval": {"batch_size": 16},
    }
    for section, values in sections.items():
        data[section].update(values)
    return load_config(data=data)


def read_metrics(output_dir):
    with open(os.path.join(output_dir, "metrics.jsonl")) as stream:
        return [json.loads(line) for line in stream]


def final_weights(output_dir):
    state = load_checkpoint(os.path.join(output_dir, "checkpoints", "last.pdckpt"))
    return {name: value.numpy() for name, value in state["model"].items()}


def assert_resumed_equals_straight(straight, broken, keys=("train_loss", "val_top1", "val_loss", "lr")):
    """The run folder `broken` (stopped and resumed) ends with the weights of `straight` (unbroken)
    and the same per-epoch `keys` of metrics.jsonl, to float rounding."""
    expected, got = final_weights(straight), final_weights(broken)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-6, err_msg=name)
    for a, b in zip(read_metrics(straight), read_metrics(broken)):
        for key in keys:
            assert a[key] == pytest.approx(b[key], abs=1e-6), key


def test_two_epochs_loss_falls_and_everything_is_written(tmp_path):
    config = small_config(tmp_path / "run", train={"epochs": 4})
    summary = Trainer(config).fit()
    records = read_metrics(tmp_path / "run")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4]
    for key in ("epoch", "train_loss", "lr", "val_top1", "val_top5", "val_loss", "images_per_sec"):
        assert key in records[-1], key
    assert records[-1]["train_loss"] < records[0]["train_loss"]
    assert 0.0 <= records[-1]["val_top1"] <= 1.0 and records[-1]["val_top1"] > 0.5  # 4 classes: chance is 0.25
    assert summary["best_top1"] == max(r["val_top1"] for r in records)
    checkpoints = tmp_path / "run" / "checkpoints"
    for name in ("last.pdckpt", "last.pdparams", "best.pdparams"):
        assert (checkpoints / name).is_file(), name
    assert (tmp_path / "run" / "config.yaml").is_file()
    resolved = load_config(str(tmp_path / "run" / "config.yaml"))
    assert resolved.train.epochs == 4 and resolved.model.embed_dim == 16


@pytest.mark.slow
def test_a_hybrid_trains_on_the_digits_and_its_loss_falls(tmp_path):
    """The tiny hybrid's ResNet stem (stride 4) under 1x1 patches: 16x16 digits, 4x4 tokens."""
    config = small_config(tmp_path / "run", model={
        "name": "vit_tiny_r_s16_p8_224", "image_size": 16, "patch_size": 1, "embed_dim": 16, "depth": 2,
        "num_heads": 2, "num_classes": None, "dropout": 0.0, "drop_path": 0.0},
        data={"dataset": "digits", "train_crop": "resize", "hflip": 0.0}, train={"epochs": 3, "batch_size": 64},
        optimizer={"lr": 0.003})
    trainer = Trainer(config)
    assert trainer.vit.config.is_hybrid and trainer.vit.patch_embed.grid_size == (4, 4)
    trainer.fit()
    records = read_metrics(tmp_path / "run")
    assert records[-1]["train_loss"] < records[0]["train_loss"] and records[-1]["val_top1"] > 0.3  # chance 0.1


def test_visualdl_log_holds_the_scalars(tmp_path):
    from visualdl import LogReader
    Trainer(small_config(tmp_path / "run", train={"epochs": 1})).fit()
    vdl_dir = tmp_path / "run" / "vdl"
    files = [name for name in os.listdir(vdl_dir) if name.startswith("vdlrecords")]
    assert files
    reader = LogReader(file_path=str(vdl_dir / files[0]))
    tags = set(reader.get_tags()["scalar"])
    for tag in ("train/loss", "train/lr", "train/images_per_sec", "val/top1", "val/top5", "val/loss"):
        assert tag in tags, tag
    losses = [record.value for record in reader.get_data("scalar", "train/loss")]
    assert len(losses) == 3 and all(np.isfinite(losses))  # 6 steps, logged every 2


def test_attention_map_of_a_validation_image_is_logged_every_n_epochs(tmp_path):
    from visualdl import LogReader
    Trainer(small_config(tmp_path / "run", train={"epochs": 2}, eval={"attention_map_interval": 1})).fit()
    vdl_dir = tmp_path / "run" / "vdl"
    reader = LogReader(file_path=str(vdl_dir / next(n for n in os.listdir(vdl_dir) if n.startswith("vdlrecords"))))
    assert "val/attention" in reader.get_tags()["image"]
    assert [record.id for record in reader.get_data("image", "val/attention")] == [1, 2]


def test_learning_rate_warms_up_then_decays_per_step(tmp_path):
    config = small_config(tmp_path / "run", train={"epochs": 4}, schedule={"warmup_epochs": 1.0, "min_lr": 0.0})
    trainer = Trainer(config)
    lrs = []
    for _ in range(4 * trainer.parts.updates_per_epoch):
        lrs.append(trainer.parts.schedule.get_lr())
        trainer.parts.schedule.step()
    warmup = trainer.parts.updates_per_epoch
    assert lrs[0] == pytest.approx(config.schedule.warmup_start_lr)
    assert lrs[warmup] == pytest.approx(0.003)  # the peak right after warm-up
    assert all(a < b for a, b in zip(lrs[:warmup], lrs[1:warmup + 1]))
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))
    middle = warmup + (len(lrs) - warmup) // 2  # cosine: half the peak halfway through the decay
    assert lrs[middle] == pytest.approx(0.0015, rel=0.05)


def test_weight_decay_skips_biases_norms_and_embeddings(tmp_path):
    trainer = Trainer(small_config(tmp_path / "run", train={"epochs": 1}))
    decide = trainer.parts.optimizer._apply_decay_param_fun
    by_name = dict(trainer.vit.named_parameters())
    assert decide(by_name["encoder.layers.0.attn.qkv.weight"].name)
    assert decide(by_name["head.weight"].name)
    for name in ("encoder.layers.0.attn.qkv.bias", "encoder.layers.0.norm1.weight", "patch_embed.class_token",
                 "patch_embed.position_embedding", "head.bias"):
        assert not decide(by_name[name].name), name


def test_gradient_clipping_is_global_norm(tmp_path):
    trainer = Trainer(small_config(tmp_path / "run", train={"epochs": 1}))
    assert isinstance(trainer.parts.optimizer._grad_clip, paddle.nn.ClipGradByGlobalNorm)


def stop_after(trainer, updates):
    """Make `trainer` behave as if Ctrl-C arrived during update number `updates`."""
    original = trainer.optimizer_step

    def step():
        original()
        if trainer.position.global_step == updates:
            trainer.stop_requested = True
    trainer.optimizer_step = step


def run_straight_and_stopped(config, folder, stop_at=4):
    """Train config("straight") unbroken, and config("broken") stopped during update `stop_at`
    (inside the first epoch of small_config's 6 batches), then resumed with resume=auto to the
    end; returns (straight folder, broken folder)."""
    Trainer(config("straight")).fit()
    first = Trainer(config("broken"))
    stop_after(first, stop_at)
    assert first.fit()["interrupted"]
    resumed = Trainer(config("broken", resume="auto"))
    assert resumed.position.global_step == stop_at
    resumed.fit()
    return folder / "straight", folder / "broken"


@pytest.mark.parametrize("augment", [
    {},
    {"data": {"randaugment_num_ops": 2, "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "random_erasing": 0.25},
     "train": {"label_smoothing": 0.1, "ema": True, "ema_decay": 0.9, "accumulate_steps": 2}},
])
@pytest.mark.slow
def test_resume_mid_epoch_equals_uninterrupted_run(tmp_path, augment):
    def config(name, **train):
        sections = {key: dict(value) for key, value in augment.items()}
        sections.setdefault("train", {}).update(train)
        return small_config(tmp_path / name, **sections)

    Trainer(config("straight")).fit()
    first = Trainer(config("broken"))
    stop_after(first, 4)  # epoch 1 has 6 batches: stop inside it
    assert first.fit()["interrupted"]
    state = load_checkpoint(str(tmp_path / "broken" / "checkpoints" / "last.pdckpt"))
    assert 0 < state["batch_in_epoch"] < 6  # stopped inside an epoch
    resumed = Trainer(config("broken", resume="auto"))
    assert resumed.position.global_step == 4
    resumed.fit()
    assert_resumed_equals_straight(tmp_path / "straight", tmp_path / "broken")


@pytest.mark.slow
@pytest.mark.skipif(not compiled.build_possible(), reason="no C++ compiler: the layer of modules and Paddle's AdamW")
def test_resume_with_the_compiled_layer_and_adamw_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    """A model wide enough for the compiled encoder layer (drop path drawn for it) and AdamW's
    one-op update: their state (the optimizer's accumulators, the drop-path draws) resumes too."""
    layer_calls = count_calls(monkeypatch, fused_layer, "paddle_vit_encoder_layer")
    adamw_calls = count_calls(monkeypatch, fused_adamw, "paddle_vit_adamw")

    def config(name, **train):
        return small_config(tmp_path / name, model={"embed_dim": 128, "num_heads": 4, "dropout": 0.0}, train=train)

    straight, broken = run_straight_and_stopped(config, tmp_path)
    assert layer_calls[0] > 0 and adamw_calls[0] > 0  # the compiled path, not the fallback
    assert_resumed_equals_straight(straight, broken)


def test_resume_auto_skips_a_checkpoint_cut_short(tmp_path):
    config = small_config(tmp_path / "run", train={"epochs": 2, "save_interval": 1, "keep_last": 5})
    Trainer(config).fit()
    folder = tmp_path / "run" / "checkpoints"
    last = folder / "last.pdckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # a crash mid-write of a non-atomic saver
    assert find_latest_checkpoint(str(folder)) == str(folder / "epoch_0002.pdckpt")


@pytest.mark.slow
def test_sigint_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    output = tmp_path / "run"
    config_path = tmp_path / "slow.yaml"
    config_path.write_text(
        "model: {name: vit_walkthrough, image_size: 28, embed_dim: 32, depth: 2, num_heads: 2}\n"
        "data: {dataset: synthetic, synthetic_train_size: 4000, synthetic_val_size: 16}\n"
        f"train: {{epochs: 1, batch_size: 8, device: cpu, log_interval: 1, output_dir: '{output}'}}\n")
    process = subprocess.Popen([sys.executable, os.path.join(TOOLS, "train.py"), "-c", str(config_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    for line in process.stdout:  # wait until it is really training
        if "step 3/" in line or time.time() > deadline:
            break
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "train.resume=auto" in stdout
    state = load_checkpoint(str(output / "checkpoints" / "last.pdckpt"))
    assert state["batch_in_epoch"] >= 3 and state["epoch"] == 0


def test_fine_tune_from_timm_checkpoint_at_new_resolution(tmp_path):
    fixture = os.path.join(REPO, "tests", "fixtures", "timm_vit_cls.safetensors")
    config = small_config(tmp_path / "run", model={
        "name": "vit_walkthrough", "image_size": 48, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 4,
        "pool": "cls", "pretrained": fixture, "dropout": 0.0, "drop_path": 0.0}, train={"epochs": 1})
    trainer = Trainer(config)
    assert trainer.vit.patch_embed.position_embedding.shape == [1, 37, 32]  # 6x6 grid + class token
    assert trainer.vit.head.weight.shape == [32, 4]
    assert not np.any(trainer.vit.head.weight.numpy())  # re-initialised to zero for 4 classes
    from safetensors.numpy import load_file
    timm_weights = load_file(fixture)
    np.testing.assert_allclose(trainer.vit.encoder.layers[1].mlp.fc2.weight.numpy(),
                               timm_weights["blocks.1.mlp.fc2.weight"].T, atol=0)
    trainer.fit()
    assert read_metrics(tmp_path / "run")[0]["val_top1"] >= 0.0


@pytest.mark.slow
def test_fine_tuned_from_hugging_face_then_evaluated_with_its_options(tmp_path, capsys):
    """The run takes transformers' epsilon (1e-12) from the folder's config.json; its last.pdparams
    records none, so tools/eval.py on the recipe must take it from model.pretrained again to
    reproduce the run's own validation numbers."""
    folder = os.path.join(REPO, "tests", "fixtures", "hf_vit_classifier")
    config = small_config(tmp_path / "run", model={
        "name": "vit_tiny_patch16_224", "image_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2,
        "num_heads": 4, "mlp_ratio": 2, "pretrained": folder, "dropout": 0.0, "drop_path": 0.0},
        data={"synthetic_classes": 10}, optimizer={"lr": 1e-6},  # its head kept, a small step: epsilon matters
        train={"epochs": 1})
    trainer = Trainer(config)
    assert trainer.vit.config.layer_norm_epsilon == 1e-12 and trainer.vit.config.num_classes == 10
    trainer.fit()
    config.save(str(tmp_path / "recipe.yaml"))
    record = read_metrics(tmp_path / "run")[-1]

    def evaluated_loss(*overrides):  # tools/eval.py's main, in this process
        capsys.readouterr()
        assert load_tool("eval").main(["-c", str(tmp_path / "recipe.yaml"), "--weights",
                                       str(tmp_path / "run" / "checkpoints" / "last.pdparams"),
                                       "-o", "eval.engine=dynamic", *overrides]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["loss"]

    assert evaluated_loss() == pytest.approx(record["val_loss"], abs=1e-5)
    assert abs(evaluated_loss("-o", "model.layer_norm_epsilon=1e-6") - record["val_loss"]) > 1e-3


@pytest.mark.slow
def test_eval_tool_reproduces_training_accuracy(tmp_path, capsys):
    config = small_config(tmp_path / "run", train={"epochs": 2})
    Trainer(config).fit()
    config.save(str(tmp_path / "recipe.yaml"))
    last = read_metrics(tmp_path / "run")[-1]
    for weights in ("last.pdckpt", "last.pdparams"):
        argv = ["-c", str(tmp_path / "recipe.yaml"), "--weights", str(tmp_path / "run" / "checkpoints" / weights),
                "--confusion-matrix", str(tmp_path / "confusion.png")]
        if weights == "last.pdckpt":  # the command as a user runs it
            result = subprocess.run([sys.executable, os.path.join(TOOLS, "eval.py"), *argv], capture_output=True,
                                    text=True, timeout=300)
            assert result.returncode == 0, result.stderr
            out = result.stdout
        else:  # the same command in this process, on the eager engine (every engine's numbers: the next test)
            capsys.readouterr()
            assert load_tool("eval").main(argv + ["-o", "eval.engine=dynamic"]) == 0
            out = capsys.readouterr().out
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["num_samples"] == 40
        assert summary["top1"] == pytest.approx(last["val_top1"], abs=1e-6)
        assert summary["loss"] == pytest.approx(last["val_loss"], abs=1e-5)
        assert set(summary["per_class_accuracy"]) == {"0", "1", "2", "3"}
    assert (tmp_path / "confusion.png").stat().st_size > 1000
    capsys.readouterr()  # a .pdckpt alone: evaluated with the recipe it stores
    checkpoint = str(tmp_path / "run" / "checkpoints" / "last.pdckpt")
    assert load_tool("eval").main(["--weights", checkpoint, "-o", "eval.engine=dynamic"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_samples"] == 40 and summary["top1"] == pytest.approx(last["val_top1"], abs=1e-6)


@pytest.mark.slow
def test_eval_of_ema_weights(tmp_path):
    config = small_config(tmp_path / "run", train={"epochs": 1, "ema": True, "ema_decay": 0.5})
    Trainer(config).fit()
    from paddle_vit.engine.evaluator import run_evaluation
    metrics = run_evaluation(config, str(tmp_path / "run" / "checkpoints" / "last.pdckpt"), use_ema=True)
    assert metrics["top1"] == pytest.approx(read_metrics(tmp_path / "run")[0]["val_ema_top1"], abs=1e-6)


@pytest.mark.slow
def test_every_eval_engine_gives_the_training_runs_numbers(tmp_path):
    config = small_config(tmp_path / "run", train={"epochs": 1})
    Trainer(config).fit()
    from paddle_vit.engine.evaluator import run_evaluation
    record = read_metrics(tmp_path / "run")[0]
    weights = str(tmp_path / "run" / "checkpoints" / "last.pdparams")
    for engine in ("dynamic", "to_static", "predictor"):
        metrics = run_evaluation(dataclasses.replace(config, eval=dataclasses.replace(config.eval, engine=engine)),
                                 weights)
        assert metrics["num_samples"] == 40, engine
        assert metrics["top1"] == pytest.approx(record["val_top1"], abs=1e-6), engine
        assert metrics["loss"] == pytest.approx(record["val_loss"], abs=1e-5), engine


def test_gpu_requested_on_cpu_build_is_a_clear_error(tmp_path):
    if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        pytest.skip("this machine has a GPU, so asking for one is not an error")
    with pytest.raises(ConfigError, match="train.device is 'gpu' but"):
        Trainer(small_config(tmp_path / "run", train={"device": "gpu"}))


def test_amp_bf16_runs_on_cpu_in_float32_with_a_warning(tmp_path, caplog):
    """Paddle's autocast acts only on GPU/XPU (it warns "amp_guard can only be enabled on
    CUDAPlace" on CPU, even where the CPU has bf16 and `paddle.amp.is_bfloat16_supported()` is
    true); the run must still work, in float32, and say so."""
    with caplog.at_level("WARNING", logger="paddle_vit"):
        trainer = Trainer(small_config(tmp_path / "run", train={"epochs": 1, "amp": "bf16", "amp_level": "O2"}))
    assert trainer.parts.amp_dtype is None and "train.amp=bf16 has no effect" in caplog.text
    assert np.isfinite(trainer.fit()["last_epoch"]["train_loss"])


@pytest.mark.slow
def test_train_tool_reports_bad_config_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(TOOLS, "train.py"), "-c", str(tmp_path / "missing.yaml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: config file {tmp_path / 'missing.yaml'} does not exist"]


def test_step_seed_is_a_pure_function_of_position_and_rank():
    assert trainer_module.step_seed(0, 1, 2) == trainer_module.step_seed(0, 1, 2)
    assert trainer_module.step_seed(0, 1, 2) != trainer_module.step_seed(0, 2, 1)
    # rank 0 draws as a single process; every other rank its own masks and mixing
    assert trainer_module.step_seed(0, 1, 2, rank=0) == trainer_module.step_seed(0, 1, 2)
    assert len({trainer_module.step_seed(0, 1, 2, rank=r) for r in range(4)}) == 4
    from paddle_vit.data import batch_rng
    assert batch_rng(0, 1, 2, rank=0).random() == batch_rng(0, 1, 2).random() != batch_rng(0, 1, 2, rank=1).random()


@pytest.mark.slow
def test_to_static_training_matches_dynamic(tmp_path):
    no_dropout = {"dropout": 0.0, "drop_path": 0.0}  # the graph draws its random numbers differently
    Trainer(small_config(tmp_path / "dynamic", model=no_dropout, train={"epochs": 1})).fit()
    Trainer(small_config(tmp_path / "static", model=no_dropout, train={"epochs": 1, "to_static": True})).fit()
    dynamic, static = read_metrics(tmp_path / "dynamic")[0], read_metrics(tmp_path / "static")[0]
    assert static["train_loss"] == pytest.approx(dynamic["train_loss"], abs=1e-5)
    assert static["val_loss"] == pytest.approx(dynamic["val_loss"], abs=1e-5)


def test_head_lr_scale_multiplies_the_head_learning_rate(tmp_path):
    config = small_config(tmp_path / "run", optimizer={"head_lr_scale": 10.0, "weight_decay": 0.0,
                                                       "clip_grad_norm": 0.0},
                          schedule={"name": "constant", "warmup_epochs": 0.0})
    trainer = Trainer(config)
    before = {name: p.numpy().copy() for name, p in trainer.vit.named_parameters()}
    images, labels = next(iter(trainer.parts.train_loader))
    trainer.loss(trainer.parts.model(images), labels).backward()
    trainer.optimizer_step()
    # AdamW's first step moves every weight by about lr (the update is m / sqrt(v) = sign(g))
    head_step = np.abs(trainer.vit.head.weight.numpy() - before["head.weight"]).max()
    body_step = np.abs(trainer.vit.encoder.layers[0].mlp.fc1.weight.numpy()
                       - before["encoder.layers.0.mlp.fc1.weight"]).max()
    assert head_step == pytest.approx(10 * 0.003, rel=0.01)
    assert body_step == pytest.approx(0.003, rel=0.01)


# ---- one step, shared with the benchmark ---------------------------------------------------

def test_the_loss_is_cross_entropy_of_hard_labels_or_soft_targets():
    from paddle_vit.engine import step

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    soft = rng.dirichlet(np.ones(3), size=4).astype(np.float32)
    log_softmax = logits - logits.max(1, keepdims=True)
    log_softmax = log_softmax - np.log(np.exp(log_softmax).sum(1, keepdims=True))
    hard_loss = step.classification_loss(paddle.to_tensor(logits), paddle.to_tensor(labels))
    soft_loss = step.classification_loss(paddle.to_tensor(logits), paddle.to_tensor(soft))
    assert float(hard_loss) == pytest.approx(-log_softmax[np.arange(4), labels].mean(), rel=1e-6)
    assert float(soft_loss) == pytest.approx(-(soft * log_softmax).sum(1).mean(), rel=1e-6)


def test_two_accumulated_micro_steps_make_the_update_of_their_whole_batch():
    from paddle_vit.engine import step

    rng = np.random.default_rng(0)
    images = paddle.to_tensor(rng.normal(size=(8, 5)).astype(np.float32))  # [B, features]
    labels = paddle.to_tensor(rng.integers(0, 3, 8))
    whole, halves = paddle.nn.Linear(5, 3), paddle.nn.Linear(5, 3)
    halves.set_state_dict(whole.state_dict())
    start = whole.weight.numpy().copy()
    step.backward(step.forward_loss(whole, images, labels))
    expected_gradient = whole.weight.grad.numpy().copy()
    for part in (slice(0, 4), slice(4, 8)):
        step.backward(step.forward_loss(halves, images[part], labels[part]), accumulate_steps=2)
    np.testing.assert_allclose(halves.weight.grad.numpy(), expected_gradient, rtol=1e-5, atol=1e-7)
    sgd = paddle.optimizer.SGD(learning_rate=0.5, parameters=halves.parameters())
    assert step.apply_update(sgd) is None  # no loss scaler: nothing to report
    np.testing.assert_allclose(halves.weight.numpy(), start - 0.5 * expected_gradient, rtol=1e-5, atol=1e-7)
    assert halves.weight.grad is None  # freed until the next backward


# ---- the process as the trainer found it ---------------------------------------------------

def draws():
    """A Paddle and a numpy random draw, from the global generators."""
    return paddle.rand([3]).numpy(), np.random.rand(3)


def seeded_draws():
    """The first draws of the generators seeded with 123 / 456."""
    paddle.seed(123)
    np.random.seed(456)
    return draws()


def assert_draws_continue_the_seeded_sequence(before_draws, after_draws):
    """`after_draws` must be what the generators seeded with 123 / 456 give after `before_draws`,
    as if nothing had run between them."""
    for got, want in zip((before_draws, after_draws), (seeded_draws(), draws())):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_fit_gives_the_process_its_random_generators_back(tmp_path):
    before = seeded_draws()
    Trainer(small_config(tmp_path / "run", train={"epochs": 1, "seed": 7})).fit()
    assert_draws_continue_the_seeded_sequence(before, draws())


def test_a_trainer_closed_unfitted_or_refused_while_building_gives_them_back_too(tmp_path):
    before = seeded_draws()
    Trainer(small_config(tmp_path / "closed", train={"epochs": 1, "seed": 7})).close()
    assert_draws_continue_the_seeded_sequence(before, draws())
    before = seeded_draws()
    with pytest.raises(ConfigError, match="larger than the training set"):  # refused after seeding
        Trainer(small_config(tmp_path / "refused", train={"epochs": 1, "seed": 7, "batch_size": 512}))
    assert_draws_continue_the_seeded_sequence(before, draws())
    assert not (tmp_path / "refused").exists()


def test_the_deterministic_flag_is_set_for_a_gpu_run_and_put_back(monkeypatch):
    """A CPU build keeps cuDNN's flag private (it cannot be read there): a public boolean flag
    stands in for it, so that setting and restoring are exercised on any machine."""
    from paddle_vit.engine import seeding

    monkeypatch.setattr(seeding, "DETERMINISTIC_FLAG", "FLAGS_check_nan_inf")
    assert paddle.get_flags(["FLAGS_check_nan_inf"])["FLAGS_check_nan_inf"] is False
    saved = seeding.ProcessRandomState.capture()
    seeding.seed_process(small_config("unused").train, "cpu")
    assert paddle.get_flags(["FLAGS_check_nan_inf"])["FLAGS_check_nan_inf"] is False  # not on a CPU
    seeding.seed_process(small_config("unused").train, "gpu:0")
    assert paddle.get_flags(["FLAGS_check_nan_inf"])["FLAGS_check_nan_inf"] is True
    saved.restore()
    assert paddle.get_flags(["FLAGS_check_nan_inf"])["FLAGS_check_nan_inf"] is False


def test_eval_json_keeps_every_class_when_two_share_a_name():
    from paddle_vit.cli.eval import unique_class_keys

    keys = unique_class_keys(["tench", "crane", "goldfish", "crane"])
    assert keys == ["tench", "crane (1)", "goldfish", "crane (3)"]  # ImageNet's two cranes
    assert len(set(keys)) == 4


@pytest.mark.slow
def test_the_dinov3_recipe_runs_a_step_through_the_train_tool(tmp_path):
    """tools/train.py -c configs/vit_small_patch16_dinov3_finetune_imagefolder.yaml on a tiny
    ImageFolder with a DINOv3-shaped model cut small (2 blocks, width 32, no weights): the recipe's
    keys build and train (registers, layer scale, RoPE, class-token head, layer decay, AdamW,
    warm-up + cosine, its eval transform on non-square images) for one step."""
    from PIL import Image
    from paddle_vit.cli import run

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in ("ant", "bee"):
            (tmp_path / "images" / split / name).mkdir(parents=True)
            for index in range(2):
                pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / "images" / split / name / f"{index}.png")
    output = tmp_path / "run"
    overrides = [f"data.root={tmp_path / 'images'}", "model.pretrained=null", "model.depth=2", "model.embed_dim=32",
                 "model.num_heads=2", "model.image_size=32", "data.num_workers=0", "train.epochs=1",
                 "train.batch_size=4", "eval.batch_size=4", "eval.confusion_matrix=false", "train.device=cpu",
                 "train.vdl=false", f"train.output_dir={output}"]
    recipe = os.path.join(REPO, "configs", "vit_small_patch16_dinov3_finetune_imagefolder.yaml")
    argv = ["-c", recipe] + [item for override in overrides for item in ("-o", override)]
    assert run(load_tool("train").main, argv) == 0
    records = read_metrics(output)
    assert [(r["epoch"], r["step"]) for r in records] == [(1, 1)] and np.isfinite(records[0]["train_loss"])
    resolved = load_config(str(output / "config.yaml"))
    assert resolved.model.name == "vit_small_patch16_dinov3" and resolved.model.pool == "cls"
    assert resolved.optimizer.layer_decay == 0.75 and resolved.data.eval_crop_pct == 1.0
    weights = final_weights(output)
    assert weights["patch_embed.register_tokens"].shape == (1, 4, 32) and weights["head.weight"].shape == (32, 2)
    assert "encoder.layers.1.ls2.gamma" in weights

"""train.batch_threads: a training step's batch shared out over threads (variants/batch_threads.py),
checked against the whole batch computed on one thread: the same gradients and loss, parameters
shared with the model, the same run twice, refusals where the step cannot be split, and the
trainer, the CLI and the benchmark using it."""
import os
import sys
import threading

import numpy as np
import paddle
import paddle.nn as nn
import pytest

import paddle_vit
from paddle_vit import runtime, variants
from paddle_vit.config import load_config
from paddle_vit.engine import step
from paddle_vit.engine.trainer import Trainer
from paddle_vit import paddle_versions
from paddle_vit.variants import compiled
from paddle_vit.variants.batch_threads import (MIN_SLICE_ELEMENTS, BatchThreads, plan_batch_threads,
                                               reason_not_to_split, slice_bounds, slice_elements)

from repo_paths import REPO, TOOLS
from test_failures import assert_train_refuses, write_config
from test_train import assert_resumed_equals_straight, read_metrics, run_straight_and_stopped, small_config

WALKTHROUGH = os.path.join(REPO, "configs", "vit_walkthrough_digits_28.yaml")


def small_vit(**overrides):
    """A ViT 128 wide (the compiled LayerNorm kernel's width, where it is built), 32 x 32 input in
    8 x 8 patches (17 tokens), 2 layers, 10 classes, built as the library builds models (CPU fast
    paths); in train mode, without dropout unless asked."""
    arguments = dict(image_size=32, patch_size=8, embed_dim=128, depth=2, num_heads=4, num_classes=10)
    arguments.update(overrides)
    return paddle_vit.create_model("vit_tiny_patch16_224", **arguments)


def batch_of(size, classes=10, seed=0, soft=False):
    rng = np.random.default_rng(seed)
    images = paddle.to_tensor(rng.normal(size=(size, 3, 32, 32)).astype(np.float32))
    if soft:
        targets = paddle.to_tensor(rng.dirichlet(np.ones(classes), size=size).astype(np.float32))
    else:
        targets = paddle.to_tensor(rng.integers(0, classes, size).astype(np.int64))
    return images, targets


def loss_of(model, images, targets, first):
    return step.classification_loss(model(images), targets)


def run_backward(loss):
    loss.backward()


@pytest.fixture
def threads_of():
    """BatchThreads(model, n) (one math thread each, as in these tests' processes), closed after the test."""
    made = []

    def make(model, threads):
        made.append(BatchThreads(model, threads, math_threads=1))
        return made[-1]
    yield make
    for batch_threads in made:
        batch_threads.close()


def gradients(model):
    return {name: parameter.grad.numpy().copy() for name, parameter in model.named_parameters()
            if parameter.grad is not None}


def assert_gradients_close(got, expected, relative=1e-5):
    assert set(got) == set(expected)
    for name, reference in expected.items():
        scale = np.abs(reference).max()
        assert np.abs(got[name] - reference).max() <= relative * max(scale, 1e-12), name


# ---- the split -----------------------------------------------------------------------------

@pytest.mark.parametrize("batch, threads, expected", [
    (8, 2, [(0, 4), (4, 8)]),
    (7, 2, [(0, 4), (4, 7)]),
    (1, 2, [(0, 1)]),
    (5, 3, [(0, 2), (2, 4), (4, 5)]),
    (2, 4, [(0, 1), (1, 2)]),
])
def test_slice_bounds(batch, threads, expected):
    assert slice_bounds(batch, threads) == expected


@pytest.mark.parametrize("option, layer", [
    ("drop_path", "encoder.layers.1.drop_path"),  # rising from 0: the first layer's rate is 0
    ("dropout", "patch_embed.dropout"),
    ("attention_dropout", "encoder.layers.0.attn.attention_dropout"),
])
def test_random_draws_from_the_global_generator_are_a_reason_not_to_split(option, layer):
    """The walkthrough's own dropout/drop path modules draw from Paddle's generator: a reason; the
    CPU fast paths' (what create_model and the trainer build) draw from slice streams: none."""
    model = small_vit(**{option: 0.1})
    assert reason_not_to_split(model) is None
    variants.use_walkthrough_modules(model)
    reason = reason_not_to_split(model)
    assert reason is not None and "random numbers" in reason and f"({layer})" in reason, reason


def test_batch_norm_in_training_is_a_reason_not_to_split_but_not_in_eval():
    model = nn.Sequential(nn.Conv2D(3, 4, 3), nn.BatchNorm2D(4), nn.ReLU())
    reason = reason_not_to_split(model)
    assert reason is not None and "BatchNorm" in reason and "(1)" in reason, reason
    model.eval()
    assert reason_not_to_split(model) is None


def test_a_plain_vit_can_be_split():
    assert reason_not_to_split(small_vit()) is None
    assert reason_not_to_split(small_vit(dropout=0.1).eval()) is None  # no dropout in eval


# ---- the same gradients as the whole batch --------------------------------------------------

@pytest.mark.parametrize("batch, threads, soft", [(8, 2, False), (7, 3, False), (8, 2, True), (1, 2, False)])
def test_threaded_gradients_and_loss_are_the_whole_batchs(threads_of, batch, threads, soft):
    from paddle_vit.variants.cpu import FastCpuLayerNorm

    paddle.seed(0)
    model = small_vit()
    assert any(isinstance(layer, FastCpuLayerNorm) for layer in model.sublayers())  # the compiled kernel's, where built
    images, targets = batch_of(batch, soft=soft)
    whole_loss = loss_of(model, images, targets, True)
    whole_loss.backward()
    expected = gradients(model)
    model.clear_gradients(set_to_zero=False)

    batch_threads = threads_of(model, threads)
    loss = batch_threads.forward(loss_of, images, targets)
    assert loss.stop_gradient and loss.shape == []
    assert float(loss) == pytest.approx(float(whole_loss), rel=1e-6)
    batch_threads.backward(run_backward)
    batch_threads.gather_gradients()
    assert_gradients_close(gradients(model), expected)
    used = batch_threads.replicas[1:len(slice_bounds(batch, threads))]  # a batch of 1: the model alone
    assert all(parameter.grad is not None for replica in used for parameter in replica.parameters())
    batch_threads.clear_gradients()
    assert all(parameter.grad is None for replica in batch_threads.replicas[1:] for parameter in replica.parameters())


def test_the_step_functions_make_the_whole_batchs_update(threads_of):
    """engine/step.py's pieces with batch_threads: sliced forward, backward, apply_update."""
    paddle.seed(1)
    whole, sliced = small_vit(), small_vit()
    sliced.set_state_dict(whole.state_dict())
    images, targets = batch_of(6, seed=1)
    optimizers = [paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters()) for model in (whole, sliced)]
    step.backward(step.sliced_forward_loss(loss_of, whole, images, targets))
    step.apply_update(optimizers[0])
    batch_threads = threads_of(sliced, 2)
    loss = step.sliced_forward_loss(loss_of, sliced, images, targets, batch_threads)
    step.backward(loss, batch_threads=batch_threads)
    step.apply_update(optimizers[1], batch_threads=batch_threads)
    for (name, a), b in zip(whole.named_parameters(), sliced.parameters()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert all(p.grad is None for replica in batch_threads.replicas for p in replica.parameters())


def test_accumulated_threaded_micro_steps_with_a_frozen_part_make_the_whole_batchs_update(threads_of):
    """Two micro-steps of 4 images (accumulate_steps 2), each in 2 threads, the head frozen: the
    SGD update of the 8 images on one thread, the frozen weights untouched."""
    paddle.seed(4)
    whole, sliced = small_vit(), small_vit()
    sliced.set_state_dict(whole.state_dict())
    for model in (whole, sliced):
        for parameter in model.head.parameters():
            parameter.stop_gradient = True
    frozen = {name: value.numpy().copy() for name, value in sliced.head.named_parameters()}
    images, targets = batch_of(8, seed=4)
    optimizers = [paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters()) for model in (whole, sliced)]
    step.backward(step.forward_loss(whole, images, targets))
    step.apply_update(optimizers[0])
    batch_threads = threads_of(sliced, 2)
    for part in (slice(0, 4), slice(4, 8)):
        loss = step.sliced_forward_loss(loss_of, sliced, images[part], targets[part], batch_threads)
        step.backward(loss, accumulate_steps=2, batch_threads=batch_threads)
    assert all(p.grad is None for replica in batch_threads.replicas for p in replica.head.parameters())
    step.apply_update(optimizers[1], batch_threads=batch_threads)
    for (name, a), b in zip(whole.named_parameters(), sliced.parameters()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    for name, value in sliced.head.named_parameters():
        assert np.array_equal(value.numpy(), frozen[name]), name


# ---- replicas share the model ---------------------------------------------------------------

def sliced_logits(batch_threads, images, targets):
    """The logits each slice computed on its replica, put back in batch order."""
    logits = {}

    def recording(model, images, targets, first):
        logits[first, images.shape[0], id(model)] = out = model(images)
        return step.classification_loss(out, targets)
    batch_threads.forward(recording, images, targets)
    by_replica = {id(replica): index for index, replica in enumerate(batch_threads.replicas)}
    ordered = sorted(logits.items(), key=lambda item: by_replica[item[0][2]])
    return np.concatenate([value.numpy() for _, value in ordered])


def test_replicas_follow_the_models_mode_updates_and_loaded_weights(threads_of):
    paddle.seed(2)
    model = small_vit(dropout=0.5)
    model.eval()  # its replicas are made in eval mode ...
    images, targets = batch_of(6, seed=2)
    batch_threads = threads_of(model, 3)
    model.train()  # ... and follow the model into training at the next forward
    optimizer = paddle.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters())
    batch_threads.forward(loss_of, images, targets)
    assert all(replica.training for replica in batch_threads.replicas)
    batch_threads.backward(run_backward)
    step.apply_update(optimizer, batch_threads=batch_threads)
    for replica in batch_threads.replicas[1:]:  # the update is the replicas' too
        for (name, own), theirs in zip(model.named_parameters(), replica.parameters()):
            assert np.array_equal(own.numpy(), theirs.numpy()), name

    model.eval()  # mirrored at the next forward: no dropout, the eval logits
    with paddle.no_grad():
        expected = model(images).numpy()
        first, second = sliced_logits(batch_threads, images, targets), sliced_logits(batch_threads, images, targets)
    assert not any(replica.training for replica in batch_threads.replicas)
    np.testing.assert_allclose(first, expected, rtol=1e-5, atol=1e-5)
    assert np.array_equal(first, second)

    model.set_state_dict(small_vit().state_dict())  # other weights, loaded into the model
    with paddle.no_grad():
        loaded = model(images).numpy()
        got = sliced_logits(batch_threads, images, targets)
    assert np.abs(loaded - expected).max() > 1e-2  # (the new weights compute something else)
    np.testing.assert_allclose(got, loaded, rtol=1e-5, atol=1e-5)


def threaded_training(seed, threads_of, **model_options):
    paddle.seed(seed)
    model = small_vit(**model_options)
    optimizer = paddle.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters())
    batch_threads = threads_of(model, 2)
    for index in range(3):
        images, targets = batch_of(8, seed=index)
        loss = step.sliced_forward_loss(loss_of, model, images, targets, batch_threads)
        step.backward(loss, batch_threads=batch_threads)
        step.apply_update(optimizer, batch_threads=batch_threads)
    return {name: value.numpy() for name, value in model.state_dict().items()}


def test_the_same_threaded_steps_twice_give_the_same_bits(threads_of):
    first, second = threaded_training(5, threads_of), threaded_training(5, threads_of)
    assert first.keys() == second.keys()
    for name in first:
        assert np.array_equal(first[name], second[name]), name


def test_threaded_steps_with_dropout_and_drop_path_give_the_same_bits_and_draw_one_number_a_step(threads_of):
    """Each slice's dropout and drop path draw from a stream of its own: the same run twice gives
    the same bits, and Paddle's generator gives one number a step (the streams' base) and no more."""
    options = dict(dropout=0.1, attention_dropout=0.1, drop_path=0.2)
    first = threaded_training(5, threads_of, **options)
    after_first = paddle.rand([4]).numpy()
    second = threaded_training(5, threads_of, **options)
    for name in first:
        assert np.array_equal(first[name], second[name]), name
    without_dropout = threaded_training(5, threads_of)
    assert not all(np.array_equal(first[name], without_dropout[name]) for name in first)  # the masks acted

    paddle.seed(5)
    small_vit(**options)  # the same initial draws as threaded_training's model
    for _ in range(3):
        paddle.randint(0, 2 ** 31 - 1, [1])  # one base a step
    assert np.array_equal(paddle.rand([4]).numpy(), after_first)


def test_seeded_dropout_outside_a_slice_is_paddles_dropout():
    from paddle_vit.variants.slice_random import SeededDropout, SeededDropPath
    from paddle_vit.models.encoder import DropPath

    x = paddle.randn([6, 17, 32])
    for stock, seeded in [(nn.Dropout(0.3), SeededDropout(0.3)), (DropPath(0.3), SeededDropPath(0.3))]:
        paddle.seed(11)
        expected = stock(x).numpy()
        paddle.seed(11)
        assert np.array_equal(seeded(x).numpy(), expected)


def test_seeded_dropout_and_drop_path_in_a_slice_stream():
    """Inside a stream: a mask of the stream's own (the same for the same base, slice and call,
    another for another slice or call), kept values scaled by 1 / (1 - p), about p dropped; drop
    path drops whole samples; Paddle's generator untouched."""
    from paddle_vit.variants.slice_random import SeededDropout, SeededDropPath, slice_stream

    x = paddle.ones([64, 50, 40])
    dropout, drop_path = SeededDropout(0.25), SeededDropPath(0.25)
    paddle.seed(2)
    state = paddle.rand([3]).numpy()
    paddle.seed(2)

    def draws(base, index, calls=2):
        with slice_stream(base, index):
            return [layer(x).numpy() for layer in (dropout, drop_path) for _ in range(calls)]

    first, again, other_slice, other_base = draws(7, 0), draws(7, 0), draws(7, 1), draws(8, 0)
    for a, b in zip(first, again):
        assert np.array_equal(a, b)
    for mask in first:
        assert set(np.unique(mask)) <= {0.0, np.float32(1 / 0.75)}
        assert abs(float((mask == 0).mean()) - 0.25) < 0.05
    assert not np.array_equal(first[0], first[1])  # the next call, the next seed
    assert not np.array_equal(first[0], other_slice[0]) and not np.array_equal(first[0], other_base[0])
    for mask in first[2:]:  # drop path: one coin per sample
        per_sample = mask.reshape(64, -1)
        assert (per_sample.min(axis=1) == per_sample.max(axis=1)).all()
    assert np.array_equal(paddle.rand([3]).numpy(), state)  # the global generator gave nothing


def test_an_error_in_a_worker_slice_reaches_the_caller_and_the_object_still_works(threads_of):
    paddle.seed(3)
    model = small_vit()
    images, targets = batch_of(8, seed=3)
    batch_threads = threads_of(model, 2)

    def failing(model, images, targets, first):
        if not first:
            raise RuntimeError("slice 1 failed")
        return loss_of(model, images, targets, first)

    stride_flag = paddle.get_flags(["FLAGS_use_stride_kernel"])
    with pytest.raises(RuntimeError, match="slice 1 failed"):
        batch_threads.forward(failing, images, targets)
    assert runtime.math_threads() == 1 and compiled.kernel_threads() == 1  # the thread settings restored
    assert paddle.get_flags(["FLAGS_use_stride_kernel"]) == stride_flag
    whole_loss = loss_of(model, images, targets, True)
    whole_loss.backward()
    expected = gradients(model)
    model.clear_gradients(set_to_zero=False)
    loss = batch_threads.forward(loss_of, images, targets)
    assert float(loss) == pytest.approx(float(whole_loss), rel=1e-6)
    batch_threads.backward(run_backward)
    batch_threads.gather_gradients()
    assert_gradients_close(gradients(model), expected)


def test_fewer_than_two_threads_is_refused():
    with pytest.raises(ValueError, match="2 or more"):
        BatchThreads(nn.Linear(2, 2), 1)


# ---- thread counts --------------------------------------------------------------------------

def test_kernel_threads_for_this_thread_is_this_threads_alone():
    process_value = runtime.math_threads()
    assert compiled.kernel_threads() == process_value
    seen = []
    with compiled.kernel_threads_for_this_thread(process_value + 3):
        assert compiled.kernel_threads() == process_value + 3
        other = threading.Thread(target=lambda: seen.append(compiled.kernel_threads()))
        other.start()
        other.join()
        with compiled.kernel_threads_for_this_thread(process_value + 5):  # nested: the outer one back after
            assert compiled.kernel_threads() == process_value + 5
        assert compiled.kernel_threads() == process_value + 3
    assert seen == [process_value]
    assert compiled.kernel_threads() == process_value


def test_math_threads_reads_what_was_set_else_omp_num_threads(monkeypatch):
    monkeypatch.delitem(runtime.APPLIED, "math_threads", raising=False)
    assert runtime.math_threads({}) == 1
    assert runtime.math_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert runtime.math_threads({"OMP_NUM_THREADS": " 3 "}) == 3
    assert runtime.math_threads({"OMP_NUM_THREADS": "x"}) == 1
    assert runtime.math_threads({"OMP_NUM_THREADS": "0"}) == 1
    monkeypatch.setitem(runtime.APPLIED, "math_threads", 4)
    assert runtime.math_threads({"OMP_NUM_THREADS": "3"}) == 4
    assert runtime.math_threads({}) == 4


# ---- the plan -------------------------------------------------------------------------------

def test_plan_batch_threads():
    model = small_vit()
    big_batch, small_batch = 128, 8
    assert slice_elements(model, big_batch, 2) == 64 * 17 * 128 >= MIN_SLICE_ELEMENTS
    assert slice_elements(model, small_batch, 2) == 4 * 17 * 128 < MIN_SLICE_ELEMENTS
    assert slice_elements(nn.Linear(2, 2), 8, 2) is None

    assert plan_batch_threads(None, model, "cpu", True, True, big_batch, math_threads=2) == (2, None)
    threads, reason = plan_batch_threads(None, model, "cpu", True, True, big_batch, math_threads=1)
    assert threads == 1 and "one thread" in reason
    threads, reason = plan_batch_threads(None, model, "cpu", True, True, small_batch, math_threads=2)
    assert threads == 1 and f"{MIN_SLICE_ELEMENTS:,}" in reason and str(4 * 17 * 128) in reason
    assert plan_batch_threads(2, model, "cpu", True, True, small_batch, math_threads=1) == (2, None)
    assert plan_batch_threads(1, model, "cpu", True, True, big_batch, math_threads=2) == (1, None)

    assert plan_batch_threads(None, small_vit(drop_path=0.1), "cpu", True, True, big_batch, math_threads=2) == (2, None)
    stock_dropping = variants.use_walkthrough_modules(small_vit(drop_path=0.1))
    threads, reason = plan_batch_threads(2, stock_dropping, "cpu", True, True, big_batch, math_threads=2)
    assert threads == 2 and "random numbers" in reason
    threads, reason = plan_batch_threads(None, stock_dropping, "cpu", True, True, big_batch, math_threads=2)
    assert threads == 1 and "random numbers" in reason
    for place, single, eager, fragment in [("cpu", False, True, "several processes"),
                                           ("cpu", True, False, "to_static"),
                                           ("gpu:0", True, True, "GPU")]:
        for requested, expected_threads in [(2, 2), (None, 1)]:
            threads, reason = plan_batch_threads(requested, model, place, single, eager, big_batch, math_threads=2)
            assert threads == expected_threads and reason and fragment in reason, (place, single, eager, requested)


@pytest.mark.parametrize("release", ["3.3", "3.9"])
def test_steps_are_split_and_dropout_seeded_only_on_the_release_their_private_apis_were_written_for(monkeypatch,
                                                                                                    release):
    from paddle_vit.variants.slice_random import SeededDropout, slice_stream

    monkeypatch.setattr(paddle_versions, "running_release", lambda: release)
    threads, reason = plan_batch_threads(None, small_vit(drop_path=0.1), "cpu", True, True, 128, math_threads=2)
    x = paddle.randn([6, 17, 32])
    paddle.seed(11)
    paddles = nn.Dropout(0.3)(x).numpy()
    paddle.seed(11)
    with slice_stream(7, 0):
        ours = SeededDropout(0.3)(x).numpy()
    if release == "3.3":
        assert (threads, reason) == (2, None) and not np.array_equal(ours, paddles)
    else:  # Paddle's generator, and no threads
        assert threads == 1 and "private tensor methods" in reason and "3.3" in reason
        np.testing.assert_array_equal(ours, paddles)


def test_more_threads_than_cores_are_built_with_a_warning(monkeypatch, caplog):
    from paddle_vit.engine.build import Placement, build_batch_threads

    model = small_vit()
    monkeypatch.setattr(runtime, "usable_cores", lambda: 2)
    with caplog.at_level("WARNING", logger="paddle_vit"):
        batch_threads = build_batch_threads(3, model, model, Placement("cpu", False, True, 1, 0), 8)
    try:
        assert batch_threads.threads == 3 and "may use 2 cores" in caplog.text
    finally:
        batch_threads.close()


def test_build_batch_threads_follows_the_plan_and_refuses_what_it_cannot_honour(monkeypatch, caplog):
    from paddle_vit import ConfigError
    from paddle_vit.engine.build import Placement, build_batch_threads

    on_cpu = Placement("cpu", False, True, 1, 0)
    model = small_vit()
    monkeypatch.setitem(runtime.APPLIED, "math_threads", 2)  # as set_math_threads on two cores
    batch_threads = build_batch_threads(None, model, model, on_cpu, 128)
    try:
        assert batch_threads.threads == 2 and batch_threads.math_threads == 2 and len(batch_threads.replicas) == 2
    finally:
        batch_threads.close()
    with caplog.at_level("INFO", logger="paddle_vit"):
        assert build_batch_threads(None, model, model, on_cpu, 8) is None
    assert "each step computes its batch on one thread" in caplog.text and f"{MIN_SLICE_ELEMENTS:,}" in caplog.text
    assert build_batch_threads(1, model, model, on_cpu, 128) is None
    with pytest.raises(ConfigError, match=r"train.batch_threads is 2, but .*to_static"):
        build_batch_threads(2, model, object(), on_cpu, 128)  # the loop calls a graph, not the ViT
    with pytest.raises(ConfigError, match=r"train.batch_threads is 3, but .*random numbers"):
        dropping = variants.use_walkthrough_modules(small_vit(drop_path=0.1))
        build_batch_threads(3, dropping, dropping, on_cpu, 128)


# ---- the command line -----------------------------------------------------------------------

def test_train_refuses_two_threads_for_a_traced_step(tmp_path, capsys):
    assert_train_refuses(tmp_path, capsys, write_config(tmp_path), ["train.batch_threads=2", "train.to_static=true"],
                         "train.batch_threads is 2", "to_static")


@pytest.mark.parametrize("value, fragment", [
    ("0", "train.batch_threads must be >= 1"),
    ("-1", "train.batch_threads must be >= 1"),
    ("nan", "train.batch_threads must be an integer or null, got 'nan'"),
    ("x", "train.batch_threads must be an integer or null, got 'x'"),
    ("1.5", "train.batch_threads must be an integer or null, got 1.5"),
    ("true", "train.batch_threads must be an integer or null, got True"),
    ("inf", "train.batch_threads must be an integer or null"),
    ("17", "train.batch_threads is 17, more than train.batch_size 16"),  # a million would copy the model a million times
])
def test_train_refuses_a_thread_count_that_is_not_one_or_more(tmp_path, capsys, value, fragment):
    assert_train_refuses(tmp_path, capsys, write_config(tmp_path), [f"train.batch_threads={value}"], fragment)


def walkthrough_run(output, threads, caplog):
    config = load_config(WALKTHROUGH, ["train.epochs=2", f"train.batch_threads={threads}", "train.device=cpu",
                                       f"train.output_dir={output}", "train.vdl=false"])
    with caplog.at_level("INFO", logger="paddle_vit"):
        Trainer(config).fit()
    return read_metrics(output)


@pytest.mark.slow
def test_a_threaded_training_run_is_reproducible_and_trains_as_one_thread(tmp_path, caplog):
    first = walkthrough_run(tmp_path / "first", 2, caplog)
    assert "each step computes its batch in 2 slices" in caplog.text
    caplog.clear()
    second = walkthrough_run(tmp_path / "second", 2, caplog)
    keys = ("epoch", "train_loss", "lr", "val_top1", "val_loss")
    assert [[r[k] for k in keys] for r in first] == [[r[k] for k in keys] for r in second]
    caplog.clear()
    single = walkthrough_run(tmp_path / "single", 1, caplog)
    assert "slices" not in caplog.text
    for threaded, alone in zip(first, single):
        assert threaded["train_loss"] == pytest.approx(alone["train_loss"], rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("dropping", [0.0, 0.1])  # 0.1: dropout and drop path from the slices' seed streams
def test_a_threaded_run_stopped_and_resumed_equals_an_unbroken_one(tmp_path, caplog, dropping):
    def config(name, **train):
        return small_config(tmp_path / name, model={"dropout": dropping, "drop_path": dropping},
                            train={"batch_threads": 2, **train})

    with caplog.at_level("INFO", logger="paddle_vit"):
        straight, broken = run_straight_and_stopped(config, tmp_path)
    assert caplog.text.count("in 2 slices") == 3  # the straight run, the stopped one and its resumption
    assert_resumed_equals_straight(straight, broken)


@pytest.mark.slow
def test_a_threaded_run_with_mixing_smoothing_ema_and_accumulation_trains_as_one_thread(tmp_path):
    """Soft targets (mixup, cutmix, label smoothing), EMA and two micro-steps per update."""
    def run(name, threads):
        config = small_config(tmp_path / name, model={"dropout": 0.0, "drop_path": 0.0},
                              data={"randaugment_num_ops": 2, "mixup_alpha": 0.8, "cutmix_alpha": 1.0,
                                    "random_erasing": 0.25},
                              train={"label_smoothing": 0.1, "ema": True, "ema_decay": 0.9, "accumulate_steps": 2,
                                     "batch_threads": threads})
        Trainer(config).fit()
        return read_metrics(tmp_path / name)

    for threaded, alone in zip(run("threads", 2), run("alone", 1)):
        for key in ("train_loss", "val_loss"):
            assert threaded[key] == pytest.approx(alone[key], rel=1e-3), key


# ---- the benchmark --------------------------------------------------------------------------

def test_the_benchmark_times_a_threaded_train_step(capsys, tmp_path):
    sys.path.insert(0, TOOLS)
    import benchmark as benchmark_tool

    arguments = ["-c", write_config(tmp_path), "-o", "model.num_classes=10", "--mode", "train",
                 "--batch-size", "4", "--batch-threads", "2", "--warmup", "0", "--iters", "1", "--rounds", "1",
                 "--threads", "1"]
    assert benchmark_tool.main(arguments) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert " train " in head and head.split().count("batch_threads=2") == 1, head

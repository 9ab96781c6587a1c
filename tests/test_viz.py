"""The paper's figures (paddle_vit/viz.py): the numbers against hand-computed values, the figures
drawn from a model, and tools/visualize.py on a small trained checkpoint."""
import math
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_vit import ConfigError, DataError, viz
from paddle_vit.config import load_config
from paddle_vit.models import ViT, sincos_2d_embedding

from repo_paths import TOOLS, load_tool


def tiny_model(**overrides):
    """14x14 input, 7x7 patches: a 2x2 grid, 2 layers of 2 heads."""
    paddle.seed(0)
    arguments = dict(image_size=14, patch_size=7, embed_dim=16, depth=2, num_heads=2, num_classes=3)
    arguments.update(overrides)
    return ViT(**arguments)


# ---- attention rollout --------------------------------------------------------------------------

def random_attention(rng, batch, heads, tokens):
    scores = rng.normal(size=(batch, heads, tokens, tokens))
    weights = np.exp(scores)
    return weights / weights.sum(axis=-1, keepdims=True)


def test_rollout_rows_sum_to_one_and_stay_non_negative():
    rng = np.random.default_rng(0)
    attentions = [random_attention(rng, 2, 3, 5) for _ in range(4)]
    rollout = viz.attention_rollout(attentions)
    assert rollout.shape == (2, 5, 5)
    np.testing.assert_allclose(rollout.sum(axis=-1), 1.0, atol=1e-12)
    assert (rollout >= 0).all()


def test_rollout_of_two_hand_built_layers():
    # layer 1, two heads: [[1, 0], [0, 1]] and [[1, 0], [1, 0]], mean [[1, 0], [0.5, 0.5]];
    # with the identity added, [[2, 0], [0.5, 1.5]], and rows renormalised: [[1, 0], [0.25, 0.75]]
    first = np.array([[[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]]])  # [1, 2, 2, 2]
    # layer 2, one head: every token attends to token 1: [[0, 1], [0, 1]] -> [[0.5, 0.5], [0, 1]]
    second = np.array([[[[0.0, 1.0], [0.0, 1.0]]]])  # [1, 1, 2, 2]
    rollout = viz.attention_rollout([first, second])
    # [[0.5, 0.5], [0, 1]] @ [[1, 0], [0.25, 0.75]] = [[0.625, 0.375], [0.25, 0.75]]
    np.testing.assert_allclose(rollout[0], [[0.625, 0.375], [0.25, 0.75]], atol=1e-12)
    plain = viz.attention_rollout([first, second], add_identity=False)
    # [[0, 1], [0, 1]] @ [[1, 0], [0.5, 0.5]] = [[0.5, 0.5], [0.5, 0.5]]
    np.testing.assert_allclose(plain[0], [[0.5, 0.5], [0.5, 0.5]], atol=1e-12)


def test_rollout_of_self_attention_only_is_the_identity():
    eye = np.broadcast_to(np.eye(5), (1, 2, 5, 5))
    np.testing.assert_allclose(viz.attention_rollout([eye, eye, eye])[0], np.eye(5), atol=1e-12)


def test_rollout_patch_map_reads_the_pooled_tokens_row_major():
    rollout = np.arange(25, dtype=float).reshape(1, 5, 5)  # tokens: class, then a 2x2 grid
    np.testing.assert_array_equal(viz.rollout_patch_map(rollout, (2, 2), "class")[0], [[1, 2], [3, 4]])
    np.testing.assert_allclose(viz.rollout_patch_map(rollout, (2, 2), "patches")[0],
                               np.arange(25).reshape(5, 5)[1:].mean(axis=0)[1:].reshape(2, 2))
    np.testing.assert_allclose(viz.rollout_patch_map(rollout, (2, 2), "all")[0], [[11, 12], [13, 14]])
    with pytest.raises(ConfigError, match="query"):
        viz.rollout_patch_map(rollout, (2, 2), "first")


def test_class_token_attention_per_head_on_the_grid():
    attention = np.zeros((1, 2, 7, 7))  # a 2x3 grid
    attention[0, 0, 0, 1:] = [1, 2, 3, 4, 5, 6]
    attention[0, 1, 0, 1:] = [6, 5, 4, 3, 2, 1]
    maps = viz.class_token_attention(attention, (2, 3))
    np.testing.assert_array_equal(maps[0, 0], [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(maps[0, 1], [[6, 5, 4], [3, 2, 1]])


# ---- mean attention distance ----------------------------------------------------------------------

def test_attention_to_a_neighbour_is_one_patch_away():
    # 2x2 grid of 16-pixel patches; each patch attends to its left/right neighbour only, and half
    # of every query's weight goes to the class token, which does not count
    attention = np.zeros((1, 1, 5, 5))
    attention[0, 0, 0, 0] = 1.0
    for patch, neighbour in [(0, 1), (1, 0), (2, 3), (3, 2)]:
        attention[0, 0, 1 + patch, 0] = 0.5
        attention[0, 0, 1 + patch, 1 + neighbour] = 0.5
    np.testing.assert_allclose(viz.mean_attention_distance([attention], (2, 2), 16), [[16.0]])


def test_uniform_and_self_attention_distances_per_layer_and_head():
    attention = np.zeros((2, 2, 5, 5))  # 2 images, 2 heads, class token + 2x2 grid
    attention[:, 0, :, 1:] = 0.25  # head 1: uniform over the four patches
    attention[:, 1] = np.eye(5)  # head 2: every token to itself
    distance = viz.mean_attention_distance([attention, attention[:, ::-1]], (2, 2), 16)
    uniform = (0 + 16 + 16 + 16 * math.sqrt(2)) / 4  # from any patch of a 2x2 grid
    np.testing.assert_allclose(distance, [[uniform, 0.0], [0.0, uniform]], atol=1e-12)


def test_attention_distance_on_a_one_row_grid_to_the_farthest_patch():
    attention = np.zeros((1, 1, 4, 4))  # 1x3 grid of 10-pixel patches
    attention[0, 0, 0, 0] = 1.0
    attention[0, 0, 1, 3] = attention[0, 0, 2, 1] = attention[0, 0, 3, 1] = 1.0  # 20, 10, 20 pixels
    np.testing.assert_allclose(viz.mean_attention_distance([attention], (1, 3), 10), [[50.0 / 3.0]])


# ---- position-embedding similarity --------------------------------------------------------------

def test_sincos_similarity_peaks_at_its_own_position_on_any_grid():
    rows, cols, width = 4, 5, 32
    table = sincos_2d_embedding(rows, cols, width)  # [20, 32], no class token
    similarity = viz.position_embedding_similarity(table, (rows, cols), num_prefix_tokens=0)
    assert similarity.shape == (rows, cols, rows, cols)
    for row in range(rows):
        for col in range(cols):
            assert np.unravel_index(similarity[row, col].argmax(), (rows, cols)) == (row, col)
            assert similarity[row, col, row, col] == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(similarity.reshape(20, 20), similarity.reshape(20, 20).T, atol=1e-12)
    # by hand: one column apart, the row quarter-pairs agree fully (D/4) and the column ones give
    # sum_k cos(omega_k); each embedding has squared norm D/2
    omega = 1.0 / 10000.0 ** (np.arange(width // 4) / (width // 4))
    expected = (width / 4 + np.cos(omega).sum()) / (width / 2)
    assert similarity[0, 0, 0, 1] == pytest.approx(expected, abs=1e-6)


def test_similarity_leaves_out_the_class_token_and_checks_the_grid():
    table = np.zeros((1, 5, 2))
    table[0, 0] = [100.0, -3.0]  # the class token: ignored
    table[0, 1:] = [[1, 0], [0, 1], [-1, 0], [1, 1]]
    similarity = viz.position_embedding_similarity(table, (2, 2))
    np.testing.assert_allclose(similarity[0, 0], [[1, 0], [-1, math.sqrt(0.5)]], atol=1e-12)
    with pytest.raises(ConfigError, match="3x2 grid"):
        viz.position_embedding_similarity(table, (3, 2))


# ---- embedding filters ----------------------------------------------------------------------------

def test_filter_components_of_a_hand_built_rank_two_set():
    # four 3x2x2 filters = mean + a_i u + b_i v with orthogonal coefficient vectors a, b:
    # centred, the matrix is a u^T + b v^T, whose SVD is exact: sigma = |a| = 6, |b| = 2
    u = np.zeros(12)
    u[[0, 5]] = [0.8, 0.6]
    v = np.zeros(12)
    v[[3, 11]] = [-0.6, 0.8]
    a, b = np.array([3.0, -3.0, 3.0, -3.0]), np.array([1.0, 1.0, -1.0, -1.0])
    mean = np.linspace(-1, 1, 12)
    weight = (mean + a[:, None] * u + b[:, None] * v).reshape(4, 3, 2, 2)
    components, ratio = viz.patch_embedding_components(weight, num_components=28)
    assert components.shape == (4, 3, 2, 2)  # min(28, 4 filters, 12 values)
    np.testing.assert_allclose(components[0].ravel(), u, atol=1e-9)  # largest entry made positive
    np.testing.assert_allclose(components[1].ravel(), v, atol=1e-9)
    np.testing.assert_allclose(ratio, [36 / 40, 4 / 40, 0, 0], atol=1e-12)


# ---- images and overlays --------------------------------------------------------------------------

def test_denormalise_undoes_the_normalisation():
    pixels = np.random.default_rng(0).integers(0, 256, size=(6, 5, 3)).astype(np.uint8)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    normalised = (pixels.transpose(2, 0, 1) / 255.0 - np.reshape(mean, (3, 1, 1))) / np.reshape(std, (3, 1, 1))
    np.testing.assert_array_equal(viz.denormalise(normalised.astype(np.float32), mean, std), pixels)


def test_bilinear_upsampling_of_a_two_by_two_map():
    # align_corners=False: output pixel centres at -0.25, 0.25, 0.75, 1.25 input pixels (clamped)
    up = viz.upsample(np.array([[0.0, 1.0], [0.0, 1.0]]), 4)
    np.testing.assert_allclose(up, np.tile([0.0, 0.25, 0.75, 1.0], (4, 1)), atol=1e-6)


def test_load_image_applies_exif_orientation_and_converts_any_mode(tmp_path):
    pixels = np.random.default_rng(1).integers(0, 256, size=(10, 20, 3)).astype(np.uint8)  # H=10, W=20
    tagged = Image.fromarray(pixels)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    tagged.save(tmp_path / "tagged.png", exif=exif)
    image = viz.load_image(str(tmp_path / "tagged.png"))
    assert image.size == (10, 20) and image.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(image), np.rot90(pixels, k=-1))
    Image.fromarray(pixels[..., 0]).convert("P").save(tmp_path / "palette.png")
    assert viz.load_image(str(tmp_path / "palette.png")).mode == "RGB"
    with pytest.raises(DataError, match="does not exist"):
        viz.load_image(str(tmp_path / "missing.png"))
    (tmp_path / "broken.png").write_bytes(b"not an image")
    with pytest.raises(DataError, match="cannot read image"):
        viz.load_image(str(tmp_path / "broken.png"))


def test_attention_overlay_image_for_visualdl_keeps_the_model_mode():
    model = tiny_model(dropout=0.1)
    model.train()
    image = np.random.default_rng(0).normal(size=(3, 14, 14)).astype(np.float32)
    picture = viz.attention_overlay_image(model, image, [0.5] * 3, [0.5] * 3)
    assert picture.dtype == np.uint8 and picture.shape == (224, 224, 3)  # 14 enlarged 16 times
    assert model.training
    again = viz.attention_overlay_image(model, paddle.to_tensor(image), [0.5] * 3, [0.5] * 3)
    np.testing.assert_array_equal(picture, again)  # eval mode inside: no dropout


# ---- the figures from a model ---------------------------------------------------------------------

def test_figures_from_a_model_return_their_numbers():
    model = tiny_model(position_embedding="sincos_2d")
    images = np.random.default_rng(0).normal(size=(3, 3, 14, 14)).astype(np.float32)
    figure, numbers = viz.attention_figure(model, images, [0.5] * 3, [0.5] * 3, titles=["a", "b", "c"])
    assert numbers["rollout"].shape == (3, 2, 2) and numbers["class_attention"].shape == (3, 2, 2, 2)
    assert (numbers["rollout"].sum(axis=(1, 2)) <= 1 + 1e-9).all()
    np.testing.assert_allclose(numbers["probabilities"].sum(axis=1), 1.0, atol=1e-5)
    assert viz.figure_to_array(figure).ndim == 3

    figure, numbers = viz.position_similarity_figure(model)
    similarity = numbers["similarity"]
    for row in range(2):
        for col in range(2):
            assert np.unravel_index(similarity[row, col].argmax(), (2, 2)) == (row, col)

    figure, numbers = viz.embedding_filters_figure(model)
    assert numbers["components"].shape == (16, 3, 7, 7)  # min(28, D = 16, 147)
    figure, numbers = viz.embedding_filters_figure(model, grey=True)
    assert numbers["components"].shape == (16, 1, 7, 7)

    figure, numbers = viz.attention_distance_figure(model, images)
    assert numbers["distance"].shape == (2, 2)
    assert ((numbers["distance"] >= 0) & (numbers["distance"] <= 7 * math.sqrt(2))).all()


def test_a_model_without_position_embedding_has_no_similarity_figure():
    with pytest.raises(ConfigError, match="no position embedding"):
        viz.position_similarity_figure(tiny_model(position_embedding="none"))



@pytest.mark.parametrize("overrides", [dict(distilled=True), dict(register_tokens=4, no_embed_class=True),
                                       dict(class_token=False, pool="mean")])
def test_similarity_figure_compares_the_patch_rows_whatever_the_prefix_tokens(overrides):
    """DeiT's distillation token has a position row of its own, no_embed_class and a model with no
    class token none: the figure compares the grid's rows alone."""
    model = tiny_model(**overrides)
    table = model.patch_embed.position_embedding.numpy()[0, -4:]  # the 2 x 2 grid's rows
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    _, numbers = viz.position_similarity_figure(model)
    np.testing.assert_allclose(numbers["similarity"], (unit @ unit.T).reshape(2, 2, 2, 2), atol=1e-6)

# ---- tools/visualize.py -----------------------------------------------------------------------------

@pytest.mark.slow
def test_visualize_tool_writes_the_four_pngs_from_a_trained_checkpoint(tmp_path, capsys):
    from paddle_vit.engine.trainer import Trainer

    run_dir = tmp_path / "run"
    config = load_config(data={
        "model": {"name": "vit_walkthrough", "image_size": 14, "embed_dim": 16, "depth": 2, "num_heads": 2},
        "data": {"dataset": "synthetic", "synthetic_train_size": 32, "synthetic_val_size": 8},
        "train": {"epochs": 1, "batch_size": 16, "output_dir": str(run_dir), "device": "cpu", "vdl": False},
    })
    Trainer(config).fit()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(tmp_path / "colour.jpg")
    Image.fromarray(rng.integers(0, 256, (14, 14), dtype=np.uint8)).save(tmp_path / "grey.png")
    Image.fromarray(rng.integers(0, 256, (16, 16, 4), dtype=np.uint8)).save(tmp_path / "alpha.png")
    out = tmp_path / "figures"
    # no -c: the .pdckpt stores the recipe it trained with, as eval and predict read it
    command = [sys.executable, os.path.join(TOOLS, "visualize.py"),
               "--weights", str(run_dir / "checkpoints" / "last.pdckpt"), "--out", str(out), "--vdl",
               "--image", str(tmp_path / "colour.jpg"), str(tmp_path / "grey.png"), str(tmp_path / "alpha.png")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for name in viz.FIGURE_NAMES:
        path = out / f"{name}.png"
        assert path.is_file() and path.stat().st_size > 1000, name
        with Image.open(path) as picture:
            assert picture.format == "PNG" and min(picture.size) > 50
    from visualdl import LogReader
    records = [name for name in os.listdir(out / "vdl") if name.startswith("vdlrecords")]
    tags = set(LogReader(file_path=str(out / "vdl" / records[0])).get_tags()["image"])
    assert {f"viz/{name}" for name in viz.FIGURE_NAMES} <= tags

    # the same command in this process (its main), for a missing image and an unreadable one
    arguments = command[2:]
    arguments[arguments.index("--image") + 1] = str(tmp_path / "missing.png")
    capsys.readouterr()
    assert load_tool("visualize").main(arguments) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: image or folder {tmp_path / 'missing.png'} does not exist"]
    # weights that do not say what model they are need -c or --model, said before any work
    plain = ["--weights", str(run_dir / "checkpoints" / "last.pdparams"), "--out", str(tmp_path / "plain"),
             "--image", str(tmp_path / "colour.jpg")]
    assert load_tool("visualize").main(plain) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "name the model with a recipe (-c CONFIG) or a registered name (--model NAME)" in \
        error[0], error
    assert not (tmp_path / "plain").exists()
    config_path = str(run_dir / "config.yaml")
    assert load_tool("visualize").main(["-c", config_path, "--model", "vit_walkthrough", *plain]) == 2
    assert "not both" in capsys.readouterr().err

    broken = tmp_path / "broken.png"  # skipped with a warning, as tools/predict.py skips it
    broken.write_bytes((tmp_path / "grey.png").read_bytes()[:40])
    arguments[arguments.index("--image") + 1] = str(broken)
    assert load_tool("visualize").main(arguments) == 0
    out = capsys.readouterr().out
    assert "skipping unreadable image" in out and "broken.png" in out


def test_drawing_a_confusion_matrix_leaves_matplotlib_as_it_found_it(tmp_path):
    """tools/eval.py's figure is drawn on its own Agg canvas: a notebook's backend stays its own,
    and pyplot's figure list does not grow."""
    import matplotlib
    import matplotlib.pyplot as plt

    from paddle_vit.engine.evaluator import save_confusion_matrix_png

    backend, figures = matplotlib.get_backend(), plt.get_fignums()
    save_confusion_matrix_png([[3, 1], [0, 4]], ["cat", "dog"], str(tmp_path / "confusion.png"))
    assert (tmp_path / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.get_backend() == backend and plt.get_fignums() == figures

"""Accuracy at other resolutions (paddle_vit/experiments/resolution.py, notebooks/02's last
panel): each kind of position embedding evaluated at input sizes it was not trained at, its
learned table resampled or its computed one (sine-cosine, RoPE) computed for the new grid.
"""
from matplotlib.figure import Figure
import numpy as np
import paddle
import pytest

from paddle_vit import ConfigError
from paddle_vit.config import load_config
from paddle_vit.data import build_datasets
from paddle_vit.experiments import accuracy_at_sizes, at_any_size, resolution_figure
from paddle_vit.models.resize import resize_matrix
from paddle_vit.weights import load_pretrained

from tiny_models import perturbed_tiny_vit, tiny_vit

KINDS = ("none", "learned", "learned_2d", "sincos_2d", "rope_axial", "rope_mixed")
TINY = dict(image_size=16, patch_size=4, num_classes=10)  # a 4 x 4 grid


def logits(model, images):
    with paddle.no_grad():
        return model(paddle.to_tensor(images)).numpy()


def images_of(size, seed=0):
    return np.random.default_rng(seed).standard_normal([2, 3, size, size]).astype("float32")


@pytest.mark.parametrize("kind", KINDS)
def test_at_any_size_computes_the_trained_model_at_its_size_and_takes_other_sizes(kind):
    model = perturbed_tiny_vit(position_embedding=kind, **TINY)
    copy = at_any_size(model)
    np.testing.assert_allclose(logits(copy, images_of(16)), logits(model, images_of(16)), rtol=1e-5, atol=1e-5)
    assert logits(copy, images_of(24)).shape == (2, 10)  # a 6 x 6 grid
    assert not model.config.dynamic_img_size  # the trained model is left as it was


def test_a_learned_embedding_at_another_size_is_the_table_load_pretrained_resamples(tmp_path):
    model = perturbed_tiny_vit(position_embedding="learned", **TINY)
    paddle.save(model.state_dict(), str(tmp_path / "weights.pdparams"))
    loaded = tiny_vit(position_embedding="learned", **dict(TINY, image_size=24))
    report = load_pretrained(loaded, str(tmp_path / "weights.pdparams"))
    assert report.resampled and report.resample_method == "bicubic_antialias"
    np.testing.assert_allclose(logits(at_any_size(model), images_of(24)), logits(loaded.eval(), images_of(24)),
                               rtol=1e-4, atol=1e-4)


def test_a_learned_2d_embedding_is_resampled_as_its_row_and_column_tables_apart():
    model = perturbed_tiny_vit(position_embedding="learned_2d", **TINY)
    embedding = at_any_size(model).patch_embed
    table = embedding.input_size.position_embedding_at(embedding.full_position_embedding(), 6, 3).numpy()
    rows = resize_matrix(6, 4).numpy() @ model.patch_embed.row_embedding.numpy()[0]  # [6, D/2]
    cols = resize_matrix(3, 4).numpy() @ model.patch_embed.column_embedding.numpy()[0]  # [3, D/2]
    expected = np.concatenate([np.repeat(rows, 3, axis=0), np.tile(cols, (6, 1))], axis=1)  # [18, D], row-major
    np.testing.assert_allclose(table[0, 1:], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(table[0, 0], model.patch_embed.class_position_embedding.numpy()[0, 0])


def test_the_rotary_table_is_computed_for_the_input_grid():
    copy = at_any_size(perturbed_tiny_vit(position_embedding="rope_axial", **TINY))
    head_dim = 32 // 4
    assert copy.rope_for(paddle.zeros([1, 3, 24, 32])).sin.shape == [6 * 8, head_dim]


def test_a_size_the_patch_does_not_divide_is_refused_unless_padded():
    model = perturbed_tiny_vit(position_embedding="rope_mixed", **TINY)
    with pytest.raises(ConfigError, match="dynamic_img_pad"):
        logits(at_any_size(model), images_of(18))
    assert logits(at_any_size(model, pad=True), images_of(18)).shape == (2, 10)


def test_accuracy_at_sizes_is_top1_per_model_per_size_on_the_eval_transform():
    data = load_config(data={"data": {"dataset": "digits"}}).data
    models = {kind: perturbed_tiny_vit(position_embedding=kind, **TINY) for kind in ("learned", "rope_axial")}
    accuracy = accuracy_at_sizes(models, data, (20, 16))
    assert list(accuracy) == ["learned", "rope_axial"]
    assert all(list(by_size) == [20, 16] for by_size in accuracy.values())
    val = build_datasets(data, 16)[1]
    images = np.stack([val[i][0] for i in range(len(val))])
    for kind, model in models.items():
        expected = float((logits(model, images).argmax(axis=1) == np.asarray(val.labels)).mean())
        assert accuracy[kind][16] == pytest.approx(expected)
        assert 0.0 <= accuracy[kind][20] <= 1.0


def test_resolution_figure_draws_a_line_per_model():
    figure = resolution_figure({"learned": {8: 0.2, 12: 0.8}, "rope_axial": {8: 0.3, 12: 0.7}}, train_size=12)
    assert isinstance(figure, Figure)
    lines = [line for line in figure.axes[0].get_lines() if line.get_marker() == "o"]
    assert [line.get_label() for line in lines] == ["learned", "rope_axial"]
    np.testing.assert_array_equal(lines[1].get_ydata(), [0.3, 0.7])

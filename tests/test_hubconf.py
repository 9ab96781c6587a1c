"""hubconf.py: paddle.hub lists, describes and builds every registered model from this folder."""
import os

import numpy as np
import paddle
import pytest

import paddle_vit
from repo_paths import REPO

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def test_paddle_hub_lists_every_registered_model_and_nothing_else():
    assert sorted(paddle.hub.list(REPO, source="local")) == paddle_vit.list_models()


def test_paddle_hub_help_says_what_the_model_is():
    text = paddle.hub.help(REPO, "vit_base_patch16_224", source="local")
    assert text.startswith("vit_base_patch16_224: ViT, 224 px input, patch 16, width 768, depth 12, 12 heads")
    hybrid = paddle.hub.help(REPO, "vit_base_r50_s16_384", source="local")
    assert "ResNet stages [3, 4, 9]" in hybrid


def test_paddle_hub_load_builds_what_create_model_builds_with_its_options():
    model = paddle.hub.load(REPO, "vit_walkthrough", source="local", num_classes=3, depth=1)
    assert isinstance(model, paddle_vit.ViT)
    assert (model.config.num_classes, model.config.depth) == (3, 1)


def test_paddle_hub_load_takes_pretrained_as_create_model_does():
    folder = os.path.join(FIXTURES, "timm_hub_folder")
    from_hub = paddle.hub.load(REPO, "vit_tiny_patch16_224", source="local", pretrained=folder)
    direct = paddle_vit.create_model("vit_tiny_patch16_224", pretrained=folder)
    from_hub.eval(), direct.eval()
    size = direct.config.image_size
    image = paddle.to_tensor(np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32"))
    np.testing.assert_array_equal(from_hub(image).numpy(), direct(image).numpy())
    assert from_hub.load_report.source == direct.load_report.source


def test_an_unknown_entry_point_is_paddles_own_error():
    with pytest.raises(RuntimeError, match="Cannot find callable vit_nope"):
        paddle.hub.load(REPO, "vit_nope", source="local")

"""PatchEmbedding is the walkthrough's: its five arguments and its steps, written out here by hand;
the options of later ViTs are TokenEmbedding's, and a config asking for none of them gets the
walkthrough's class, which TokenEmbedding then computes to the bit."""
import inspect

import numpy as np
import paddle
import pytest

import paddle_vit
from paddle_vit import ViT, ViTConfig, variants
from paddle_vit.variants import walkthrough_class
from paddle_vit.models import PatchEmbedding
from paddle_vit.models.token_embed import (WALKTHROUGH_EMBEDDING, AddPatchPositionEmbedding, AddPositionEmbedding,
                                           DynamicSize, FixedSize, HybridEmbedding, NoPositionEmbedding,
                                           TokenEmbedding)

TINY = dict(image_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=4, num_classes=5)

# the walkthrough's `PatchEmbedding.__init__` (/work/shared/walkthrough: `class PatchEmbedding`)
WALKTHROUGH_SIGNATURE = [("image_size", 224), ("patch_size", 16), ("in_channels", 3), ("embed_dim", 768),
                         ("dropout", 0.0)]

# ViTConfig fields that do not choose the embedding's class: the encoder's, the pooling's, the
# head's, and `init` (ViT.init_weights initialises either class)
NOT_THE_EMBEDDINGS = {"num_classes", "depth", "num_heads", "mlp_ratio", "qkv_bias", "qk_scale", "layer_norm_epsilon",
                      "gelu", "attention_dropout", "drop_path", "pool", "representation_size", "fused_attention",
                      "init", "layer_scale", "mlp", "fc_norm", "recompute", "qkv", "attention_norm", "mlp_norm",
                      "mlp_align_to", "attn_pool_heads", "attn_pool_mlp_ratio", "final_norm", "norm", "pool_include_prefix",
                      "proj_bias", "mlp_bias",
                      # RoPE acts inside attention (models/rope.py), not on the embedding
                      "rope", "rope_temperature", "rope_grid_offset", "rope_grid_indexing", "rope_rotate_half",
                      "rope_ref_grid"}
# fields that act only with another: each ignored (the walkthrough's class built) while that one is off
ACTING_WITH = {"dynamic_img_pad": "dynamic_img_size", "pos_embed_resample": "dynamic_img_size",
               "backbone": "backbone_layers", "backbone_width": "backbone_layers",
               "backbone_style": "backbone_layers"}

# each option of WALKTHROUGH_EMBEDDING at a value of a later ViT (with what it needs to be valid)
OPTION_CASES = {
    "position_embedding": dict(position_embedding="sincos_2d"),
    "class_token": dict(class_token=False, pool="mean"),
    "distilled": dict(distilled=True),
    "register_tokens": dict(register_tokens=2),
    "no_embed_class": dict(no_embed_class=True),
    "pre_norm": dict(pre_norm=True),
    "drop_remainder": dict(drop_remainder=True, image_size=36),
    "dynamic_img_size": dict(dynamic_img_size=True),
    "backbone_layers": dict(backbone_layers=[1], patch_size=1),
    "patch_norm": dict(patch_norm=True),
}


def test_patch_embedding_takes_the_walkthroughs_five_arguments():
    parameters = list(inspect.signature(PatchEmbedding.__init__).parameters.values())[1:]  # after self
    assert [(parameter.name, parameter.default) for parameter in parameters] == WALKTHROUGH_SIGNATURE


def test_patch_embedding_forward_is_the_walkthroughs_steps_written_out():
    paddle.seed(7)
    embed = PatchEmbedding(image_size=12, patch_size=4, in_channels=3, embed_dim=8)
    with paddle.no_grad():
        embed.class_token.set_value(paddle.randn([1, 1, 8]))  # away from its zero initialisation
    x = paddle.randn([2, 3, 12, 12])
    # the walkthrough's forward, step by step
    class_token = embed.class_token.expand([2, 1, 8])  # [B, 1, D]
    patches = embed.patch_embedding(x)  # [B, D, 3, 3]
    patches = patches.flatten(2)  # [B, D, 9]
    patches = patches.transpose([0, 2, 1])  # [B, 9, D]
    tokens = paddle.concat([class_token, patches], axis=1)  # [B, 10, D]
    tokens = tokens + embed.position_embedding  # [B, 10, D]
    assert np.array_equal(embed(x).numpy(), tokens.numpy())
    # and without Paddle's Conv2D: each 4 x 4 patch flattened, one matrix product (paper Eq. 1)
    flat = x.numpy().reshape(2, 3, 3, 4, 3, 4).transpose(0, 2, 4, 1, 3, 5).reshape(2, 9, 48)
    projected = flat @ embed.patch_embedding.weight.numpy().reshape(8, 48).T + embed.patch_embedding.bias.numpy()
    by_hand = np.concatenate([np.repeat(embed.class_token.numpy(), 2, axis=0), projected], axis=1)
    np.testing.assert_allclose(embed(x).numpy(), by_hand + embed.position_embedding.numpy(), atol=1e-5)


def test_the_paper_and_walkthrough_models_are_built_with_the_walkthroughs_class():
    for name in ("vit_walkthrough", "vit_base_patch16_224"):
        embedding = paddle_vit.create_model(name, depth=1).patch_embed  # on a CPU, with its fast path's class
        assert walkthrough_class(type(embedding)) is PatchEmbedding, name
        assert type(variants.use_walkthrough_modules(embedding)) is PatchEmbedding, name


def test_every_config_field_is_the_walkthroughs_an_embedding_option_or_not_the_embeddings():
    """A field added to ViTConfig must say here whether it changes the embedding: one that does
    and is left out of WALKTHROUGH_EMBEDDING would be dropped on the walkthrough's path."""
    walkthrough = {name for name, _ in WALKTHROUGH_SIGNATURE}
    groups = [walkthrough, set(WALKTHROUGH_EMBEDDING), set(ACTING_WITH), NOT_THE_EMBEDDINGS]
    assert sum(len(group) for group in groups) == len(set().union(*groups))  # no field in two groups
    assert set().union(*groups) == set(ViTConfig.field_names())
    assert set(OPTION_CASES) == set(WALKTHROUGH_EMBEDDING)


@pytest.mark.parametrize("option", sorted(OPTION_CASES))
def test_each_option_of_later_vits_builds_the_token_embedding(option):
    model = ViT(**{**TINY, **OPTION_CASES[option]})
    expected = HybridEmbedding if option == "backbone_layers" else TokenEmbedding
    assert type(model.patch_embed) is expected
    assert model(paddle.randn([1, 3, model.config.image_size, model.config.image_size])).shape == [1, 5]


@pytest.mark.parametrize("field, value", [("pos_embed_resample", "bicubic"), ("backbone", "resnet_d"),
                                          ("backbone_width", 2), ("backbone_style", "jax")])
def test_a_field_acting_only_with_an_option_that_is_off_keeps_the_walkthroughs_class(field, value):
    assert type(ViT(**TINY, **{field: value}).patch_embed) is PatchEmbedding


def test_token_embedding_at_the_walkthroughs_options_computes_what_patch_embedding_computes():
    paddle.seed(8)
    config = ViTConfig(**TINY, dropout=0.1)
    walkthrough = PatchEmbedding(config.image_size, config.patch_size, config.in_channels, config.embed_dim, 0.1)
    options = TokenEmbedding(config)
    assert list(options.state_dict()) == list(walkthrough.state_dict())
    with paddle.no_grad():
        for parameter in walkthrough.parameters():
            parameter.set_value(paddle.randn(parameter.shape))
    options.set_state_dict(walkthrough.state_dict())
    walkthrough.eval(), options.eval()
    x = paddle.randn([2, 3, 32, 32])
    assert np.array_equal(options(x).numpy(), walkthrough(x).numpy())
    for name in ("grid_size", "image_size", "patch_size", "num_patches", "num_prefix_tokens", "num_embedded_prefix",
                 "position_embedding_kind", "token_pixels"):
        assert getattr(options, name) == getattr(walkthrough, name), name
    assert options.token_grid_for(32, 40) == walkthrough.token_grid_for(32, 40)


@pytest.mark.parametrize("overrides, input_size, add", [
    (dict(distilled=True), FixedSize, AddPositionEmbedding),
    (dict(register_tokens=2, no_embed_class=True), FixedSize, AddPatchPositionEmbedding),
    (dict(class_token=False, pool="mean", no_embed_class=True), FixedSize, AddPositionEmbedding),  # no prefix
    (dict(position_embedding="none", dynamic_img_size=True), DynamicSize, NoPositionEmbedding)])
def test_the_options_are_parts_chosen_once_when_the_embedding_is_built(overrides, input_size, add):
    embedding = ViT(**TINY, **overrides).patch_embed
    assert type(embedding.input_size) is input_size and type(embedding.add_position_embedding) is add
    assert not embedding.input_size.parameters() and not embedding.add_position_embedding.parameters()


def test_the_parts_that_are_off_do_nothing():
    x = paddle.randn([2, 5, 8])
    config = ViTConfig(**TINY)
    assert FixedSize(config)(x) is x and NoPositionEmbedding()(x, None) is x
    assert FixedSize(config).position_embedding(None, x) is None

"""The model: shapes, parameter counts against the paper, attention kernels, heads, errors."""
import numpy as np
import paddle
import pytest

import paddle_vit
from paddle_vit import ConfigError, create_model, list_models
from paddle_vit.models import Attention, DropPath, PatchEmbedding, get_model_config, sincos_2d_embedding
from tiny_models import OTHER_CODES_OPTIONS, perturbed_tiny_vit, tiny_vit

# paper Table 1 / timm, at 224 with 1000 classes
PUBLISHED_PARAMETERS = {
    "vit_tiny_patch16_224": 5_717_416,
    "vit_small_patch16_224": 22_050_664,
    "vit_base_patch16_224": 86_567_656,
    "vit_base_patch32_224": 88_224_232,
    "vit_large_patch16_224": 304_326_632,
    "vit_large_patch32_224": 306_535_400,
    "vit_huge_patch14_224": 632_045_800,
}


def count_parameters(model):
    return sum(int(np.prod(p.shape)) for p in model.parameters())


def count_from_config(config):
    """Parameters counted by hand from the architecture (independent of the Paddle modules)."""
    d, hidden, n = config.embed_dim, int(config.embed_dim * config.mlp_ratio), config.num_patches
    patch = d * config.in_channels * config.patch_size ** 2 + d
    tokens = d + (n + 1) * d  # class token + position embedding
    layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * hidden + hidden) + (hidden * d + d)
    return patch + tokens + config.depth * layer + 2 * d + d * config.num_classes + config.num_classes


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_parameter_count_from_config_matches_paper(name):
    assert count_from_config(get_model_config(name)) == PUBLISHED_PARAMETERS[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224"])
def test_built_model_parameter_count_matches_paper(name):
    assert count_parameters(create_model(name)) == PUBLISHED_PARAMETERS[name]


def test_base16_macs_match_published_figure():
    # docs/design.md: about 17.6 GMACs per image at 224 (timm reports 17.58)
    assert get_model_config("vit_base_patch16_224").count_macs() / 1e9 == pytest.approx(17.58, abs=0.05)


def test_registry_names_and_walkthrough_model():
    names = list_models()
    for name in list(PUBLISHED_PARAMETERS) + ["vit_base_patch16_384", "vit_walkthrough"]:
        assert name in names
    model = create_model("vit_walkthrough")
    assert model.patch_embed.num_patches == 32 * 32
    assert model.config.embed_dim == 16 and model.config.depth == 5 and model.num_classes == 10
    assert model(paddle.randn([2, 3, 224, 224])).shape == [2, 10]


def test_unknown_model_name_suggests_close_names():
    with pytest.raises(ConfigError, match="vit_base_patch16_224"):
        create_model("vit_base_patch16_244")


def test_unknown_model_argument_suggests_close_names():
    with pytest.raises(ConfigError, match="num_heads"):
        create_model("vit_walkthrough", num_head=2)


def test_image_size_not_divisible_by_patch_is_rejected():
    with pytest.raises(ConfigError, match="not divisible by patch_size 16"):
        create_model("vit_tiny_patch16_224", image_size=100)


def test_embed_dim_not_divisible_by_heads_is_rejected():
    with pytest.raises(ConfigError, match="not divisible by model.num_heads"):
        tiny_vit(num_heads=5)


def test_input_of_wrong_size_names_expected_size():
    model = tiny_vit()
    with pytest.raises(ConfigError, match="built for 32x32"):
        model(paddle.randn([1, 3, 48, 48]))


def test_qkv_bias_flag_is_not_inverted():
    # the walkthrough's `bias_attr=False if qkv_bias is True else None` had it backwards
    assert Attention(16, 4, qkv_bias=True).qkv.bias is not None
    assert Attention(16, 4, qkv_bias=False).qkv.bias is None


def test_stride_kernel_conv_equals_linear_on_flattened_patches():
    embed = PatchEmbedding(image_size=8, patch_size=4, in_channels=3, embed_dim=6)
    image = paddle.randn([1, 3, 8, 8])
    tokens = (embed(image) - embed.position_embedding)[:, 1:]  # drop the positions and the class token: [1, 4, 6]
    patches = image.numpy().reshape(1, 3, 2, 4, 2, 4).transpose(0, 2, 4, 1, 3, 5).reshape(1, 4, 48)
    weight = embed.patch_embedding.weight.numpy().reshape(6, 48)
    expected = patches @ weight.T + embed.patch_embedding.bias.numpy()
    np.testing.assert_allclose(tokens.numpy(), expected, atol=1e-5)


def test_attention_matches_hand_computation():
    paddle.seed(0)
    attention = Attention(8, 2)
    x = paddle.randn([1, 3, 8])
    out, weights = attention(x, return_attention=True)
    w_qkv, b_qkv = attention.qkv.weight.numpy(), attention.qkv.bias.numpy()
    qkv = x.numpy()[0] @ w_qkv + b_qkv  # [3, 24]
    q, k, v = qkv[:, :8], qkv[:, 8:16], qkv[:, 16:]
    heads = []
    for h in range(2):
        qh, kh, vh = q[:, 4 * h:4 * h + 4], k[:, 4 * h:4 * h + 4], v[:, 4 * h:4 * h + 4]
        scores = qh @ kh.T / 2.0  # head_dim 4 -> scale 1/2
        probs = np.exp(scores - scores.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        np.testing.assert_allclose(weights.numpy()[0, h], probs, atol=1e-5)
        heads.append(probs @ vh)
    expected = np.concatenate(heads, 1) @ attention.proj.weight.numpy() + attention.proj.bias.numpy()
    np.testing.assert_allclose(out.numpy()[0], expected, atol=1e-5)


def test_fused_and_explicit_attention_agree():
    paddle.seed(1)
    explicit = tiny_vit(fused_attention=False)
    fused = tiny_vit(fused_attention=True)
    fused.set_state_dict(explicit.state_dict())
    explicit.eval(), fused.eval()
    x = paddle.randn([3, 3, 32, 32])
    np.testing.assert_allclose(explicit(x).numpy(), fused(x).numpy(), atol=1e-5)


def test_attention_maps_available_with_fused_kernel():
    model = tiny_vit(fused_attention=True)
    model.eval()
    maps = model.get_attention_maps(paddle.randn([2, 3, 32, 32]))
    assert len(maps) == 2 and maps[0].shape == [2, 4, 17, 17]
    np.testing.assert_allclose(maps[1].numpy().sum(-1), 1.0, atol=1e-5)


def test_gradients_reach_every_parameter():
    model = tiny_vit(representation_size=8, position_embedding="learned_2d", drop_path=0.1, dropout=0.1)
    model(paddle.randn([2, 3, 32, 32])).sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not np.any(p.grad.numpy())]
    assert missing == []


@pytest.mark.parametrize("pool", ["cls", "mean", "walkthrough"])
@pytest.mark.parametrize("position_embedding", ["learned", "learned_2d", "sincos_2d", "none"])
def test_every_pool_and_position_embedding_runs_forward_and_backward(pool, position_embedding):
    model = tiny_vit(pool=pool, position_embedding=position_embedding, representation_size=16)
    logits = model(paddle.randn([2, 3, 32, 32]))
    assert logits.shape == [2, 5]
    logits.mean().backward()
    assert model.head.weight.grad is not None and model.patch_embed.patch_embedding.weight.grad is not None


def test_mean_pool_averages_patch_tokens_then_normalises():
    model = tiny_vit(pool="mean")
    model.eval()
    tokens = paddle.randn([2, 17, 32])
    pooled = model.forward_head(tokens, pre_logits=True).numpy()
    mean = tokens.numpy()[:, 1:].mean(1)
    normalised = (mean - mean.mean(1, keepdims=True)) / np.sqrt(mean.var(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(pooled, normalised, atol=1e-4)
    assert not hasattr(model.encoder.norm, "weight")  # timm's avg pooling normalises after pooling only


def test_walkthrough_pool_averages_every_token_including_class_token():
    model = tiny_vit(pool="walkthrough")
    tokens = paddle.randn([2, 17, 32])
    np.testing.assert_allclose(model.forward_head(tokens, pre_logits=True).numpy(), tokens.numpy().mean(1), atol=1e-6)


def test_representation_layer_is_linear_then_tanh():
    model = tiny_vit(representation_size=8)
    tokens = paddle.randn([2, 17, 32])
    expected = np.tanh(tokens.numpy()[:, 0] @ model.pre_logits.fc.weight.numpy() + model.pre_logits.fc.bias.numpy())
    np.testing.assert_allclose(model.forward_head(tokens, pre_logits=True).numpy(), expected, atol=1e-5)
    assert model.head.weight.shape == [8, 5]


def test_drop_path_drops_in_train_mode_only():
    paddle.seed(0)
    drop = DropPath(0.5)
    x = paddle.ones([64, 3, 4])
    out = drop(x).numpy()
    kept = out[:, 0, 0] != 0
    assert 0 < kept.sum() < 64  # some samples dropped, some kept
    np.testing.assert_allclose(out[kept], 2.0)  # kept ones are scaled by 1 / keep_prob
    drop.eval()
    np.testing.assert_allclose(drop(x).numpy(), 1.0)


def test_drop_path_changes_model_output_in_train_mode_not_in_eval():
    paddle.seed(0)
    model = tiny_vit(drop_path=0.5)
    x = paddle.randn([4, 3, 32, 32])
    model.train()
    assert not np.allclose(model(x).numpy(), model(x).numpy())
    model.eval()
    np.testing.assert_allclose(model(x).numpy(), model(x).numpy())


def test_sincos_embedding_is_most_similar_to_itself():
    table = sincos_2d_embedding(6, 6, 32)
    normed = table / np.linalg.norm(table, axis=1, keepdims=True)
    similarity = normed @ normed.T
    assert (similarity.argmax(1) == np.arange(36)).all()


def test_sincos_embedding_is_a_fixed_buffer():
    model = tiny_vit(position_embedding="sincos_2d")
    names = [name for name, _ in model.named_parameters()]
    assert not any("position_embedding" in name for name in names)
    assert "patch_embed.position_embedding" not in model.state_dict()


def test_reset_classifier_zero_initialises_new_head():
    model = tiny_vit()
    model.reset_classifier(7)
    assert model.head.weight.shape == [32, 7]
    assert not np.any(model.head.weight.numpy()) and not np.any(model.head.bias.numpy())
    assert model(paddle.randn([1, 3, 32, 32])).shape == [1, 7]


def test_jax_init_zeroes_head_and_timm_init_does_not():
    jax_model = tiny_vit(init="jax")
    timm_model = tiny_vit(init="timm")
    assert not np.any(jax_model.head.weight.numpy())
    std = timm_model.encoder.layers[0].mlp.fc1.weight.numpy().std()
    assert 0.015 < std < 0.025  # truncated normal, std 0.02 (the trap was 0.2)
    assert np.any(timm_model.head.weight.numpy())


def test_layer_norm_epsilon_is_vit_value():
    model = tiny_vit()
    assert model.encoder.norm._epsilon == 1e-6
    assert model.encoder.layers[0].norm1._epsilon == 1e-6


def test_no_weight_decay_parameters_are_biases_norms_and_embeddings():
    model = tiny_vit()
    excluded = {id(p) for p in model.no_weight_decay_parameters()}
    names = {name for name, p in model.named_parameters() if id(p) in excluded}
    assert "patch_embed.class_token" in names and "patch_embed.position_embedding" in names
    assert "encoder.layers.0.attn.qkv.bias" in names and "encoder.norm.weight" in names
    assert "encoder.layers.0.attn.qkv.weight" not in names and "head.weight" not in names


def test_public_api_is_exported():
    for name in ("create_model", "list_models", "load_pretrained", "ViT", "ViTConfig"):
        assert hasattr(paddle_vit, name), name


# ---- the options other codes compute with: layer_norm_epsilon, gelu, qk_scale -----------------

def numpy_vit_logits(model, images):
    """The model's forward pass written out in numpy (float64) from its parameters, with its
    config's LayerNorm epsilon, GELU and q.k scale: an independent reference (cls pooling,
    learned position embedding)."""
    import math
    config = model.config
    state = {name: tensor.numpy().astype("float64") for name, tensor in model.state_dict().items()}
    erf = np.vectorize(math.erf)

    def layer_norm(x, prefix):
        mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + config.layer_norm_epsilon) * state[prefix + ".weight"] + \
            state[prefix + ".bias"]

    def gelu(x):
        if config.gelu == "tanh":
            return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1 + erf(x / np.sqrt(2)))

    batch, patch, width = images.shape[0], config.patch_size, config.embed_dim
    grid = config.image_size // patch
    patches = images.astype("float64").reshape(batch, 3, grid, patch, grid, patch).transpose(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(batch, grid * grid, -1)  # [B, N, C * P * P]
    kernel = state["patch_embed.patch_embedding.weight"].reshape(width, -1)
    x = patches @ kernel.T + state["patch_embed.patch_embedding.bias"]
    cls = np.broadcast_to(state["patch_embed.class_token"], (batch, 1, width))
    x = np.concatenate([cls, x], 1) + state["patch_embed.position_embedding"]
    heads, head_dim = config.num_heads, width // config.num_heads
    scale = config.qk_scale if config.qk_scale is not None else head_dim ** -0.5
    for index in range(config.depth):
        prefix = f"encoder.layers.{index}."
        y = layer_norm(x, prefix + "norm1")
        qkv = y @ state[prefix + "attn.qkv.weight"] + state.get(prefix + "attn.qkv.bias", 0.0)
        q, k, v = (part.reshape(batch, -1, heads, head_dim).transpose(0, 2, 1, 3) for part in np.split(qkv, 3, -1))
        scores = q @ k.transpose(0, 1, 3, 2) * scale
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, -1, width)
        x = x + attended @ state[prefix + "attn.proj.weight"] + state[prefix + "attn.proj.bias"]
        y = layer_norm(x, prefix + "norm2")
        y = gelu(y @ state[prefix + "mlp.fc1.weight"] + state[prefix + "mlp.fc1.bias"])
        x = x + y @ state[prefix + "mlp.fc2.weight"] + state[prefix + "mlp.fc2.bias"]
    x = layer_norm(x, "encoder.norm")[:, 0]
    return x @ state["head.weight"] + state["head.bias"]


@pytest.mark.parametrize("fused", [False, True])
def test_layer_norm_epsilon_gelu_and_qk_scale_match_a_numpy_forward(fused):
    model = perturbed_tiny_vit(fused_attention=fused, **OTHER_CODES_OPTIONS)
    images = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype("float32")
    with paddle.no_grad():
        ours = model(paddle.to_tensor(images)).numpy()
    np.testing.assert_allclose(ours, numpy_vit_logits(model, images), atol=3e-5)
    # each option matters at this tolerance: the reference computed with the default instead differs
    for option, default in (("layer_norm_epsilon", 1e-6), ("gelu", "exact"), ("qk_scale", None)):
        other = dict(OTHER_CODES_OPTIONS, **{option: default})
        model.config = model.config.replace(**other)
        assert np.abs(numpy_vit_logits(model, images) - ours).max() > 1e-4, option
        model.config = model.config.replace(**OTHER_CODES_OPTIONS)


def test_fused_scaled_dot_product_path_honours_qk_scale(monkeypatch):
    """The fused path (Paddle's scaled_dot_product_attention, which scales by head_dim^-0.5
    itself) with another factor of q k^T, against the explicit path."""
    from paddle_vit.models import attention as attention_module

    explicit = perturbed_tiny_vit(fused_attention=False, **OTHER_CODES_OPTIONS)
    fused = perturbed_tiny_vit(fused_attention=True, **OTHER_CODES_OPTIONS)
    calls = []
    sdpa = attention_module.F.scaled_dot_product_attention
    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    x = paddle.randn([2, 3, 32, 32])
    with paddle.no_grad():
        np.testing.assert_allclose(fused(x).numpy(), explicit(x).numpy(), atol=1e-4)
    assert len(calls) == 2


def test_to_static_graph_honours_the_options():
    model = perturbed_tiny_vit(**OTHER_CODES_OPTIONS)
    images = np.random.default_rng(1).normal(size=(2, 3, 32, 32)).astype("float32")
    static = paddle.jit.to_static(model, full_graph=True)
    with paddle.no_grad():
        np.testing.assert_allclose(static(paddle.to_tensor(images)).numpy(), numpy_vit_logits(model, images),
                                   atol=3e-5)


def test_every_layer_norm_takes_the_epsilon():
    model = tiny_vit(layer_norm_epsilon=1e-12, pool="mean")
    epsilons = [layer._epsilon for layer in model.sublayers() if isinstance(layer, paddle.nn.LayerNorm)]
    assert len(epsilons) == 2 * 2 + 1 and set(epsilons) == {1e-12}  # norm1/norm2 per layer, fc_norm


@pytest.mark.parametrize("option,value,expected", [
    ("layer_norm_epsilon", 0, "finite number > 0"), ("layer_norm_epsilon", float("nan"), "finite number > 0"),
    ("layer_norm_epsilon", float("inf"), "finite number > 0"), ("layer_norm_epsilon", True, "finite number > 0"),
    ("layer_norm_epsilon", 0.01, "<= 1e-3"),
    ("qk_scale", -1.0, "qk_scale must be a finite number > 0"), ("qk_scale", float("inf"), "qk_scale"),
    ("gelu", "erf", "gelu must be one of exact, tanh")])
def test_bad_option_values_name_the_key(option, value, expected):
    with pytest.raises(ConfigError, match=f"model.{option}.*" if option != "gelu" else expected) as error:
        tiny_vit(**{option: value})
    assert expected in str(error.value)


@pytest.mark.parametrize("every", [1, 2])
def test_recompute_gives_the_same_loss_and_gradients(every):
    """model.recompute re-runs encoder layers in the backward pass instead of keeping their
    activations; with dropout and drop-path on, the recomputed layer must draw the same masks."""
    def loss_and_grads(recompute):
        paddle.seed(7)
        model = create_model("vit_walkthrough", image_size=28, embed_dim=32, depth=4, num_heads=4, num_classes=5,
                             dropout=0.2, drop_path=0.2, recompute=recompute)
        model.train()
        runs = []
        for index, layer in enumerate(model.encoder.layers):
            layer.register_forward_pre_hook(lambda layer, inputs, index=index: runs.append(index))
        paddle.seed(11)
        images = paddle.randn([3, 3, 28, 28])
        loss = paddle.nn.functional.cross_entropy(model(images), paddle.to_tensor([0, 3, 4]))
        loss.backward()
        return float(loss), {name: p.grad.numpy() for name, p in model.named_parameters()}, sorted(runs)
    plain_loss, plain, plain_runs = loss_and_grads(0)
    loss, grads, runs = loss_and_grads(every)
    assert plain_runs == [0, 1, 2, 3]
    assert runs == sorted([0, 1, 2, 3] + list(range(0, 4, every)))  # the recomputed layers ran twice
    assert loss == pytest.approx(plain_loss, abs=1e-6)
    assert grads.keys() == plain.keys()
    for name in plain:
        np.testing.assert_allclose(grads[name], plain[name], atol=1e-5, rtol=1e-5, err_msg=name)


def test_recompute_accepts_true_and_a_count_and_refuses_a_negative():
    from paddle_vit.config import load_config
    assert load_config(data={"model": {"recompute": True}}).model.recompute == 1
    assert load_config(data={"model": {"recompute": False}}).model.recompute == 0
    assert load_config(data={"model": {"recompute": 3}}).model.recompute == 3
    with pytest.raises(ConfigError, match="model.recompute must be true, false or k >= 0"):
        load_config(data={"model": {"recompute": -1}})

"""The variants of paddle_vit.variants compute what the walkthrough's modules compute: the CPU fast
paths in values and gradients, the traced-graph variants through to_static; and applying them
keeps the parameters, the state dict and `isinstance` as they were."""
import copy
import os

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
import pytest

import paddle_vit
from paddle_vit import ViT, variants
from paddle_vit.models import Attention
from paddle_vit.variants import cpu as cpu_variants
from paddle_vit import paddle_versions
from tiny_models import OTHER_CODES_OPTIONS, perturbed_tiny_vit, tiny_vit

def test_a_variant_keeps_the_parameters_and_undoing_gives_the_modules_back():
    model = tiny_vit(backbone_layers=None)
    names = list(model.state_dict())
    parameters = [id(parameter) for parameter in model.parameters()]
    variants.use_cpu_fast_paths(model)
    kinds = {type(layer) for layer in model.sublayers()}
    assert variants.FastCpuAttention in kinds and variants.AddmmLinear in kinds and Attention not in kinds
    assert all(isinstance(layer, nn.Linear) for layer in model.sublayers() if type(layer) is variants.AddmmLinear)
    assert list(model.state_dict()) == names and [id(p) for p in model.parameters()] == parameters
    with variants.traceable(model):  # for a trace only, over the fast paths
        assert type(model) is variants.TraceableViT and type(model.encoder.layers[0].attn) is variants.TracedCpuAttention
        assert list(model.state_dict()) == names
    assert type(model) is variants.DenseTransposeViT and type(model.encoder.layers[0].attn) is variants.FastCpuAttention
    variants.use_walkthrough_modules(model)
    assert {type(layer) for layer in model.sublayers()} & {variants.FastCpuAttention, variants.AddmmLinear} == set()


def test_addmm_linear_matches_paddle_linear():
    paddle.seed(3)
    stock = nn.Linear(6, 5)
    fast = nn.Linear(6, 5)
    fast.set_state_dict(stock.state_dict())
    variants.use_cpu_fast_paths(fast)
    assert type(fast) is variants.AddmmLinear and list(fast.state_dict()) == ["weight", "bias"]
    for shape in ([4, 6], [2, 3, 6], [2, 1, 3, 6]):
        x = paddle.randn(shape)
        x.stop_gradient = False
        fast_out, stock_out = fast(x), stock(x)
        assert fast_out.shape == stock_out.shape
        np.testing.assert_allclose(fast_out.numpy(), stock_out.numpy(), atol=1e-6)
        fast_grads = paddle.grad(fast_out.square().sum(), [x, fast.weight, fast.bias])
        stock_grads = paddle.grad(stock_out.square().sum(), [x, stock.weight, stock.bias])
        for ours, theirs in zip(fast_grads, stock_grads):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-5)
    # frozen parameters and an input without gradient: only what is asked for is computed
    fast.weight.stop_gradient = stock.weight.stop_gradient = True
    x = paddle.randn([2, 3, 6])
    (bias_grad,) = paddle.grad(fast(x).square().sum(), [fast.bias])
    (stock_bias_grad,) = paddle.grad(stock(x).square().sum(), [stock.bias])
    np.testing.assert_allclose(bias_grad.numpy(), stock_bias_grad.numpy(), atol=1e-5)
    with paddle.no_grad():
        np.testing.assert_allclose(fast(x).numpy(), stock(x).numpy(), atol=1e-6)


@pytest.mark.parametrize("pool", ["cls", "walkthrough"])
def test_cpu_fast_paths_match_the_walkthrough_path_in_values_and_gradients(pool):
    """The model as the tools run it (fused attention: the packed CPU path; Linear with addmm)
    against the walkthrough's explicit attention with Paddle's stock Linear, weights shared."""
    paddle.seed(5)
    fast = variants.use_cpu_fast_paths(ViT(image_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3,
                                           num_classes=7, pool=pool))
    assert fast.config.fused_attention  # the default
    reference = ViT(fast.config.replace(fused_attention=False))
    reference.set_state_dict(fast.state_dict())
    assert not any(type(layer) in (variants.AddmmLinear, variants.FastCpuAttention) for layer in reference.sublayers())
    x = paddle.randn([3, 3, 32, 32])
    fast_logits, reference_logits = fast(x), reference(x)
    np.testing.assert_allclose(fast_logits.numpy(), reference_logits.numpy(), atol=1e-5)
    fast_grads = paddle.grad(fast_logits.square().sum(), fast.parameters())
    reference_grads = paddle.grad(reference_logits.square().sum(), reference.parameters())
    for (name, _), ours, theirs in zip(fast.named_parameters(), fast_grads, reference_grads):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-4, err_msg=name)


def test_training_through_the_recomputing_attention_gives_the_explicit_paths_gradients(monkeypatch):
    """The CPU fast path recomputes the attention weights in the backward pass by hand
    (RecomputedAttention); Paddle's own autograd of the explicit path is the reference."""
    calls = []
    apply = cpu_variants.RecomputedAttention.apply
    monkeypatch.setattr(cpu_variants.RecomputedAttention, "apply", lambda *a: calls.append(1) or apply(*a))
    paddle.seed(2)
    explicit = tiny_vit(fused_attention=False)
    fused = variants.use_cpu_fast_paths(tiny_vit(fused_attention=True))
    fused.set_state_dict(explicit.state_dict())
    x = paddle.randn([3, 3, 32, 32])
    mix = paddle.randn([3, 5])  # a loss whose gradient differs for every logit
    for model in (explicit, fused):
        model.train()
        (model(x) * mix).sum().backward()
    assert len(calls) == 2  # once per layer of the fused model, none for the explicit one
    for (name, a), b in zip(explicit.named_parameters(), fused.parameters()):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)

    calls.clear()
    dropped = variants.use_cpu_fast_paths(tiny_vit(fused_attention=True, attention_dropout=0.1))
    dropped(x).sum().backward()  # a mask cannot be redrawn
    with paddle.no_grad():
        fused(x)  # nothing to save for a backward pass
    assert calls == []


def test_recomputed_backward_honours_qk_scale_and_tanh_gelu():
    paddle.seed(4)
    explicit = perturbed_tiny_vit(fused_attention=False, **OTHER_CODES_OPTIONS)
    fused = variants.use_cpu_fast_paths(perturbed_tiny_vit(fused_attention=True, **OTHER_CODES_OPTIONS))
    x = paddle.randn([3, 3, 32, 32])
    mix = paddle.randn([3, 5])
    for model in (explicit, fused):
        model.train()
        (model(x) * mix).sum().backward()
    for (name, a), b in zip(explicit.named_parameters(), fused.parameters()):
        reference = a.grad.numpy()  # float32 rounding of gradients up to ~25 here: relative to the largest
        np.testing.assert_allclose(b.grad.numpy(), reference, rtol=1e-4, atol=1e-5 * np.abs(reference).max(),
                                   err_msg=name)


@pytest.mark.parametrize("overrides", [dict(pool="mean", **OTHER_CODES_OPTIONS), dict(pool="walkthrough"),
                                       dict(backbone_layers=[1], patch_size=1, image_size=32, backbone_style="jax")])
@pytest.mark.slow
def test_a_graph_traced_with_the_traceable_variants_computes_the_eager_numbers(overrides):
    """Tanh GELU, GroupNorm, weight standardisation and token means written out, the CPU attention
    from weight columns: each as its module computes eagerly."""
    paddle.seed(6)
    model = perturbed_tiny_vit(**overrides)
    x = paddle.randn([2, 3, 32, 32])
    with paddle.no_grad():
        eager = model(x).numpy()
        variants.use_traceable_variants(model)
        assert type(model) is variants.TraceableViT
        np.testing.assert_allclose(model(x).numpy(), eager, atol=1e-6)  # eagerly a variant is its module
        traced = paddle.jit.to_static(model, full_graph=True)  # (the same layer, its forward now traced)
        np.testing.assert_allclose(traced(x).numpy(), eager, atol=1e-4)


# each way the embedding adds a table to every sample: (ViT overrides, the variant that adds it)
EMBEDDING_ADDS = [
    ({}, cpu_variants.ExpandedAddPatchEmbedding),  # the walkthrough's PatchEmbedding
    (dict(position_embedding="learned_2d"), cpu_variants.ExpandedAddPositionEmbedding),  # TokenEmbedding
    (dict(no_embed_class=True, register_tokens=2), cpu_variants.ExpandedAddPatchPositionEmbedding),
]


@pytest.mark.parametrize("overrides, variant", EMBEDDING_ADDS, ids=["walkthrough", "token_embedding", "no_embed_class"])
def test_the_embeddings_expanded_adds_give_the_modules_numbers_and_gradients(overrides, variant):
    """The Conv2D's bias and the position embedding added expanded to the batch: the same tokens
    to the bit as the stock modules' broadcast adds, the same gradients within float rounding."""
    paddle.seed(3)
    fast = variants.use_cpu_fast_paths(ViT(image_size=32, patch_size=8, embed_dim=48, depth=1, num_heads=3,
                                           num_classes=7, **overrides))
    kinds = {type(layer) for layer in fast.patch_embed.sublayers(include_self=True)}
    assert variant in kinds and cpu_variants.ExpandedBiasConv2D in kinds
    with paddle.no_grad():
        for parameter in fast.patch_embed.parameters():  # the prefix tokens and the bias off zero
            parameter.set_value(paddle.randn(parameter.shape))
    reference = variants.use_walkthrough_modules(copy.deepcopy(fast))
    assert not {type(layer) for layer in reference.sublayers()} & {variant, cpu_variants.ExpandedBiasConv2D}
    images = paddle.randn([3, 3, 32, 32])
    ours, theirs = fast.patch_embed(images), reference.patch_embed(images)
    assert np.array_equal(ours.numpy(), theirs.numpy())
    weights = paddle.randn(ours.shape)
    our_grads = paddle.grad((ours * weights).sum(), fast.patch_embed.parameters())
    their_grads = paddle.grad((theirs * weights).sum(), reference.patch_embed.parameters())
    for (name, _), a, b in zip(fast.patch_embed.named_parameters(), our_grads, their_grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


# (Conv2D arguments, the input, whether the bias is added expanded): each setting it steps aside for
CONV_CASES = [
    (dict(), "float32", True),
    (dict(padding=1), "float32", True),
    (dict(bias_attr=False), "float32", False),  # no bias: nothing to add
    (dict(padding=1, padding_mode="reflect"), "float32", False),
    (dict(data_format="NHWC"), "float32", False),
    (dict(), "float64", False),
]


@pytest.mark.parametrize("arguments, dtype, expanded", CONV_CASES,
                         ids=["plain", "padded", "no bias", "reflect", "channels last", "float64"])
def test_the_expanded_bias_conv2d_computes_the_stock_layer_and_steps_aside_where_it_would_not(
        monkeypatch, arguments, dtype, expanded):
    paddle.seed(4)
    stock = nn.Conv2D(3, 8, 4, stride=4, **arguments)
    stock.to(dtype=dtype)
    fast = copy.deepcopy(stock)
    fast.__class__ = cpu_variants.ExpandedBiasConv2D
    calls = []
    original = cpu_variants.expanded_to
    monkeypatch.setattr(cpu_variants, "expanded_to", lambda *args: calls.append(1) or original(*args))
    shape = [2, 12, 12, 3] if arguments.get("data_format") == "NHWC" else [2, 3, 12, 12]
    images = paddle.randn(shape).astype(dtype)
    assert np.array_equal(fast(images).numpy(), stock(images).numpy())
    assert bool(calls) == expanded


@pytest.mark.slow  # 3-6 s (a subprocess, a tool run or a traced graph): out of the fast loop
def test_create_model_on_a_cpu_computes_with_the_fast_paths_and_the_walkthroughs_numbers():
    paddle.seed(11)
    model = paddle_vit.create_model("vit_walkthrough", image_size=28, patch_size=7, num_classes=3)
    kinds = {type(layer) for layer in model.sublayers()}
    assert variants.FastCpuAttention in kinds and variants.AddmmLinear in kinds and Attention not in kinds
    assert type(ViT(image_size=28, patch_size=7, num_classes=3).encoder.layers[0].attn) is Attention  # the class itself
    x = paddle.randn([2, 3, 28, 28])
    model.eval()
    fast = model(x).numpy()
    variants.use_walkthrough_modules(model)
    assert type(model.encoder.layers[0].attn) is Attention
    np.testing.assert_allclose(model(x).numpy(), fast, rtol=1e-5, atol=1e-6)


def test_the_fast_forward_runs_with_dense_transposes_and_leaves_the_flag_as_it_was():
    seen = []
    model = variants.use_cpu_fast_paths(tiny_vit(backbone_layers=None)).eval()
    original = ViT.forward

    def recording_forward(self, x):
        seen.append(paddle.get_flags(["FLAGS_use_stride_kernel"])["FLAGS_use_stride_kernel"])
        return original(self, x)

    x = paddle.randn([2, 3, 32, 32])
    before = paddle.get_flags(["FLAGS_use_stride_kernel"])
    try:
        ViT.forward = recording_forward
        for stride_kernels in (True, False):
            paddle.set_flags({"FLAGS_use_stride_kernel": stride_kernels})
            model(x)
            assert paddle.get_flags(["FLAGS_use_stride_kernel"])["FLAGS_use_stride_kernel"] is stride_kernels
    finally:
        ViT.forward = original
        paddle.set_flags(before)
    assert seen == [False, False]  # dense inside the forward pass, whatever the process had


def layer_norm_pair(width, seed=7):
    """A stock LayerNorm and the same one as `FastCpuLayerNorm`, weights drawn away from 1 and 0."""
    paddle.seed(seed)
    stock = nn.LayerNorm(width, epsilon=1e-6)
    with paddle.no_grad():
        stock.weight.set_value(paddle.rand([width]) + 0.5)
        stock.bias.set_value(paddle.randn([width]))
    fast = nn.LayerNorm(width, epsilon=1e-6)
    fast.set_state_dict(stock.state_dict())
    return stock, variants.use_cpu_fast_paths(fast)


def layer_norm_outputs(layer, x, grad):
    """(out, dx, dw, db) of `layer` on x with the output's gradient `grad`."""
    x = x.detach()
    x.stop_gradient = False
    out = layer(x)
    return [out, *paddle.grad(out, [x, layer.weight, layer.bias], grad)]


@pytest.mark.slow  # the first call builds the kernel on this machine (about 15 s; then cached)
@pytest.mark.skipif(not variants.compiled.build_possible(), reason="no C++ compiler: Paddle's kernel is kept")
@pytest.mark.parametrize("width", [192, 384])
def test_the_compiled_layer_norm_backward_gives_paddles_gradients(width):
    stock, fast = layer_norm_pair(width)
    assert type(fast) is variants.FastCpuLayerNorm and variants.compiled.kernel_library() is not None
    x = paddle.randn([4, 197, width]) * 3 + 1  # rows with a mean far from 0: the centring matters
    grad = paddle.randn([4, 197, width])
    for ours, theirs, name in zip(layer_norm_outputs(fast, x, grad), layer_norm_outputs(stock, x, grad),
                                  ("out", "dx", "dw", "db")):
        scale = float(np.abs(theirs.numpy()).max())
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=3e-6 * scale, err_msg=name)


@pytest.mark.slow  # the first call builds the kernels on this machine (about 20 s; then cached)
@pytest.mark.skipif(not variants.compiled.build_possible(), reason="no C++ compiler: Paddle's softmax is kept")
def test_the_compiled_softmax_and_its_backward_give_the_formulas_values():
    """Against float64 numpy: scores over a wide range (entries more than 87 below their row's
    maximum, where exp is clamped), a row of equal scores, a row dominated by one; and dS =
    P (dP - rowsum(dP P)) for the backward pass, one thread and two."""
    library = variants.compiled.kernel_library()
    rng = np.random.default_rng(4)
    scores = rng.normal(scale=30.0, size=(2, 3, 197, 197)).astype(np.float32)
    scores[0, 0, 0] = 1.5  # all equal: 1 / 197 each
    scores[0, 0, 1, 7] = 500.0  # one entry takes it all
    shifted = scores.astype(np.float64) - scores.max(axis=-1, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    grad = rng.normal(size=scores.shape).astype(np.float32)
    expected_grad = expected * (grad - (grad * expected).sum(axis=-1, keepdims=True))
    for threads in (1, 2):
        weights = library.paddle_vit_softmax(paddle.to_tensor(scores), threads).numpy()
        np.testing.assert_allclose(weights, expected, rtol=2e-6, atol=1e-9)  # tiny weights: 1e-9 of the row's 1
        paddles = F.softmax(paddle.to_tensor(scores), axis=-1).numpy()
        assert np.abs(weights - expected).max() <= 2 * np.abs(paddles - expected).max() + 1e-9
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=2e-6)
        assert np.allclose(weights[0, 0, 0], 1 / 197, rtol=1e-6) and weights[0, 0, 1, 7] == 1.0
        grad_scores = library.paddle_vit_softmax_backward(paddle.to_tensor(expected.astype(np.float32)),
                                                          paddle.to_tensor(grad), threads).numpy()
        np.testing.assert_allclose(grad_scores, expected_grad, atol=2e-6 * np.abs(expected_grad).max())


@pytest.mark.slow
@pytest.mark.skipif(not variants.compiled.build_possible(), reason="no C++ compiler: Paddle's GELU is kept")
def test_the_compiled_gelu_and_its_backward_give_the_formulas_values():
    """Against x Phi(x) and Phi(x) + x phi(x) in float64 (math.erf): no further off than Paddle's
    own GELU plus 2e-7, one thread and two; FastCpuGELU takes it in training and in evaluation."""
    import math

    library = variants.compiled.kernel_library()
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(3, 197, 512)) * 3).astype(np.float32)  # an MLP hidden layer of a model 128 wide
    x[0, 0, :6] = [0.0, -0.0, 1e-30, -12.0, 12.0, 100.0]
    wide = x.astype(np.float64)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(wide / math.sqrt(2)))
    grad = rng.normal(size=x.shape).astype(np.float32)
    expected = wide * cdf
    expected_grad = grad * (cdf + wide * np.exp(-wide * wide / 2) / math.sqrt(2 * math.pi))
    paddles = float(np.abs(F.gelu(paddle.to_tensor(x)).numpy() - expected).max())
    for threads in (1, 2):
        ours = library.paddle_vit_gelu(paddle.to_tensor(x), threads).numpy()
        assert np.abs(ours - expected).max() <= paddles + 2e-7
        assert ours[0, 0, 0] == 0.0 and ours[0, 0, 5] == 100.0
        grad_x = library.paddle_vit_gelu_backward(paddle.to_tensor(x), paddle.to_tensor(grad), threads).numpy()
        np.testing.assert_allclose(grad_x, expected_grad, atol=1e-6 * np.abs(expected_grad).max())

    layer = variants.use_cpu_fast_paths(nn.GELU())
    assert type(layer) is variants.FastCpuGELU
    trained = paddle.to_tensor(x, stop_gradient=False)
    assert np.array_equal(layer(trained).numpy(), library.paddle_vit_gelu(paddle.to_tensor(x), 1).numpy())
    with paddle.no_grad():  # evaluation: the kernel too, within 2e-7 of Paddle's GELU
        evaluated = layer(paddle.to_tensor(x)).numpy()
    assert np.array_equal(evaluated, library.paddle_vit_gelu(paddle.to_tensor(x), 1).numpy())
    assert np.abs(evaluated - F.gelu(paddle.to_tensor(x)).numpy()).max() <= 2e-7 * np.abs(x).max()
    assert np.array_equal(variants.use_cpu_fast_paths(nn.GELU(approximate=True))(paddle.to_tensor(x)).numpy(),
                          F.gelu(paddle.to_tensor(x), approximate=True).numpy())  # the tanh form: Paddle's


@pytest.mark.slow
@pytest.mark.skipif(not variants.compiled.build_possible(), reason="no C++ compiler: Paddle's softmax is kept")
def test_the_attention_in_evaluation_takes_the_compiled_softmax_where_nothing_else_is_asked_of_it(monkeypatch):
    """ViT-Ti/16's attention (192 wide, 3 heads) in evaluation: the compiled softmax over keys,
    within 1e-6 of the walkthrough's module (relative to the output's scale); the module's own
    softmax where a hook is on it, where it was replaced, where gradients are recorded, and for
    layers narrower than the kernels'."""
    from kernel_calls import count_calls
    paddle.seed(8)
    walkthrough = Attention(192, num_heads=3, fused=True)
    walkthrough.eval()
    fast = variants.use_cpu_fast_paths(copy.deepcopy(walkthrough))
    assert type(fast) is variants.FastCpuAttention
    x = paddle.randn([2, 197, 192]) * 2
    calls = count_calls(monkeypatch, cpu_variants, "paddle_vit_softmax")
    with paddle.no_grad():
        expected = walkthrough(x).numpy()
        np.testing.assert_allclose(fast(x).numpy(), expected, atol=1e-6 * np.abs(expected).max())
    assert calls == [1]

    seen = []
    hook = fast.softmax.register_forward_post_hook(lambda layer, inputs, output: seen.append(output.shape))
    with paddle.no_grad():
        fast(x)
    assert calls == [1] and seen == [[2, 3, 197, 197]]  # the hook was called: the module computed
    hook.remove()
    wanting = x.detach()
    wanting.stop_gradient = False
    fast(wanting)  # gradients recorded (a saliency map): the module's softmax
    assert calls == [1]
    narrow = variants.use_cpu_fast_paths(Attention(64, num_heads=2, fused=True))
    narrow.eval()
    with paddle.no_grad():
        narrow(paddle.randn([2, 17, 64]))
    assert calls == [1]


@pytest.mark.slow
@pytest.mark.skipif(not variants.compiled.build_possible(), reason="no C++ compiler: Paddle's softmax is kept")
def test_the_recomputed_attention_with_the_compiled_softmax_gives_paddles_gradients():
    paddle.seed(6)
    q, k, v = (paddle.randn([2, 3, 197, 64]) for _ in range(3))
    grad = paddle.randn([2, 3, 197, 64])
    results = []
    for library in (None, variants.compiled.kernel_library()):
        inputs = [t.detach() for t in (q, k, v)]
        for t in inputs:
            t.stop_gradient = False
        out = cpu_variants.RecomputedAttention.apply(*inputs, library)
        results.append([out, *paddle.grad(out, inputs, grad)])
    for ours, theirs, name in zip(results[1], results[0], ("out", "dq", "dk", "dv")):
        scale = float(np.abs(theirs.numpy()).max())
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=3e-6 * scale, err_msg=name)


def layer_norm_input_gradient(x, weight, out_grad):
    """d/dx of sum(LayerNorm(x) * out_grad) over the last axis (epsilon 1e-6), by the formula in
    float64: dx = (g - mean(g) - x^ mean(g x^)) / sigma with g = weight * out_grad."""
    x = x.astype(np.float64)
    sigma = np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    normalized = (x - x.mean(-1, keepdims=True)) / sigma
    g = weight * out_grad
    return (g - g.mean(-1, keepdims=True) - normalized * (g * normalized).mean(-1, keepdims=True)) / sigma


@pytest.mark.parametrize("width", [16, 192])  # 192: the compiled kernel where it is built
@pytest.mark.parametrize("frozen", ["weight", "weight and bias", "bias", "input", "no affine"])
def test_a_layer_norm_gives_the_input_the_formulas_gradient_whatever_is_frozen(width, frozen):
    """Paddle 3.3's CPU LayerNorm computes the input gradient as if a frozen weight were ones; the
    fast path's is the formula's, and frozen tensors get no gradient."""
    paddle.seed(3)
    affine = {} if frozen != "no affine" else {"weight_attr": False, "bias_attr": False}
    layer = variants.use_cpu_fast_paths(nn.LayerNorm(width, epsilon=1e-6, **affine))
    weight = np.ones(width)
    if frozen != "no affine":
        with paddle.no_grad():
            layer.weight.set_value(paddle.rand([width]) + 0.5)
            layer.bias.set_value(paddle.randn([width]))
        weight = layer.weight.numpy().astype(np.float64)
        layer.weight.stop_gradient = "weight" in frozen
        layer.bias.stop_gradient = "bias" in frozen
    x = paddle.randn([4, 197, width]) * 3 + 1
    x.stop_gradient = frozen == "input"
    out_grad = paddle.randn([4, 197, width])
    (layer(x) * out_grad).sum().backward()
    if frozen == "input":
        assert x.grad is None and layer.weight.grad is not None
        return
    expected = layer_norm_input_gradient(x.numpy(), weight, out_grad.numpy().astype(np.float64))
    np.testing.assert_allclose(x.grad.numpy(), expected, atol=3e-6 * np.abs(expected).max())
    if frozen != "no affine":
        assert (layer.weight.grad is None) == ("weight" in frozen)
        assert (layer.bias.grad is None) == ("bias" in frozen)


def test_the_compiled_layer_norm_is_asked_for_only_in_training_of_wide_layers(monkeypatch):
    def no_kernel():
        raise AssertionError("the compiled kernel was asked for")
    monkeypatch.setattr(cpu_variants, "kernel_library", no_kernel)
    narrow_stock, narrow = layer_norm_pair(64)  # the walkthrough's width: Paddle's kernel
    x, grad = paddle.randn([2, 5, 64]), paddle.randn([2, 5, 64])
    for ours, theirs in zip(layer_norm_outputs(narrow, x, grad), layer_norm_outputs(narrow_stock, x, grad)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    wide_stock, wide = layer_norm_pair(192)
    with paddle.no_grad():  # evaluation: nothing to differentiate
        x = paddle.randn([2, 5, 192])
        np.testing.assert_array_equal(wide(x).numpy(), wide_stock(x).numpy())


def test_the_walkthrough_digits_model_trains_without_asking_for_the_compiled_kernels(monkeypatch):
    """The quick start's model (64 wide, MLP 256) never builds the kernels: a newcomer's first run
    is not held up by a compiler, and computes with Paddle's kernels."""
    def no_kernel():
        raise AssertionError("the compiled kernels were asked for")
    monkeypatch.setattr(cpu_variants, "kernel_library", no_kernel)
    monkeypatch.setattr(variants.fused_layer, "kernel_library", no_kernel)
    model = paddle_vit.create_model("vit_walkthrough", image_size=28, patch_size=7, embed_dim=64, depth=4,
                                    num_heads=4, num_classes=10)
    model.train()
    loss = model(paddle.randn([4, 3, 28, 28])).sum()
    loss.backward()
    assert model.patch_embed.patch_embedding.weight.grad is not None


def test_without_the_compiled_kernels_a_wide_layer_norm_is_paddles(monkeypatch, caplog):
    """Switched off, or the build failing (no compiler), the stock kernel computes: the build is
    tried once per process and its failure said in one info line."""
    monkeypatch.setattr(variants.compiled, "_LOADED", {})
    monkeypatch.setenv("PADDLE_VIT_COMPILED_KERNELS", "0")
    assert variants.compiled.kernel_library() is None
    monkeypatch.setattr(variants.compiled, "_LOADED", {})
    monkeypatch.delenv("PADDLE_VIT_COMPILED_KERNELS")
    attempts = []

    def failing_build(cache):
        attempts.append(cache)
        raise OSError("c++: command not found")
    monkeypatch.setattr(variants.compiled, "_build", failing_build)
    stock, fast = layer_norm_pair(192)
    x, grad = paddle.randn([2, 5, 192]), paddle.randn([2, 5, 192])
    with caplog.at_level("INFO", logger="paddle_vit"):
        for _ in range(2):
            for ours, theirs in zip(layer_norm_outputs(fast, x, grad), layer_norm_outputs(stock, x, grad)):
                np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert len(attempts) == 1
    messages = [record.getMessage() for record in caplog.records if "compiled CPU kernels" in record.getMessage()]
    assert len(messages) == 1 and "c++: command not found" in messages[0] and "PADDLE_VIT_COMPILED_KERNELS=0" in messages[0]


def test_the_build_is_keyed_by_the_instruction_sets_it_targets():
    """A cache shared by machines of other CPUs (a home folder on a network disk, a machine whose
    CPU changes) never loads a build made for instructions this one lacks."""
    assert variants.compiled.build_key(["-mavx2", "-mfma"]) != variants.compiled.build_key([])
    assert variants.compiled.build_key([]) == variants.compiled.build_key([])


def test_a_build_killed_half_way_is_started_again_from_an_empty_folder(tmp_path, monkeypatch):
    """A kill during the build leaves objects and a library without its recorded hash, which may
    be cut short: the build folder is emptied (its lock and log kept) and the build run once more,
    before anything is loaded."""
    builds = []
    key = variants.compiled.build_key(variants.compiled.machine_flags())

    def build_in_child(folder, name, target_flags):
        builds.append(sorted(os.listdir(folder)))
        library = variants.compiled.library_path(folder, key)
        os.makedirs(os.path.dirname(library))
        with open(library, "wb") as stream:
            stream.write(b"\x7fELF whole")
    monkeypatch.setattr(variants.compiled, "_build_in_child", build_in_child)
    monkeypatch.setattr(variants.compiled, "load_library", lambda name, library: "the library")
    folder = tmp_path / key
    (folder / "half" / "build").mkdir(parents=True)
    (folder / "half" / "kernels.so").write_bytes(b"\x7fELF truncated")
    (folder / "build.log").write_text("the killed build's output\n")
    assert variants.compiled._build(str(tmp_path)) == "the library"
    assert builds == [["build.lock", "build.log"]]


@pytest.mark.slow  # the child process and Paddle's builder each import Paddle: about 7 s
def test_a_failed_build_names_the_compilers_error_and_is_not_built_twice(tmp_path, monkeypatch, caplog):
    """A build that fails (here: a source that does not compile) ends in Paddle's kernels, with
    one info line naming the compiler's error, and is tried once."""
    broken = tmp_path / "broken.cc"
    broken.write_text("int broken( { return 0; }\n")
    monkeypatch.setattr(variants.compiled, "SOURCES", [str(broken)])
    monkeypatch.setattr(variants.compiled, "_LOADED", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(variants.compiled.SWITCH_VARIABLE, raising=False)
    children = []
    build_in_child = variants.compiled._build_in_child
    monkeypatch.setattr(variants.compiled, "_build_in_child", lambda *a: children.append(a) or build_in_child(*a))
    if not variants.compiled.build_possible():
        pytest.skip("no C++ compiler")
    with caplog.at_level("INFO", logger="paddle_vit"):
        assert variants.compiled.kernel_library() is None
    assert len(children) == 1
    messages = [record.getMessage() for record in caplog.records if "compiled CPU kernels" in record.getMessage()]
    assert len(messages) == 2 and messages[0].startswith("building the compiled CPU kernels, once")
    message = messages[1]
    assert "broken.cc" in message and "error:" in message and "build.log" in message
    (log,) = (tmp_path / "cache" / "paddle_vit" / "kernels").glob("*/build.log")
    assert "broken.cc" in log.read_text()


# ---- the Paddle releases the variants' workarounds and private APIs were written for -------------

def test_each_version_entry_applies_to_its_releases_and_elsewhere_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(paddle, "__version__", "3.3.1")
    assert paddle_versions.running_release() == "3.3"
    for name, dependency in paddle_versions.DEPENDENCIES.items():
        assert dependency.uses and dependency.where and dependency.why and dependency.releases
        monkeypatch.setattr(paddle_versions, "running_release", lambda: dependency.releases[-1])
        assert paddle_versions.applies(name)
    monkeypatch.setattr(paddle_versions, "running_release", lambda: "3.9")
    monkeypatch.setattr(paddle_versions, "_SAID", set())
    with caplog.at_level("INFO", logger="paddle_vit"):
        for name in paddle_versions.DEPENDENCIES:
            assert not paddle_versions.applies(name) and not paddle_versions.applies(name)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == len(paddle_versions.DEPENDENCIES)
    for message, (name, dependency) in zip(messages, paddle_versions.DEPENDENCIES.items()):
        assert name in message and dependency.where in message and "3.3" in message


@pytest.mark.parametrize("release", ["3.3", "3.9"])
def test_the_frozen_layer_norm_weight_correction_is_made_on_the_release_it_was_written_for(monkeypatch, release):
    """3.3: the formula's input gradient; another release: Paddle's own LayerNorm, as it computes."""
    monkeypatch.setattr(paddle_versions, "running_release", lambda: release)
    stock, fast = layer_norm_pair(16)
    x = paddle.randn([4, 9, 16]) * 3 + 1
    out_grad = paddle.randn([4, 9, 16])
    gradients = []
    for layer in (fast, stock):
        layer.weight.stop_gradient = True
        x_leaf = x.detach()
        x_leaf.stop_gradient = False
        (layer(x_leaf) * out_grad).sum().backward()
        gradients.append(x_leaf.grad.numpy())
    ours, paddles = gradients
    expected = layer_norm_input_gradient(x.numpy(), stock.weight.numpy().astype(np.float64),
                                         out_grad.numpy().astype(np.float64))
    if release == "3.3":
        np.testing.assert_allclose(ours, expected, atol=3e-6 * np.abs(expected).max())
    else:
        np.testing.assert_array_equal(ours, paddles)


@pytest.mark.parametrize("release", ["3.3", "3.9"])
def test_the_private_layer_norm_op_and_the_kernels_are_used_on_the_release_they_were_written_for(monkeypatch,
                                                                                                  release):
    """3.3: the compiled backward fed by the private op; another release: Paddle's own LayerNorm,
    and the kernels are not built."""
    library = variants.compiled.kernel_library()
    if library is None:
        pytest.skip("no compiled kernels here")
    monkeypatch.setattr(paddle_versions, "running_release", lambda: release)
    asked = []
    monkeypatch.setattr(cpu_variants, "kernel_library", lambda: asked.append("kernels") or library)
    legacy_layer_norm = paddle._legacy_C_ops.layer_norm
    monkeypatch.setattr(paddle._legacy_C_ops, "layer_norm", lambda *a: asked.append("op") or legacy_layer_norm(*a))
    stock, fast = layer_norm_pair(192)
    x, grad = paddle.randn([2, 5, 192]), paddle.randn([2, 5, 192])
    for ours, theirs in zip(layer_norm_outputs(fast, x, grad), layer_norm_outputs(stock, x, grad)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0,
                                   atol=3e-6 * np.abs(theirs.numpy()).max() if release == "3.3" else 0)
    assert asked == (["kernels", "op"] if release == "3.3" else [])
    monkeypatch.setattr(variants.compiled, "_LOADED", {})
    monkeypatch.setattr(variants.compiled, "_build", lambda cache: "the library")
    assert variants.compiled.kernel_library() == ("the library" if release == "3.3" else None)

"""timm reference outputs for tests/test_weights.py (run with PyTorch + timm, not Paddle).

    /work/refvenv/bin/python tools/make_reference_fixtures.py timm [--out tests/fixtures]

Builds a few small timm ``VisionTransformer``s with random but non-trivial weights (every
tensor, LayerNorm scales and biases included, is perturbed so that each one changes the
logits), and writes for each:
- ``<case>.safetensors``: the timm state dict, as timm's own hub files are stored;
- ``<case>.npz``: the same weights in the layout of the original JAX checkpoints, proven
  right by loading it back with timm's own ``_load_weights`` and comparing logits;
- ``timm_reference.npz``: the input batch and timm's logits per case, and
  ``timm_reference.json``: the model configurations.
The Paddle tests load these weights with ``paddle_vit.load_pretrained`` and compare logits.
Last, timm's own reading of a JAX ``.npz`` at another resolution (``_load_weights``: exact GELU,
bilinear resampling) is recorded as ``resample_up_npz``.
"""
import json
import os
import sys

import numpy as np
import torch

from torch_reference import import_timm  # tools/ is on sys.path when run as a script

import_timm()  # declares the torchvision op schemas this torch build lacks, then imports timm

import safetensors.torch  # noqa: E402
import timm  # noqa: E402
from timm.layers import resample_abs_pos_embed  # noqa: E402
from timm.models.vision_transformer import VisionTransformer, _load_weights, checkpoint_filter_fn  # noqa: E402

# name -> timm VisionTransformer arguments (and the paddle-vit pool that matches global_pool)
CASES = {
    "timm_vit_cls": dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=10,
                         global_pool="token"),
    "timm_vit_avg": dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=10,
                         global_pool="avg"),
    "timm_vit_p16": dict(img_size=48, patch_size=16, embed_dim=48, depth=2, num_heads=3, num_classes=7,
                         global_pool="token"),
}
POOL_NAMES = {"token": "cls", "avg": "mean"}
BATCH = 2
PRE_LOGITS_SIZE = 24  # != embed_dim, so a head wired to the wrong width cannot load
PRE_LOGITS_CLASSES = 5


def build(arguments):
    model = VisionTransformer(**arguments)
    return model.eval()


@torch.no_grad()
def perturb(model, generator):
    """Add noise to every tensor so that none of them is at a trivial value (LayerNorm scale 1,
    bias 0, class token ~0): a converter that drops or misplaces any tensor changes the logits.
    The q/k weights get larger values so that attention is far from uniform."""
    for name, parameter in model.named_parameters():
        scale = 0.25 if "attn.qkv.weight" in name else 0.1
        parameter.add_(torch.randn(parameter.shape, generator=generator) * scale)


def timm_to_jax(state_dict, num_heads):
    """A timm ViT state dict in the layout of the original JAX checkpoints (google-research/
    vision_transformer): HWIO conv kernel, [in, out] Dense kernels, attention kernels split per
    head. Keys and layout follow what timm's `_load_weights` reads."""
    out = {}
    numpy = {name: tensor.detach().cpu().numpy().astype("float32") for name, tensor in state_dict.items()}
    embed_dim = numpy["cls_token"].shape[-1]
    head_dim = embed_dim // num_heads
    out["embedding/kernel"] = numpy["patch_embed.proj.weight"].transpose(2, 3, 1, 0)  # OIHW -> HWIO
    out["embedding/bias"] = numpy["patch_embed.proj.bias"]
    out["cls"] = numpy["cls_token"]
    out["Transformer/posembed_input/pos_embedding"] = numpy["pos_embed"]
    depth = len({name.split(".")[1] for name in numpy if name.startswith("blocks.")})
    for index in range(depth):
        block, prefix = f"blocks.{index}.", f"Transformer/encoderblock_{index}/"
        out[prefix + "LayerNorm_0/scale"] = numpy[block + "norm1.weight"]
        out[prefix + "LayerNorm_0/bias"] = numpy[block + "norm1.bias"]
        qkv_weight = numpy[block + "attn.qkv.weight"]  # [3 * D, D] (out, in), rows (3, heads, head_dim)
        qkv_bias = numpy[block + "attn.qkv.bias"]
        for part, role in enumerate(("query", "key", "value")):
            rows = slice(part * embed_dim, (part + 1) * embed_dim)
            out[prefix + f"MultiHeadDotProductAttention_1/{role}/kernel"] = (
                qkv_weight[rows].T.reshape(embed_dim, num_heads, head_dim))
            out[prefix + f"MultiHeadDotProductAttention_1/{role}/bias"] = qkv_bias[rows].reshape(num_heads, head_dim)
        out[prefix + "MultiHeadDotProductAttention_1/out/kernel"] = (
            numpy[block + "attn.proj.weight"].reshape(embed_dim, num_heads, head_dim).transpose(1, 2, 0))
        out[prefix + "MultiHeadDotProductAttention_1/out/bias"] = numpy[block + "attn.proj.bias"]
        out[prefix + "LayerNorm_2/scale"] = numpy[block + "norm2.weight"]
        out[prefix + "LayerNorm_2/bias"] = numpy[block + "norm2.bias"]
        for dense, fc in ((0, "fc1"), (1, "fc2")):
            out[prefix + f"MlpBlock_3/Dense_{dense}/kernel"] = numpy[block + f"mlp.{fc}.weight"].T
            out[prefix + f"MlpBlock_3/Dense_{dense}/bias"] = numpy[block + f"mlp.{fc}.bias"]
    out["Transformer/encoder_norm/scale"] = numpy["norm.weight"]
    out["Transformer/encoder_norm/bias"] = numpy["norm.bias"]
    if "head.weight" in numpy:
        out["head/kernel"] = numpy["head.weight"].T
        out["head/bias"] = numpy["head.bias"]
    return {name: np.ascontiguousarray(value) for name, value in out.items()}


# (g) hybrids (paper Section 3.1): timm's own ResNetV2 (vision_transformer_hybrid._resnetv2: StdConv2dSame
# with eps 1e-8, GroupNorm eps 1e-5) feeding its HybridEmbed. The stem alone (the tiny hybrid's
# backbone) and one stage of one unit (a projection shortcut and a bottleneck); R26/R50 widths start
# at 256 channels, too large for fixtures, and repeat the same unit.
HYBRIDS = {
    "timm_hybrid_stem": dict(layers=(), img_size=32, patch_size=2),
    "timm_hybrid_stage": dict(layers=(1,), img_size=32, patch_size=2),
}
HYBRID_VIT = dict(embed_dim=32, depth=2, num_heads=4, num_classes=10, global_pool="token")


def build_hybrid(layers, img_size, patch_size):
    from functools import partial

    from timm.layers import HybridEmbed
    from timm.models.vision_transformer_hybrid import _resnetv2

    embed_layer = partial(HybridEmbed, backbone=_resnetv2(layers=layers))
    return VisionTransformer(img_size=img_size, patch_size=patch_size, embed_layer=embed_layer, **HYBRID_VIT).eval()


@torch.no_grad()
def perturb_hybrid(model, generator):
    """As `perturb`, and the backbone's convolutions scaled to std ~1e-4, where the epsilon of
    the weight standardisation decides the standardised weights (timm: inside the square root,
    1e-8; vit_jax: added to the std, 1e-5), so that its style shows in the logits."""
    perturb(model, generator)
    for name, parameter in model.named_parameters():
        if "backbone" in name and parameter.ndim == 4:
            parameter.mul_(1e-3)


@torch.no_grad()
def hybrid_cases(args, generator, references, configs):
    from timm.models.vision_transformer_hybrid import checkpoint_filter_fn as hybrid_filter_fn

    for case, arguments in HYBRIDS.items():
        model = build_hybrid(**arguments)
        perturb_hybrid(model, generator)
        size = arguments["img_size"]
        images = torch.randn(BATCH, 3, size, size, generator=generator)
        references[f"{case}/input"] = images.numpy()
        references[f"{case}/logits"] = model(images).numpy()
        state_dict = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
        path = os.path.join(args.out, f"{case}.safetensors")
        safetensors.torch.save_file(state_dict, path, metadata={"format": "pt"})
        os.chmod(path, 0o644)
        eps_effect = standardisation_effect(model, images, references[f"{case}/logits"])
        configs[case] = dict(image_size=size, patch_size=arguments["patch_size"], backbone_layers=list(arguments["layers"]),
                             embed_dim=HYBRID_VIT["embed_dim"], depth=HYBRID_VIT["depth"],
                             num_heads=HYBRID_VIT["num_heads"], num_classes=HYBRID_VIT["num_classes"], pool="cls",
                             weight_standardisation_eps_1e5_moves_logits_by=eps_effect)
        print(f"{case}: backbone {arguments['layers'] or 'stem only'}, grid {model.patch_embed.grid_size}; "
              f"StdConv eps 1e-5 instead of 1e-8 moves the logits by {eps_effect:.2e}")
    # the one-stage hybrid at 48x48: timm's filter resamples the position embedding, 4x4 -> 6x6
    source = "timm_hybrid_stage"
    model = build_hybrid(**dict(HYBRIDS[source], img_size=48))
    state = safetensors.torch.load_file(os.path.join(args.out, f"{source}.safetensors"))
    model.load_state_dict(hybrid_filter_fn(state, model), strict=True)
    images = torch.randn(BATCH, 3, 48, 48, generator=generator)
    references["timm_hybrid_resample/input"] = images.numpy()
    references["timm_hybrid_resample/logits"] = model(images).numpy()
    configs["timm_hybrid_resample"] = dict(configs[source], image_size=48, weights=source)
    print(f"timm_hybrid_resample: {source} at 48x48, grid 4x4 -> {model.patch_embed.grid_size}")


@torch.no_grad()
def standardisation_effect(model, images, logits):
    convs = [module for module in model.modules() if hasattr(module, "same_pad") and hasattr(module, "eps")]
    for conv in convs:
        conv.eps = 1e-5
    moved = max_diff(model(images), torch.from_numpy(logits))
    for conv in convs:
        conv.eps = 1e-8
    return moved


def max_diff(a, b):
    return float((a - b).abs().max())


@torch.no_grad()
def make(args):
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    references, configs, models = {}, {}, {}

    for case, arguments in CASES.items():
        model = build(arguments)
        perturb(model, generator)
        models[case] = model
        size = arguments["img_size"]
        images = torch.randn(BATCH, 3, size, size, generator=generator)
        logits = model(images)
        references[f"{case}/input"] = images.numpy()
        references[f"{case}/logits"] = logits.numpy()
        configs[case] = dict(image_size=size, patch_size=arguments["patch_size"], embed_dim=arguments["embed_dim"],
                             depth=arguments["depth"], num_heads=arguments["num_heads"],
                             num_classes=arguments["num_classes"], pool=POOL_NAMES[arguments["global_pool"]])
        state_dict = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
        weights_path = os.path.join(args.out, f"{case}.safetensors")
        safetensors.torch.save_file(state_dict, weights_path, metadata={"format": "pt"})
        os.chmod(weights_path, 0o644)  # safetensors creates it owner-only
        if arguments["global_pool"] == "avg":
            # The JAX layout has no fc_norm (JAX GAP models normalise before pooling, and timm's
            # _load_weights has no mapping for it), so this case is recorded in timm naming only.
            print(f"{case}: max |logit| {float(logits.abs().max()):.3f}; no JAX npz (no fc_norm in that layout)")
            continue
        jax_path = os.path.join(args.out, f"{case}.npz")
        np.savez(jax_path, **timm_to_jax(state_dict, arguments["num_heads"]))
        # proof that the JAX layout is right: timm's own npz loader reads it back to the same logits
        reloaded = build(arguments)
        _load_weights(reloaded, jax_path)
        difference = max_diff(reloaded(images), logits)
        assert difference < 1e-5, f"{case}: timm's _load_weights of our npz differs by {difference}"
        print(f"{case}: max |logit| {float(logits.abs().max()):.3f}; npz reloaded by timm: max diff {difference:.2e}")

    # (d) position-embedding resampling: timm_vit_cls's weights in timm models built at another
    # resolution; timm resamples the position embedding itself (checkpoint_filter_fn, which calls
    # resample_abs_pos_embed: bicubic, antialias=True, align_corners=False).
    source = "timm_vit_cls"
    source_state = models[source].state_dict()
    for tag, size in (("up", 48), ("down", 16)):
        arguments = dict(CASES[source], img_size=size)
        model = build(arguments)
        model.load_state_dict(checkpoint_filter_fn(dict(source_state), model), strict=True)
        images = torch.randn(BATCH, 3, size, size, generator=generator)
        grid = size // arguments["patch_size"]
        direct = resample_abs_pos_embed(source_state["pos_embed"], new_size=[grid, grid], num_prefix_tokens=1)
        assert max_diff(direct, model.pos_embed) == 0.0
        case = f"resample_{tag}"
        references[f"{case}/input"] = images.numpy()
        references[f"{case}/logits"] = model(images).numpy()
        references[f"{case}/pos_embed"] = model.pos_embed.numpy()
        references[f"{case}/pos_embed_no_antialias"] = resample_abs_pos_embed(
            source_state["pos_embed"], new_size=[grid, grid], num_prefix_tokens=1, antialias=False).numpy()
        configs[case] = dict(configs[source], image_size=size, weights=source)
        print(f"{case}: {source} at {size}x{size}, grid 4x4 -> {grid}x{grid}")

    # (e) a JAX in21k-style checkpoint with the paper's pre-training head: pre_logits (Linear +
    # tanh, D -> R) and a head reading R features. timm no longer builds that layer, so the
    # reference is timm's pooled features put through the two layers in numpy (float64).
    model = models[source]
    jax_weights = timm_to_jax(model.state_dict(), CASES[source]["num_heads"])
    embed_dim = CASES[source]["embed_dim"]
    pre_kernel = (torch.randn(embed_dim, PRE_LOGITS_SIZE, generator=generator) * 0.3).numpy()
    pre_bias = (torch.randn(PRE_LOGITS_SIZE, generator=generator) * 0.1).numpy()
    head_kernel = (torch.randn(PRE_LOGITS_SIZE, PRE_LOGITS_CLASSES, generator=generator) * 0.3).numpy()
    head_bias = (torch.randn(PRE_LOGITS_CLASSES, generator=generator) * 0.1).numpy()
    jax_weights.update({"pre_logits/kernel": pre_kernel, "pre_logits/bias": pre_bias,
                        "head/kernel": head_kernel, "head/bias": head_bias})
    np.savez(os.path.join(args.out, "jax_vit_prelogits.npz"), **jax_weights)
    images = torch.from_numpy(references[f"{source}/input"])
    pooled = model.forward_head(model.forward_features(images), pre_logits=True).numpy().astype("float64")
    logits = np.tanh(pooled @ pre_kernel + pre_bias) @ head_kernel + head_bias
    references["jax_vit_prelogits/input"] = references[f"{source}/input"]
    references["jax_vit_prelogits/logits"] = logits.astype("float32")
    configs["jax_vit_prelogits"] = dict(configs[source], num_classes=PRE_LOGITS_CLASSES,
                                        representation_size=PRE_LOGITS_SIZE)
    print(f"jax_vit_prelogits: pre_logits {embed_dim} -> {PRE_LOGITS_SIZE}, head -> {PRE_LOGITS_CLASSES}")

    # (f) timm's own reading of the JAX layout at another resolution: _load_weights resamples
    # bilinear without antialias and computes with exact GELU
    arguments = dict(CASES[source], img_size=48)
    model = build(arguments)
    _load_weights(model, os.path.join(args.out, f"{source}.npz"))
    images = torch.randn(BATCH, 3, 48, 48, generator=generator)
    references["resample_up_npz/input"] = images.numpy()
    references["resample_up_npz/logits"] = model(images).numpy()
    references["resample_up_npz/pos_embed"] = model.pos_embed.numpy()
    configs["resample_up_npz"] = dict(configs[source], image_size=48, weights=source)
    print(f"resample_up_npz: {source}.npz read by timm's _load_weights at 48x48 (bilinear)")

    hybrid_cases(args, generator, references, configs)
    np.savez(os.path.join(args.out, "timm_reference.npz"), **references)
    versions = dict(torch=torch.__version__, timm=timm.__version__, numpy=np.__version__,
                    safetensors=safetensors.__version__, python=sys.version.split()[0], seed=args.seed)
    with open(os.path.join(args.out, "timm_reference.json"), "w") as handle:
        json.dump(dict(versions=versions, cases=configs), handle, indent=1, sort_keys=True)
        handle.write("\n")
    total = sum(os.path.getsize(os.path.join(args.out, name)) for name in os.listdir(args.out))
    print(f"wrote {args.out} ({total / 1e6:.2f} MB)")
    return 0


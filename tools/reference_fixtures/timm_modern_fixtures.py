"""timm's ViT families of today (DeiT-III, distilled DeiT, DINOv2 with and without registers,
CLIP and CLIP QuickGELU image towers, SigLIP with its MAP head and GAP, the GAP ViTs), recorded
with timm's own code for later Paddle-side tests (run with PyTorch + timm, not Paddle).

    /work/refvenv/bin/python tools/make_reference_fixtures.py timm_modern [--out tests/fixtures]

Writes:
- ``timm_modern_registry.json``: every model name timm registers under ``deit3_*``,
  ``deit_*_distilled_*``, ``vit_*_dinov2*``, ``vit_*_clip_*``, ``vit_*_siglip_*`` and
  ``vit_*_gap_*``, built by ``timm.create_model(name)`` with timm's defaults on the meta device
  (no weights: structure, shapes and parameter counts only) and described: class, parameter
  count, sizes, tokens, norms and their epsilons, activation, layer scale (its init value is
  ``LayerScale.init_values``, what fills ``gamma``; checked against the gamma data of a real
  build of one model per family), pooling, MAP head, heads, the default ``pretrained_cfg`` and
  the pretrained tags. Names of another class (timm's ``Eva`` for the ``*_rope_*`` GAP models)
  are listed under ``skipped`` with their class and parameter count only.
- ``timm_modern/<architecture>/``: for ten architectures, a Hub folder written by timm's own
  ``save_for_hf`` (``config.json`` + ``model.safetensors``) of the architecture built small
  through ``model_args`` (``ARCHITECTURES``), every tensor perturbed
  (``timm_hub_fixtures.perturb``: 0.1, q/k/v weights 0.25; 0.4 more on every ``mlp.fc1.weight``
  and more on the output layer, see ``output_layer``, so that exact and tanh GELU give outputs >
  1e-3 apart), layer-scale gammas set to 0.5 + 0.1 noise so that the blocks matter, and the
  embedding side (patch-embedding convolution, position embedding, class / register / distillation
  tokens) scaled down by 1e-3 so that the first LayerNorm sees variances near its epsilon. Its
  ``pretrained_cfg`` is the architecture's own default (what ``save_for_hf`` keeps of
  ``model.pretrained_cfg``: mean, std, interpolation, crop_pct, tag) with the small input size.
- ``timm_modern_reference.npz`` / ``.json``: per architecture (keys ``<architecture>/...``) timm's
  outputs of the folder read back by ``timm.create_model("local-dir:...", pretrained=True)``:
  ``input`` (a seeded batch of 2), ``logits`` (``model(x)``; the distilled model's mean of its two
  heads), ``features`` (``forward_features``), ``pre_logits``, for the distilled model ``head``
  and ``head_dist`` apart; ``intermediates_nchw`` (and ``intermediates_prefix`` where there are
  prefix tokens: class, distillation, registers) of ``forward_intermediates(x, indices=2,
  norm=True, output_fmt="NCHW", return_prefix_tokens=True)``, stacked over the two blocks;
  ``dynamic_input`` / ``dynamic_logits``: the folder built with ``dynamic_img_size=True`` on one
  image of another size (``DYNAMIC_SIZE``: 40x24 for patch 8, 56x28 for the small DINOv2s, 42x56
  for the giant; position embeddings resampled by timm, bicubic with antialias); and
  scikit-learn's ``china.jpg`` and its variants (``timm_hub_fixtures.photos``) through timm's own
  ``resolve_data_config({}, model=loaded)`` + ``create_transform``: ``photo/<name>/probabilities``
  (softmax of the logits; and the ``logits``) for models with a head, ``photo/<name>/features`` (the model output) for
  ``num_classes`` 0. The ``.json`` records per architecture the model_args, the folder's
  ``config.json``, the data config and transform, the shapes, and how far the LayerNorm epsilon
  (1e-5 <-> 1e-6), the activation (exact / tanh GELU / QuickGELU), the SwiGLU gate order, the
  dynamic resampling's antialias and the MAP head's attention path move the outputs (each checked
  > 1e-3 where it has to matter), and timm's computation redone by hand (``written_out``).
"""
import contextlib
import functools
import json
import os
import shutil

import torch

from common import folder_size, max_diff, write_reference  # tools/reference_fixtures is on sys.path
from timm_hub_fixtures import perturb, photos  # timm's import, torchvision's op schemas first
from torch_reference import import_timm  # tools/ is on sys.path when run as a script

import_timm()

import PIL  # noqa: E402
import safetensors  # noqa: E402
import sklearn  # noqa: E402
import timm  # noqa: E402
import timm.models.deit  # noqa: E402
import timm.models.vision_transformer  # noqa: E402
from PIL import Image  # noqa: E402
from timm.data import create_transform, resolve_data_config  # noqa: E402
from timm.layers import LayerScale, QuickGELU  # noqa: E402
from timm.layers.mlp import GluMlp  # noqa: E402
from timm.models import save_for_hf  # noqa: E402
from timm.models.vision_transformer import Block, VisionTransformer  # noqa: E402

FAMILIES = {"deit3": "deit3_*", "deit_distilled": "deit_*_distilled_*", "dinov2": "vit_*_dinov2*",
            "clip": "vit_*_clip_*", "siglip": "vit_*_siglip_*", "gap": "vit_*_gap_*"}
# one name per family with layer scale built for real: LayerScale.init_values against the gamma data
GAMMA_CHECK = ("deit3_small_patch16_224", "vit_small_patch14_dinov2", "vit_medium_patch16_gap_256")

SMALL8 = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4)
SMALL14 = dict(img_size=42, patch_size=14, embed_dim=32, depth=2, num_heads=4)
ARCHITECTURES = {
    "deit3_small_patch16_224": dict(SMALL8, num_classes=5),
    "deit_small_distilled_patch16_224": dict(SMALL8, num_classes=5),
    "vit_small_patch14_dinov2": dict(SMALL14),  # its default num_classes 0
    "vit_small_patch14_reg4_dinov2": dict(SMALL14),
    "vit_giant_patch14_dinov2": dict(img_size=28, embed_dim=32, depth=2, num_heads=4),  # keeps SwiGLUPacked
    "vit_base_patch16_clip_224": dict(SMALL8, num_classes=16),
    "vit_base_patch16_clip_quickgelu_224": dict(SMALL8, num_classes=16),
    "vit_base_patch16_siglip_224": dict(SMALL8, num_classes=0),
    "vit_base_patch16_siglip_gap_224": dict(SMALL8, num_classes=0),
    "vit_medium_patch16_gap_256": dict(SMALL8, num_classes=5),
}
# (height, width) of the dynamic_img_size case: both grid sides change, one up, one down where
# the grid allows (patch 8: 4x4 -> 5x3; small DINOv2: 3x3 -> 4x2; the giant at 28: 2x2 -> 3x4)
DYNAMIC_SIZE = {8: (40, 24), 14: (56, 28), "vit_giant_patch14_dinov2": (42, 56)}
BATCH = 2
DYNAMIC_BATCH = 1  # the fixtures stay small
FC1_EXTRA = 0.4  # added noise on mlp.fc1.weight (blocks and MAP head)
EMBEDDING_SIDE = ("patch_embed.", "pos_embed", "cls_token", "reg_token", "dist_token")
FOLDER = "timm_modern"


def plain(value):
    """JSON-ready: tuples as lists, torch.Size as a list."""
    if isinstance(value, (tuple, list, torch.Size)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    return value


def norm_info(module):
    return None if module is None else dict(type=type(module).__name__, eps=getattr(module, "eps", None))


def act_info(module):
    info = dict(type=type(module).__name__)
    if isinstance(module, torch.nn.GELU):
        info["approximate"] = module.approximate
    return info


def linear_shape(module):
    return list(module.weight.shape) if isinstance(module, torch.nn.Linear) else None


# ---------------------------------------------------------------------------------------------
# Output 1: the registry


def describe(name):
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    param_count = sum(parameter.numel() for parameter in model.parameters())
    if not isinstance(model, VisionTransformer):
        return None, dict(cls=type(model).__name__, module=type(model).__module__, param_count=param_count)
    block = model.blocks[0]
    record = dict(
        cls=type(model).__name__, module=type(model).__module__, param_count=param_count,
        num_classes=model.num_classes, img_size=list(model.patch_embed.img_size),
        patch_size=list(model.patch_embed.patch_size), patch_embed_bias=model.patch_embed.proj.bias is not None,
        embed_dim=model.embed_dim, depth=len(model.blocks), block_cls=type(block).__name__,
        has_class_token=model.cls_token is not None, dist_token=getattr(model, "dist_token", None) is not None,
        reg_tokens=getattr(model, "num_reg_tokens", 0) or 0, num_prefix_tokens=model.num_prefix_tokens,
        no_embed_class=model.no_embed_class,
        pos_embed=None if model.pos_embed is None else list(model.pos_embed.shape),
        norm_pre=norm_info(model.norm_pre), norm_pre_is_layernorm=isinstance(model.norm_pre, torch.nn.LayerNorm),
        norm=norm_info(model.norm), fc_norm=norm_info(model.fc_norm), global_pool=model.global_pool,
        pool_include_prefix=model.pool_include_prefix,
        head=linear_shape(model.head), head_dist=linear_shape(getattr(model, "head_dist", None)),
        attn_pool=None)
    mlp = None
    if isinstance(block, Block):
        attn, mlp = block.attn, block.mlp
        layer_scale = block.ls1
        record.update(
            num_heads=attn.num_heads, attn_cls=type(attn).__name__, qkv_bias=attn.qkv.bias is not None,
            qk_norm=type(attn.q_norm).__name__, attn_out_norm=type(attn.norm).__name__,
            attn_gate=getattr(attn, "gate", None) is not None, attn_fused=bool(attn.fused_attn),
            mlp_cls=type(mlp).__name__, mlp_hidden=mlp.fc1.out_features, mlp_fc2_in=mlp.fc2.in_features,
            mlp_bias=mlp.fc1.bias is not None, mlp_norm=type(mlp.norm).__name__, act=act_info(mlp.act),
            norm1=norm_info(block.norm1), norm2=norm_info(block.norm2))
    else:  # ParallelScalingBlock / DiffParallelScalingBlock: one in_norm, one in_proj (MLP fc1 + q, k, v)
        layer_scale = block.ls
        record.update(
            num_heads=block.num_heads, attn_cls=None, qkv_bias=block.in_proj.bias is not None,
            qk_norm=type(block.q_norm).__name__, attn_fused=bool(block.fused_attn),
            mlp_cls=None, mlp_hidden=block.in_split[0], act=act_info(block.mlp_act),
            in_proj=linear_shape(block.in_proj), in_split=list(block.in_split),
            block_children=[name for name, _ in block.named_children()],
            norm1=norm_info(block.in_norm), norm2=None)
    is_scaled = isinstance(layer_scale, LayerScale)
    record.update(layer_scale=is_scaled, layer_scale_init=layer_scale.init_values if is_scaled else None,
                  layer_scale_init_source="LayerScale.init_values (meta build)" if is_scaled else None)
    if isinstance(mlp, GluMlp):
        record["glu_gate_last"] = mlp.gate_last
    if model.attn_pool is not None:
        pool = model.attn_pool
        record["attn_pool"] = dict(
            cls=type(pool).__name__, latent=list(pool.latent.shape), latent_len=pool.latent_len,
            num_heads=pool.num_heads, q=linear_shape(pool.q), kv=linear_shape(pool.kv),
            qkv_bias=pool.kv.bias is not None, q_norm=type(pool.q_norm).__name__,
            pos_embed=pool.pos_embed is not None, proj=linear_shape(pool.proj),
            mlp_hidden=pool.mlp.fc1.out_features if pool.mlp is not None else None,
            act=act_info(pool.mlp.act) if pool.mlp is not None else None,
            norm=norm_info(pool.norm), pool=pool.pool, fused_attn=bool(pool.fused_attn), scale=pool.scale)
    cfg = model.pretrained_cfg
    record["pretrained_cfg"] = plain({key: cfg.get(key) for key in (
        "input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "num_classes", "tag")})
    record["pretrained_tags"] = sorted(tag.split(".", 1)[1] for tag in timm.list_pretrained(name + ".*"))
    return record, None


def check_gamma(name, record):
    """The gamma data of a real build equals LayerScale.init_values (what the meta records hold)."""
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False)
    values = {float(v) for block in model.blocks for ls in (block.ls1, block.ls2) for v in ls.gamma.detach().unique()}
    assert values == {float(torch.tensor(record["layer_scale_init"], dtype=torch.float32))}, (name, values)
    return sorted(values)


def make_registry(out):
    families, models, skipped, gamma_checks = {}, {}, {}, {}
    for family, pattern in FAMILIES.items():
        families[family] = dict(pattern=pattern, names=timm.list_models(pattern))
        for name in families[family]["names"]:
            if name in models or name in skipped:
                continue
            record, other = describe(name)
            if record is None:
                skipped[name] = other
            else:
                models[name] = record
    for name in GAMMA_CHECK:
        gamma_checks[name] = check_gamma(name, models[name])
    registry = dict(
        versions=dict(timm=timm.__version__, torch=torch.__version__),
        how=("timm.create_model(name, pretrained=False) on torch.device('meta') (timm's defaults: num_classes "
             "from its default pretrained_cfg); param_count = sum of numel of the parameters; layer_scale_init = "
             "LayerScale.init_values (the constant reset_parameters fills gamma with), checked against the gamma "
             "data of real builds in gamma_checks; models not VisionTransformer (or a subclass) are in skipped"),
        families=families, models=models, skipped=skipped, gamma_checks=gamma_checks)
    path = os.path.join(out, "timm_modern_registry.json")
    with open(path, "w") as handle:
        json.dump(registry, handle, indent=1, sort_keys=True)
        handle.write("\n")
    others = ", ".join("{} ({})".format(name, other["cls"]) for name, other in skipped.items())
    print(f"{path}: {len(models)} VisionTransformer names, {len(skipped)} skipped ({others}), "
          f"{os.path.getsize(path)} bytes")
    return registry


# ---------------------------------------------------------------------------------------------
# Output 2: small Hub folders and timm's outputs on them


def output_layer(model):
    """{name: added noise} of the weights the output is last scaled by: the head(s) (as the
    torchvision fixtures' heads); with no head, the MAP head's last MLP layer (which adds the
    MLP's output to the pooled token), or else the final norm's scale."""
    if model.num_classes:
        return {"head.weight": 2.0, "head_dist.weight": 2.0}
    return {"attn_pool.mlp.fc2.weight": 0.5} if model.attn_pool is not None else {"norm.weight": 5.0}


@torch.no_grad()
def randomise(model, generator):
    """timm_hub's perturbation, more on the MLPs' first layers (large pre-activations, where exact
    and tanh GELU part) and on the output layer (that difference carried to the outputs above
    1e-3), layer-scale gammas 0.5 + 0.1 noise, the embedding side * 1e-3."""
    perturb(model, generator)
    for name, parameter in model.named_parameters():
        if name.endswith("mlp.fc1.weight"):
            parameter.add_(torch.randn(parameter.shape, generator=generator) * FC1_EXTRA)
        if name in output_layer(model):
            parameter.add_(torch.randn(parameter.shape, generator=generator) * output_layer(model)[name])
        if name.endswith((".ls1.gamma", ".ls2.gamma")):
            parameter.copy_(0.5 + torch.randn(parameter.shape, generator=generator) * 0.1)
        if name.startswith(EMBEDDING_SIDE):
            parameter.mul_(1e-3)


@contextlib.contextmanager
def swapped_modules(model, select, make):
    """Every submodule attribute `select(module)` is true for replaced by `make(module)`, then put back."""
    replaced = []
    for parent in list(model.modules()):
        for attr, child in list(parent.named_children()):
            if select(child):
                replaced.append((parent, attr, child))
                setattr(parent, attr, make(child))
    try:
        yield len(replaced)
    finally:
        for parent, attr, child in replaced:
            setattr(parent, attr, child)


@contextlib.contextmanager
def set_attributes(modules, **values):
    saved = [(module, {key: getattr(module, key) for key in values}) for module in modules]
    for module, _ in saved:
        for key, value in values.items():
            setattr(module, key, value)
    try:
        yield len(saved)
    finally:
        for module, old in saved:
            for key, value in old.items():
                setattr(module, key, value)


@contextlib.contextmanager
def no_antialias_resampling():
    """timm's dynamic-size position-embedding resampling without antialias (bicubic a=-0.75 kernel)."""
    original = timm.models.vision_transformer.resample_abs_pos_embed
    patched = functools.partial(original, antialias=False)
    timm.models.vision_transformer.resample_abs_pos_embed = patched
    timm.models.deit.resample_abs_pos_embed = patched
    try:
        yield
    finally:
        timm.models.vision_transformer.resample_abs_pos_embed = original
        timm.models.deit.resample_abs_pos_embed = original


class _Gelu(torch.nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate=self.approximate)


@torch.no_grad()
def sensitivities(model, images, reference, dynamic, dynamic_images, dynamic_reference):
    """How far timm's output moves under each change that a Paddle-side loader must get right."""
    moved, must_matter = {}, []
    layer_norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    epsilons = sorted({m.eps for m in layer_norms})
    assert len(epsilons) == 1, epsilons
    other = 1e-6 if epsilons[0] == 1e-5 else 1e-5
    with set_attributes(layer_norms, eps=other):
        key = f"layernorm_eps_{other:g}_instead_of_{epsilons[0]:g}"
        moved[key] = max_diff(model(images), reference)
        must_matter.append(key)
    acts = {type(block.mlp.act) for block in model.blocks}
    assert len(acts) == 1, acts
    act = acts.pop()

    def is_act(module):
        return type(module) is act and module is not None

    if act is torch.nn.GELU:
        for label, new in (("tanh_gelu", lambda m: _Gelu("tanh")), ("quick_gelu", lambda m: QuickGELU())):
            with swapped_modules(model, is_act, new):
                moved[f"{label}_instead_of_exact_gelu"] = max_diff(model(images), reference)
        must_matter.append("tanh_gelu_instead_of_exact_gelu")
        must_matter.append("quick_gelu_instead_of_exact_gelu")
    elif act is QuickGELU:
        for label, new in (("exact_gelu", lambda m: _Gelu("none")), ("tanh_gelu", lambda m: _Gelu("tanh"))):
            with swapped_modules(model, is_act, new):
                moved[f"{label}_instead_of_quick_gelu"] = max_diff(model(images), reference)
            must_matter.append(f"{label}_instead_of_quick_gelu")
    glus = [block.mlp for block in model.blocks if isinstance(block.mlp, GluMlp)]
    if glus:
        with set_attributes(glus, gate_last=not glus[0].gate_last):
            moved["swiglu_other_half_gated"] = max_diff(model(images), reference)
            must_matter.append("swiglu_other_half_gated")
    attentions = [m for m in model.modules() if hasattr(m, "fused_attn")]
    with set_attributes(attentions, fused_attn=False):  # the explicit q * head_dim**-0.5 path
        moved["unfused_attention_everywhere"] = max_diff(model(images), reference)
    if model.attn_pool is not None:
        with set_attributes([model.attn_pool.norm], eps=other):  # its input is O(1): recorded, not required
            moved[f"map_norm_eps_{other:g}"] = max_diff(model(images), reference)
        latent = model.attn_pool.latent
        saved = latent.detach().clone()
        latent.zero_()
        moved["map_latent_zeroed"] = max_diff(model(images), reference)
        must_matter.append("map_latent_zeroed")
        latent.copy_(saved)
    with no_antialias_resampling():
        moved["dynamic_resample_without_antialias"] = max_diff(dynamic(dynamic_images), dynamic_reference)
        must_matter.append("dynamic_resample_without_antialias")
    assert max_diff(model(images), reference) == 0.0  # everything put back
    too_small = {key: moved[key] for key in must_matter if not moved[key] > 1e-3}
    assert not too_small, f"these only move the output by {too_small}"
    return dict(moves_output_by=moved, checked_above_1e3=sorted(must_matter))


@torch.no_grad()
def written_out(model, images, features, pre_logits):
    """timm's computation redone by hand (the layouts a Paddle port must follow), max |difference|."""
    checks = {}
    # tokens: [class, (distillation | registers), patches]; pos_embed covers the prefix only
    # without no_embed_class, in that order
    patches = model.patch_embed(images)
    prefix = [t.expand(len(images), -1, -1) for t in (model.cls_token, getattr(model, "dist_token", None),
                                                      model.reg_token) if t is not None]
    if model.no_embed_class:
        tokens = torch.cat(prefix + [patches + model.pos_embed], 1)
    else:
        tokens = torch.cat(prefix + [patches], 1) + model.pos_embed
    checks["embedding"] = max_diff(model._pos_embed(patches), tokens)
    block = model.blocks[0]
    if isinstance(block.mlp, GluMlp):  # SwiGLUPacked: fc1 rows [0, h) gated by SiLU, times rows [h, 2h)
        x = block.norm2(tokens)
        hidden = block.mlp.fc1(x)
        half = hidden.shape[-1] // 2
        manual = block.mlp.fc2(torch.nn.functional.silu(hidden[..., :half]) * hidden[..., half:])
        checks["swiglu_silu_first_half_times_second_half"] = max_diff(block.mlp(x), manual)
    if model.attn_pool is not None:  # MAP: one latent query; kv rows [0, D) keys, [D, 2D) values
        pool, (batch, length, dim) = model.attn_pool, features.shape
        heads, head_dim = pool.num_heads, dim // pool.num_heads
        q = pool.q(pool.latent).reshape(1, 1, heads, head_dim).transpose(1, 2)
        k, v = pool.kv(features).reshape(batch, length, 2, heads, head_dim).permute(2, 0, 3, 1, 4)
        attention = (q * head_dim ** -0.5 @ k.transpose(-2, -1)).softmax(-1)
        x = pool.proj((attention @ v).transpose(1, 2).reshape(batch, 1, dim))
        x = x + pool.mlp(pool.norm(x))
        checks["map_latent_attention_then_residual_mlp"] = max_diff(x[:, 0], pre_logits)
    if hasattr(model, "dist_token"):
        checks["distilled_pre_logits_mean_of_two_tokens"] = max_diff((features[:, 0] + features[:, 1]) / 2,
                                                                     pre_logits)
    elif model.global_pool == "avg":  # over the patch tokens of the normed features, no fc_norm here
        pooled = model.fc_norm(features[:, model.num_prefix_tokens:].mean(1))
        checks["avg_over_patch_tokens"] = max_diff(pooled, pre_logits)
    elif model.global_pool == "token":
        checks["class_token"] = max_diff(model.fc_norm(features[:, 0]), pre_logits)
    for what, diff in checks.items():
        assert diff < 1e-5, (what, diff)
    return checks


@torch.no_grad()
def make_architecture(arch, model_args, index, out, seed, references, scratch):
    torch.manual_seed(seed + index)
    generator = torch.Generator().manual_seed(seed + index)
    model = timm.create_model(arch, pretrained=False, **model_args).eval()
    randomise(model, generator)
    folder = os.path.join(out, FOLDER, arch)
    shutil.rmtree(folder, ignore_errors=True)
    save_for_hf(model, folder, safe_serialization=True, model_config={})
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)
    with open(os.path.join(folder, "config.json")) as stream:
        config = json.load(stream)

    local = f"local-dir:{os.path.abspath(folder)}"
    loaded = timm.create_model(local, pretrained=True).eval()
    assert type(loaded) is type(model)
    size = model_args["img_size"]
    images = torch.randn(BATCH, 3, size, size, generator=generator)
    logits = loaded(images)
    assert max_diff(model(images), logits) == 0.0
    features = loaded.forward_features(images)
    key = functools.partial("{}/{}".format, arch)
    refs = {key("input"): images, key("logits"): logits, key("features"): features,
            key("pre_logits"): loaded.forward_head(features, pre_logits=True)}
    if arch.startswith("deit_") and "distilled" in arch:
        refs[key("head")] = loaded.head(features[:, 0])
        refs[key("head_dist")] = loaded.head_dist(features[:, 1])
        assert max_diff((refs[key("head")] + refs[key("head_dist")]) / 2, logits) == 0.0
    final, intermediates = loaded.forward_intermediates(images, indices=2, norm=True, output_fmt="NCHW",
                                                        return_prefix_tokens=True)
    assert max_diff(final, features) == 0.0
    if loaded.num_prefix_tokens:
        refs[key("intermediates_nchw")] = torch.stack([spatial for spatial, _ in intermediates])
        refs[key("intermediates_prefix")] = torch.stack([prefix for _, prefix in intermediates])
    else:
        refs[key("intermediates_nchw")] = torch.stack(intermediates)

    height, width = DYNAMIC_SIZE.get(arch, DYNAMIC_SIZE[loaded.patch_embed.patch_size[0]])
    dynamic = timm.create_model(local, pretrained=True, dynamic_img_size=True).eval()
    assert max_diff(dynamic(images), logits) < 1e-5  # same weights; the NHWC path at the folder's own size
    dynamic_images = torch.randn(DYNAMIC_BATCH, 3, height, width, generator=generator)
    refs[key("dynamic_input")] = dynamic_images
    refs[key("dynamic_logits")] = dynamic(dynamic_images)

    data_config = resolve_data_config({}, model=loaded)
    transform = create_transform(**data_config)
    photo_names = []
    for name, path in photos(scratch).items():
        with Image.open(path) as image:
            pixels = transform(image.convert("RGB")).unsqueeze(0)
        output = loaded(pixels)
        if loaded.num_classes:  # the logits too: where the softmax saturates they still tell
            refs[key(f"photo/{name}/probabilities")] = output.softmax(-1)[0]
            refs[key(f"photo/{name}/logits")] = output[0]
        else:
            refs[key(f"photo/{name}/features")] = output[0]
        photo_names.append(name)

    effects = sensitivities(loaded, images, logits, dynamic, dynamic_images, refs[key("dynamic_logits")])
    checks = written_out(loaded, images, features, refs[key("pre_logits")])
    references.update({name: value.numpy() for name, value in refs.items()})
    weights = safetensors.safe_open(os.path.join(folder, "model.safetensors"), "pt")
    case = dict(
        architecture=arch, cls=type(loaded).__name__, model_args=model_args, folder=f"{FOLDER}/{arch}",
        folder_bytes=folder_size(folder), config_json=config, data_config=plain(data_config),
        transform=repr(transform), photos=photo_names,
        shapes={name.split("/", 1)[1]: list(value.shape) for name, value in refs.items()},
        dynamic_size=[height, width], num_prefix_tokens=loaded.num_prefix_tokens,
        state_dict={name: list(weights.get_slice(name).get_shape()) for name in sorted(weights.keys())},
        forward_intermediates=dict(indices=2, norm=True, output_fmt="NCHW", return_prefix_tokens=True),
        written_out_max_diff=checks, **effects)
    print(f"{arch}: {case['folder_bytes']} bytes; output {list(logits.shape)} "
          f"max |.| {float(logits.abs().max()):.3f}; "
          + ", ".join(f"{k} {v:.2e}" for k, v in effects["moves_output_by"].items()))
    return case


def make(args):
    make_registry(args.out)
    references, cases = {}, {}
    shutil.rmtree(os.path.join(args.out, FOLDER), ignore_errors=True)
    scratch = os.path.join(args.out, ".timm_modern_photos")
    os.makedirs(scratch, exist_ok=True)
    try:
        for index, (arch, model_args) in enumerate(ARCHITECTURES.items()):
            cases[arch] = make_architecture(arch, model_args, index, args.out, args.seed, references, scratch)
    finally:
        shutil.rmtree(scratch)
    cases["_notes"] = dict(
        randomise="timm_hub_fixtures.perturb (0.1; attn.qkv.weight 0.25), then per parameter: + 0.4 noise on "
                  "*mlp.fc1.weight, + noise on the output layer (head.weight / head_dist.weight 2.0; with no head "
                  "attn_pool.mlp.fc2.weight 0.5, else norm.weight 5.0), ls1/ls2 gammas = 0.5 + 0.1 noise, "
                  "patch_embed.*, pos_embed, cls_token, reg_token, dist_token * 1e-3",
        seeds="per architecture i: torch.manual_seed(seed + i) before building, a Generator(seed + i) for the "
              "perturbation, then the input batch, then the dynamic batch",
        moves_output_by="max |change| of the model output (logits, or features for num_classes 0) on `input`; "
                        "dynamic_resample_without_antialias on `dynamic_input`")
    write_reference(args.out, "timm_modern", references, cases,
                    dict(torch=torch.__version__, timm=timm.__version__, pillow=PIL.__version__,
                         safetensors=safetensors.__version__, sklearn=sklearn.__version__, seed=args.seed))
    total = folder_size(os.path.join(args.out, FOLDER)) + sum(
        os.path.getsize(os.path.join(args.out, f"timm_modern_{n}")) for n in ("reference.npz", "reference.json",
                                                                              "registry.json"))
    print(f"timm_modern: {total} bytes in total")
    return 0

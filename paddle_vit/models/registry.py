"""Named model sizes (paper Table 1, plus the small sizes of DeiT/timm and the walkthrough's), and
the paper's hybrid ResNet + ViT models."""
from ..errors import ConfigError, close_matches
from .config import ViTConfig
from .registry_rope import NOT_BUILT as ROPE_NOT_BUILT, register_rope_models

# width D, depth, heads: paper Table 1 for Base/Large/Huge; Tiny and Small from DeiT, as in timm
SIZES = {
    "tiny": dict(embed_dim=192, depth=12, num_heads=3),
    "small": dict(embed_dim=384, depth=12, num_heads=6),
    "base": dict(embed_dim=768, depth=12, num_heads=12),
    "large": dict(embed_dim=1024, depth=24, num_heads=16),
    "huge": dict(embed_dim=1280, depth=32, num_heads=16),
}

_REGISTRY = {}


def register(name, **config):
    _REGISTRY[name] = ViTConfig(**config)


for _size in ("tiny", "small", "base", "large"):
    for _patch in (16, 32):
        for _resolution in (224, 384):
            register(f"vit_{_size}_patch{_patch}_{_resolution}", patch_size=_patch, image_size=_resolution,
                     **SIZES[_size])
register("vit_huge_patch14_224", patch_size=14, image_size=224, **SIZES["huge"])
# the paper's hybrids (Section 3.1, Table 5), under timm's names: a ResNet-v2 (resnet.py) whose
# feature map the patch Conv2D reads; "s16"/"s32" is the ResNet's stride, "p8" the patch on its map
HYBRIDS = {
    "vit_tiny_r_s16_p8": dict(backbone_layers=[], patch_size=8, **SIZES["tiny"]),
    "vit_small_r26_s32": dict(backbone_layers=[2, 2, 2, 2], patch_size=1, **SIZES["small"]),
    "vit_base_r50_s16": dict(backbone_layers=[3, 4, 9], patch_size=1, **SIZES["base"]),
    "vit_large_r50_s32": dict(backbone_layers=[3, 4, 6, 3], patch_size=1, **SIZES["large"]),
}
for _name, _hybrid in HYBRIDS.items():
    for _resolution in (224, 384):
        register(f"{_name}_{_resolution}", image_size=_resolution, **_hybrid)
# the walkthrough's own model: 224 input, 7 x 7 patches, 16-wide tokens, 5 layers, 10 classes,
# AdaptiveAvgPool1D over every token (the walkthrough does not say its head count; 4 heads of 4)
register("vit_walkthrough", image_size=224, patch_size=7, embed_dim=16, depth=5, num_heads=4,
         num_classes=10, pool="walkthrough")


# ---- today's ViTs, under timm 1.0's names and with its defaults (tests/test_modern_vits.py checks
# every name's parameter count against timm's) ------------------------------------------------------
# DeiT III (Touvron et al. 2022): layer scale, the position embedding on the patches only
DEIT3 = {"small": SIZES["small"], "medium": dict(embed_dim=512, depth=12, num_heads=8), "base": SIZES["base"],
         "large": SIZES["large"]}
for _size, _resolutions in (("small", (224, 384)), ("medium", (224,)), ("base", (224, 384)), ("large", (224, 384))):
    for _resolution in _resolutions:
        register(f"deit3_{_size}_patch16_{_resolution}", patch_size=16, image_size=_resolution, no_embed_class=True,
                 layer_scale=1e-6, **DEIT3[_size])
register("deit3_huge_patch14_224", patch_size=14, image_size=224, no_embed_class=True, layer_scale=1e-6,
         **SIZES["huge"])
# DeiT's distilled models: a distillation token with its own head, the two heads averaged
for _size, _resolution in (("tiny", 224), ("small", 224), ("base", 224), ("base", 384)):
    register(f"deit_{_size}_distilled_patch16_{_resolution}", patch_size=16, image_size=_resolution, distilled=True,
             **SIZES[_size])
# DINOv2 (Oquab et al. 2023), and with 4 registers (Darcet et al. 2024): 518 px, patch 14, layer
# scale, no head (the features are the product); giant has the SwiGLU MLP
DINOV2 = {"small": SIZES["small"], "base": SIZES["base"], "large": SIZES["large"],
          "giant": dict(embed_dim=1536, depth=40, num_heads=24, mlp="swiglu", mlp_ratio=2.66667 * 2)}
for _size, _dinov2 in DINOV2.items():
    register(f"vit_{_size}_patch14_dinov2", patch_size=14, image_size=518, layer_scale=1e-5, num_classes=0,
             **_dinov2)
    register(f"vit_{_size}_patch14_reg4_dinov2", patch_size=14, image_size=518, layer_scale=1e-5, num_classes=0,
             register_tokens=4, no_embed_class=True, **_dinov2)
# CLIP image towers (OpenAI, OpenCLIP, ...): a LayerNorm before the blocks, epsilon 1e-5; OpenAI's
# weights with QuickGELU. The head is the tower's projection where timm's default has it
# (its width: num_classes); name: (width, depth, heads, MLP ratio)
CLIP_SIZES = {"xsmall": (256, 10, 4, 4.0), "medium": (512, 12, 8, 4.0), "betwixt": (640, 12, 10, 4.0),
              "base": (768, 12, 12, 4.0), "base_plus": (896, 12, 14, 4.0), "large": (1024, 24, 16, 4.0),
              "huge": (1280, 32, 16, 4.0), "giant": (1408, 40, 16, 48 / 11), "gigantic": (1664, 48, 16, 64 / 13)}
CLIP = [  # (timm name, size, patch, image size, classes, QuickGELU)
    ("vit_xsmall_patch16_clip_224", "xsmall", 16, 224, 512, False),
    ("vit_medium_patch16_clip_224", "medium", 16, 224, 512, False),
    ("vit_medium_patch32_clip_224", "medium", 32, 224, 512, False),
    ("vit_betwixt_patch32_clip_224", "betwixt", 32, 224, 512, False),
    ("vit_base_patch16_clip_224", "base", 16, 224, 1000, False),
    ("vit_base_patch16_clip_384", "base", 16, 384, 1000, False),
    ("vit_base_patch16_clip_quickgelu_224", "base", 16, 224, 512, True),
    ("vit_base_patch16_plus_clip_240", "base_plus", 16, 240, 640, False),
    ("vit_base_patch32_clip_224", "base", 32, 224, 1000, False),
    ("vit_base_patch32_clip_256", "base", 32, 256, 512, False),
    ("vit_base_patch32_clip_384", "base", 32, 384, 1000, False),
    ("vit_base_patch32_clip_448", "base", 32, 448, 1000, False),
    ("vit_base_patch32_clip_quickgelu_224", "base", 32, 224, 512, True),
    ("vit_large_patch14_clip_224", "large", 14, 224, 1000, False),
    ("vit_large_patch14_clip_336", "large", 14, 336, 1000, False),
    ("vit_large_patch14_clip_quickgelu_224", "large", 14, 224, 768, True),
    ("vit_large_patch14_clip_quickgelu_336", "large", 14, 336, 768, True),
    ("vit_huge_patch14_clip_224", "huge", 14, 224, 1000, False),
    ("vit_huge_patch14_clip_336", "huge", 14, 336, 1000, False),
    ("vit_huge_patch14_clip_378", "huge", 14, 378, 1024, False),
    ("vit_huge_patch14_clip_quickgelu_224", "huge", 14, 224, 1024, True),
    ("vit_huge_patch14_clip_quickgelu_378", "huge", 14, 378, 1024, True),
    ("vit_giant_patch14_clip_224", "giant", 14, 224, 1024, False),
    ("vit_gigantic_patch14_clip_224", "gigantic", 14, 224, 1280, False),
    ("vit_gigantic_patch14_clip_378", "gigantic", 14, 378, 1280, False),
    ("vit_gigantic_patch14_clip_quickgelu_224", "gigantic", 14, 224, 1280, True),
]
for _name, _size, _patch, _resolution, _classes, _quick in CLIP:
    _width, _depth, _heads, _ratio = CLIP_SIZES[_size]
    register(_name, patch_size=_patch, image_size=_resolution, num_classes=_classes, embed_dim=_width, depth=_depth,
             num_heads=_heads, mlp_ratio=_ratio, pre_norm=True, layer_norm_epsilon=1e-5,
             gelu="quick" if _quick else "exact")
# SigLIP (Zhai et al. 2023) and SigLIP 2: no class token, the MAP attention pool (or, "_gap_", the
# mean of the tokens after the final norm), no head; SigLIP 2's tanh GELU where timm has it
SIGLIP_SIZES = {"base": (768, 12, 12, 4.0), "large": (1024, 24, 16, 4.0), "so400m": (1152, 27, 16, 3.7362),
                "giantopt": (1536, 40, 16, 4.0)}
SIGLIP = [  # (size, patch, image sizes, GELU)
    ("base", 16, (224, 256, 384, 512), "exact"),
    ("base", 32, (256,), "tanh"),
    ("large", 16, (256, 384), "exact"),
    ("large", 16, (512,), "tanh"),
    ("so400m", 14, (224, 378, 384), "exact"),
    ("so400m", 16, (256, 384, 512), "tanh"),
    ("giantopt", 16, (256, 384), "tanh"),
]
for _size, _patch, _resolutions, _gelu in SIGLIP:
    _width, _depth, _heads, _ratio = SIGLIP_SIZES[_size]
    for _resolution in _resolutions:
        _siglip = dict(patch_size=_patch, image_size=_resolution, embed_dim=_width, depth=_depth, num_heads=_heads,
                       mlp_ratio=_ratio, gelu=_gelu, class_token=False, num_classes=0,
                       drop_remainder=_resolution % _patch != 0)  # 384 at patch 14: 27 patches, as timm
        register(f"vit_{_size}_patch{_patch}_siglip_{_resolution}", pool="map", **_siglip)
        register(f"vit_{_size}_patch{_patch}_siglip_gap_{_resolution}", pool="mean", fc_norm=False, **_siglip)
for _resolution in (448, 896):  # average-pooled only
    register(f"vit_so400m_patch14_siglip_gap_{_resolution}", patch_size=14, image_size=_resolution, embed_dim=1152,
             depth=27, num_heads=16, mlp_ratio=3.7362, class_token=False, num_classes=0, pool="mean", fc_norm=False)
# timm's own average-pooled ViTs (`_gap_`): no class token; some with registers, layer scale, no q/k/v bias
# (its differential-attention `vit_d*` and parallel-block `vit_p*` ones are not built)
# name: (width, depth, heads, MLP ratio, classes, image sizes, other options)
GAP = {
    "vit_medium_patch16_gap": (512, 12, 8, 4.0, 1000, (240, 256, 384), dict(qkv_bias=False, layer_scale=1e-6,
                                                                          fc_norm=False)),
    "vit_betwixt_patch16_gap": (640, 12, 10, 4.0, 1000, (256,), dict(qkv_bias=False, layer_scale=1e-6,
                                                                     fc_norm=False)),
    "vit_base_patch16_gap": (768, 12, 16, 4.0, 1000, (224,), dict(fc_norm=False)),
    "vit_huge_patch14_gap": (1280, 32, 16, 4.0, 0, (224,), dict(fc_norm=False)),
    "vit_huge_patch16_gap": (1280, 32, 16, 4.0, 0, (448,), dict(fc_norm=False)),
    "vit_giant_patch16_gap": (1408, 40, 16, 48 / 11, 0, (224,), dict(fc_norm=False)),
    "vit_wee_patch16_reg1_gap": (256, 14, 4, 5.0, 1000, (256,), dict(register_tokens=1, no_embed_class=True,
                                                                     layer_scale=1e-5)),
    "vit_little_patch16_reg1_gap": (320, 14, 5, 5.6, 1000, (256,), dict(register_tokens=1, no_embed_class=True,
                                                                        layer_scale=1e-5)),
    "vit_little_patch16_reg4_gap": (320, 14, 5, 5.6, 1000, (256,), dict(register_tokens=4, no_embed_class=True,
                                                                        layer_scale=1e-5)),
    "vit_medium_patch16_reg1_gap": (512, 12, 8, 4.0, 1000, (256,), dict(register_tokens=1, no_embed_class=True,
                                                                        layer_scale=1e-5)),
    "vit_medium_patch16_reg4_gap": (512, 12, 8, 4.0, 1000, (256,), dict(register_tokens=4, no_embed_class=True,
                                                                        layer_scale=1e-5)),
    "vit_mediumd_patch16_reg4_gap": (512, 20, 8, 4.0, 1000, (256, 384), dict(register_tokens=4, no_embed_class=True,
                                                                             layer_scale=1e-5)),
    "vit_betwixt_patch16_reg1_gap": (640, 12, 10, 4.0, 1000, (256,), dict(register_tokens=1, no_embed_class=True,
                                                                          layer_scale=1e-5)),
    "vit_betwixt_patch16_reg4_gap": (640, 12, 10, 4.0, 1000, (256, 384), dict(register_tokens=4, no_embed_class=True,
                                                                              layer_scale=1e-5)),
    "vit_base_patch16_reg4_gap": (768, 12, 12, 4.0, 1000, (256,), dict(register_tokens=4, no_embed_class=True)),
    "vit_so150m_patch16_reg4_gap": (896, 18, 14, 2.572, 1000, (256, 384), dict(register_tokens=4, fc_norm=False)),
    "vit_so150m2_patch16_reg1_gap": (832, 21, 13, 34 / 13, 1000, (256, 384, 448), dict(register_tokens=1,
                                                                                        qkv_bias=False,
                                                                                        layer_scale=1e-5)),
}
for _name, (_width, _depth, _heads, _ratio, _classes, _resolutions, _options) in GAP.items():
    for _resolution in _resolutions:
        register(f"{_name}_{_resolution}", patch_size=16 if "patch16" in _name else 14, image_size=_resolution,
                 embed_dim=_width, depth=_depth, num_heads=_heads, mlp_ratio=_ratio, class_token=False, pool="mean",
                 num_classes=11821 if _name == "vit_medium_patch16_gap" and _resolution == 240 else _classes,
                 **_options)

# ---- the rest of timm's plain-ViT names (its modules vision_transformer, deit, vision_transformer_hybrid),
# with timm 1.0.31's defaults (tests/test_timm_names.py checks each against tests/fixtures/timm_vit_registry.json)
# Searched after the names above (search_order): several are the architecture of one of them under
# another name (DeiT's are the paper's ViTs), and a name brings its own preprocessing
SEARCHED_FIRST = frozenset(_REGISTRY)
# DeiT (Touvron et al. 2021) without distillation: ViT's sizes, DeiT's recipe
for _size, _resolution in (("tiny", 224), ("small", 224), ("base", 224), ("base", 384)):
    register(f"deit_{_size}_patch16_{_resolution}", patch_size=16, image_size=_resolution, **SIZES[_size])
# name: (width, depth, heads, MLP ratio, patch, image size, classes, other options)
PLAIN = {
    "vit_base_patch8_224": (768, 12, 12, 4.0, 8, 224, 1000, {}),
    "vit_small_patch8_224": (384, 12, 6, 4.0, 8, 224, 0, {}),  # DINO's, no head
    "vit_large_patch14_224": (1024, 24, 16, 4.0, 14, 224, 1000, {}),
    "vit_giant_patch14_224": (1408, 40, 16, 48 / 11, 14, 224, 1000, {}),
    "vit_gigantic_patch14_224": (1664, 48, 16, 64 / 13, 14, 224, 1000, {}),
    "vit_base_patch16_224_miil": (768, 12, 12, 4.0, 16, 224, 11221, dict(qkv_bias=False)),  # ImageNet-21K-P
    "vit_base_patch16_plus_240": (896, 12, 14, 4.0, 16, 240, 1000, dict(layer_scale=1e-5)),
    "vit_base_patch32_plus_256": (896, 12, 14, 4.0, 32, 256, 1000, dict(layer_scale=1e-5)),
    # "Three things everyone should know about ViTs": the sequential baseline of its parallel 18x2
    "vit_small_patch16_36x1_224": (384, 36, 6, 4.0, 16, 224, 1000, dict(layer_scale=1e-5)),
    # FlexiViT (Beyer et al. 2023) at its default 240 px, the position embedding on the patches only
    "flexivit_small": (384, 12, 6, 4.0, 16, 240, 1000, dict(no_embed_class=True)),
    "flexivit_base": (768, 12, 12, 4.0, 16, 240, 1000, dict(no_embed_class=True)),
    "flexivit_large": (1024, 24, 16, 4.0, 16, 240, 1000, dict(no_embed_class=True)),
    # EVA's large ViT as timm's VisionTransformer: the mean of the patch tokens, normed after pooling
    "eva_large_patch14_196": (1024, 24, 16, 4.0, 14, 196, 1000, dict(pool="mean")),
    "eva_large_patch14_336": (1024, 24, 16, 4.0, 14, 336, 1000, dict(pool="mean")),
    # TIPSv2: a register, the position embedding on the patches only, layer scale starting at 1, no head
    "vit_base_patch14_reg1_tipsv2": (768, 12, 12, 4.0, 14, 448, 0, dict(
        register_tokens=1, no_embed_class=True, layer_scale=1.0)),
    "vit_large_patch14_reg1_tipsv2": (1024, 24, 16, 4.0, 14, 448, 0, dict(
        register_tokens=1, no_embed_class=True, layer_scale=1.0)),
    "vit_so400m_patch14_reg1_tipsv2": (1152, 27, 16, 4304 / 1152, 14, 448, 0, dict(
        register_tokens=1, no_embed_class=True, layer_scale=1.0)),
    "vit_giant_patch14_reg1_tipsv2": (1536, 40, 24, 2.66667 * 2, 14, 448, 0, dict(
        register_tokens=1, no_embed_class=True, layer_scale=1.0, mlp="swiglu")),
    # InternViT-300M (InternVL): layer scale 0.1, no final norm, no head, any input size
    "vit_intern300m_patch14_448": (1024, 24, 16, 4.0, 14, 448, 0, dict(
        layer_scale=0.1, final_norm=False, dynamic_img_size=True)),
    "vit_so150m_patch16_reg4_map_256": (896, 18, 14, 2.572, 16, 256, 1000, dict(
        class_token=False, register_tokens=4, pool="map")),
    # timm's own test models, 160 px
    "test_vit": (64, 6, 2, 3.0, 16, 160, 1000, dict(dynamic_img_size=True)),
    "test_vit2": (64, 8, 2, 3.0, 16, 160, 1000, dict(
        class_token=False, register_tokens=1, pool="mean", layer_scale=1e-5, dynamic_img_size=True)),
    "test_vit3": (96, 9, 3, 2.0, 16, 160, 1000, dict(
        class_token=False, register_tokens=1, pool="map", pool_include_prefix=True, layer_scale=1e-5)),
    "test_vit4": (96, 9, 3, 3.0, 16, 160, 1000, dict(
        class_token=False, register_tokens=1, pool="mean", layer_scale=1e-5, dynamic_img_size=True, norm="rmsnorm")),
}
for _name, (_width, _depth, _heads, _ratio, _patch, _resolution, _classes, _options) in PLAIN.items():
    register(_name, embed_dim=_width, depth=_depth, num_heads=_heads, mlp_ratio=_ratio, patch_size=_patch,
             image_size=_resolution, num_classes=_classes, **_options)
# the base ViT on the paper's R26 (ResNet-v2, stride 32)
register("vit_base_r26_s32_224", image_size=224, backbone_layers=[2, 2, 2, 2], patch_size=1, **SIZES["base"])
# timm's own hybrids on its ResNet-D (resnet_d.py), untrained in timm: resnet26d / resnet50d up to stage 4
# (stride 32) or 3 (s16); timm's "small" here is its early ViT-S: width 768, 8 layers of 8 heads, MLP ratio 3
RESNET_D_HYBRIDS = {
    "vit_small_resnet26d_224": dict(backbone_layers=[2, 2, 2, 2], embed_dim=768, depth=8, num_heads=8, mlp_ratio=3.0),
    "vit_small_resnet50d_s16_224": dict(backbone_layers=[3, 4, 6], embed_dim=768, depth=8, num_heads=8,
                                        mlp_ratio=3.0),
    "vit_base_resnet26d_224": dict(backbone_layers=[2, 2, 2, 2], **SIZES["base"]),
    "vit_base_resnet50d_224": dict(backbone_layers=[3, 4, 6, 3], **SIZES["base"]),
}
for _name, _hybrid in RESNET_D_HYBRIDS.items():
    register(_name, image_size=224, patch_size=1, backbone="resnet_d", **_hybrid)

# AIMv2 (Fini et al. 2025): RMSNorm everywhere (the patch tokens too, after the Conv2D), no class token,
# q/k/v, output projection and SwiGLU MLP without biases, the mean of the patch tokens after the final norm
AIMV2_SIZES = {"large": (1024, 8, 2.75), "huge": (1536, 12, 2.6667), "1b": (2048, 16, 2.75), "3b": (3072, 24, 2.6667)}
for _size, (_width, _heads, _ratio) in AIMV2_SIZES.items():
    for _resolution in (224, 336, 448):
        register(f"aimv2_{_size}_patch14_{_resolution}", patch_size=14, image_size=_resolution, embed_dim=_width,
                 depth=24, num_heads=_heads, mlp_ratio=_ratio, num_classes=0, class_token=False, pool="mean",
                 fc_norm=False, qkv_bias=False, proj_bias=False, mlp="swiglu_split", mlp_bias=False, norm="rmsnorm",
                 layer_norm_epsilon=1e-5, patch_norm=True)
# BEiT-3 (Wang et al. 2023) as timm's VisionTransformer: a LayerNorm inside the attention before its
# output projection and one inside the MLP after the GELU (Magneto's sub-LN), epsilon 1e-5, the mean of
# the patch tokens normed after pooling
for _name, _width, _depth, _heads, _ratio, _patch, _resolution in (
        ("beit3_base_patch16_224", 768, 12, 12, 4.0, 16, 224),
        ("beit3_large_patch16_224", 1024, 24, 16, 4.0, 16, 224),
        ("beit3_giant_patch14_224", 1408, 40, 16, 4.3637, 14, 224),
        ("beit3_giant_patch14_336", 1408, 40, 16, 4.3637, 14, 336)):
    register(_name, patch_size=_patch, image_size=_resolution, embed_dim=_width, depth=_depth, num_heads=_heads,
             mlp_ratio=_ratio, pool="mean", attention_norm=True, mlp_norm=True, layer_norm_epsilon=1e-5)
# C-RADIO v3 and v4 (NVIDIA) as timm's VisionTransformer: the class token and 7 (v4: 9) more of
# RADIO's per-teacher summary tokens as registers, the position embedding on the patches only, no final
# norm, no head. timm resamples RADIO's own 128 x 128 position grid to the model's 32 x 32 when it
# converts NVIDIA's checkpoint; its Hub weights hold the 32 x 32 one, which this model loads and computes
# with as timm does at 512 px (RADIO's own crop at other sizes is timm's naflexvit_*_radio_*, not these)
# name: (width, depth, heads, MLP ratio, registers, layer scale)
RADIO = {"vit_base_patch16_radio_v3": (768, 12, 12, 4.0, 7, 1e-5),
         "vit_large_patch16_radio_v3": (1024, 24, 16, 4.0, 7, 1e-5),
         "vit_huge_patch16_radio_v3": (1280, 32, 16, 4.0, 7, None),
         "vit_giant_patch16_radio_v3": (1536, 40, 24, 4.0, 7, None),
         "vit_so400m_patch16_radio_v4": (1152, 27, 16, 4304 / 1152, 9, None),
         "vit_huge_patch16_radio_v4": (1280, 32, 16, 4.0, 9, None)}
for _name, (_width, _depth, _heads, _ratio, _registers, _scale) in RADIO.items():
    register(_name, patch_size=16, image_size=512, embed_dim=_width, depth=_depth, num_heads=_heads, mlp_ratio=_ratio,
             num_classes=0, register_tokens=_registers, no_embed_class=True, final_norm=False, layer_scale=_scale)

# timm names of these modules this project does not build, each with why: create_model names the reason
_PARALLEL = "parallel blocks (attention and MLP side by side in one residual step), not the encoder's sequential layer"
_DIFFERENTIAL = "differential attention (two softmax maps subtracted, with a norm inside the attention)"
NOT_BUILT = {
    "vit_small_patch16_18x2_224": _PARALLEL,
    "vit_base_patch16_18x2_224": _PARALLEL,
    **{f"vit_{size}_xp_224": _PARALLEL + ", with q/k norms (RMSNorm) inside the attention"
       for size in ("base_patch16", "large_patch14", "huge_patch14")},
    "vit_pwee_patch16_reg1_gap_256": _PARALLEL,
    "vit_dpwee_patch16_reg1_gap_256": _PARALLEL + ", with " + _DIFFERENTIAL,
    "vit_dwee_patch16_reg1_gap_256": _DIFFERENTIAL,
    "vit_dlittle_patch16_reg1_gap_256": _DIFFERENTIAL,
    "vit_base_patch16_rpn_224": "post-norm residual blocks (ResPostBlock: x + norm(attn(x))), not pre-norm",
    "vit_base_mci_224": "MobileCLIP's convolutional stem (MCi) before the patches, not a ResNet or a patch Conv2D",
}


# the RoPE generation (timm's Eva class): registry_rope.py
register_rope_models(register)
NOT_BUILT.update(ROPE_NOT_BUILT)


def list_models():
    """The registered model names, sorted."""
    return sorted(_REGISTRY)


def search_order():
    """The registered names in the order a search for the registered model nearest a config tries
    them: the paper's and today's families (SEARCHED_FIRST) sorted, then the rest of timm's names
    sorted. A search takes a name of the second group only for a config that is exactly it."""
    return sorted(SEARCHED_FIRST) + sorted(name for name in _REGISTRY if name not in SEARCHED_FIRST)


def search_tier(name):
    """0 for a name of SEARCHED_FIRST, 1 for the others (see search_order)."""
    return 0 if name in SEARCHED_FIRST else 1


def get_model_config(name, **overrides):
    """The `ViTConfig` registered as `name` with `overrides` applied (not yet validated)."""
    if name in NOT_BUILT:
        raise ConfigError(f"model {name!r} is timm's, but this project does not build it: {NOT_BUILT[name]}")
    if name not in _REGISTRY:
        raise ConfigError(f"unknown model {name!r}{close_matches(name, _REGISTRY)}; "
                          f"paddle_vit.list_models() lists them all")
    return _REGISTRY[name].replace(**overrides)

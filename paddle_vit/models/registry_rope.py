"""The RoPE generation under timm 1.0.31's names (its `Eva` class, timm/models/eva.py), with timm's
defaults: the class count of its default pretrained tag (0: a backbone), image size, LayerNorm
epsilon, pooling and parts. tests/test_rope_models.py checks every name's parameter count and
architecture against what timm itself recorded (tests/fixtures/timm_rope_registry.json).

Not built (`NOT_BUILT`): EVA-02 enormous (post-norm blocks) and Sapiens2 (q/k normalisation,
grouped-query attention and attention-only layer scale).
"""
EVA_EPSILON, META_EPSILON = 1e-6, 1e-5  # timm's Eva default; DINOv3's and PE's norm_layer
NOT_BUILT = {
    "eva02_enormous_patch14_clip_224": "post-norm blocks (use_post_norm), which this ViT does not build",
    **{f"vit_{size}_patch16_sapiens2": "q/k normalisation, grouped-query attention (num_kv_heads) and "
                                       "attention-only layer scale, which this ViT does not build"
       for size in ("base", "large", "huge", "giant", "5b")},
}

# DINOv3 (Meta, 2025): no position embedding added, DINOv3's RoPE (base 100, rotate-half pairs),
# 4 registers, layer scale, any input size; timm pools the patch tokens' mean ('avg') where DINOv3's
# own code and transformers read the class token (global_pool='token', a folder's own global_pool)
DINOV3 = dict(patch_size=16, image_size=256, dynamic_img_size=True, position_embedding="none", rope="dinov3",
              rope_temperature=100.0, rope_rotate_half=True, register_tokens=4, layer_scale=1e-5,
              layer_norm_epsilon=META_EPSILON, pool="mean", fc_norm=False, num_classes=0)
DINOV3_SIZES = {
    "tiny": dict(embed_dim=192, depth=12, num_heads=3),
    "small": dict(embed_dim=384, depth=12, num_heads=6),
    "small_plus": dict(embed_dim=384, depth=12, num_heads=6, mlp="swiglu_split", mlp_align_to=8),
    "base": dict(embed_dim=768, depth=12, num_heads=12),
    "large": dict(embed_dim=1024, depth=24, num_heads=16),
    "huge_plus": dict(embed_dim=1280, depth=32, num_heads=20, mlp="swiglu_split", mlp_align_to=8),
    "7b": dict(embed_dim=4096, depth=40, num_heads=32, mlp_ratio=2.0, mlp="swiglu_split", mlp_align_to=64),
}
QKV_BIAS = dict(qkv_bias=True, qkv="fused_qv_bias")  # timm's q_bias / v_bias, k none
NO_QKV_BIAS = dict(qkv_bias=False)
# EVA-02 (Fang et al., 2023): learned position embedding and axial RoPE scaled to the 16 x 16 grid
# it was pre-trained at, SwiGLU (packed for tiny and small; split, with a LayerNorm inside, for base
# and large), q/v-only biases (tiny, small) or three projections (base, large)
EVA02 = dict(patch_size=14, mlp_ratio=4 * 2 / 3, rope="axial", rope_ref_grid=[16, 16], pool="mean",
             layer_norm_epsilon=EVA_EPSILON)
EVA02_SIZES = {
    "tiny": dict(embed_dim=192, depth=12, num_heads=3, mlp="swiglu_packed", **QKV_BIAS),
    "small": dict(embed_dim=384, depth=12, num_heads=6, mlp="swiglu_packed", **QKV_BIAS),
    "base": dict(embed_dim=768, depth=12, num_heads=12, mlp="swiglu_split", mlp_norm=True, qkv="separate"),
    "large": dict(embed_dim=1024, depth=24, num_heads=16, mlp="swiglu_split", mlp_norm=True, qkv="separate"),
}
# the Perception Encoder (Meta, 2025): a LayerNorm before the blocks (no patch bias), learned
# position embedding with axial RoPE ('xy', offset 1, scaled to its pre-training grid); core: an
# attention pool over every token (8 heads) and a projection to the text embedding as the head
PE = dict(pre_norm=True, rope="axial", rope_grid_indexing="xy", rope_grid_offset=1.0,
          layer_norm_epsilon=META_EPSILON)
PE_CORE = dict(pool="map", attn_pool_heads=8, attn_pool_mlp_ratio=4.0, pool_include_prefix=True)
PE_FEATURES = dict(pool="mean", fc_norm=False, final_norm=False, num_classes=0)  # spatial, lang: the tokens
PE_GIGANTIC = dict(patch_size=14, image_size=448, embed_dim=1536, depth=50, num_heads=16, mlp_ratio=5.833333333333333,
                   class_token=False, rope_grid_offset=0.0, rope_ref_grid=[32, 32])
# RoPE-ViT (Heo et al., ECCV 2024): DeiT-III-style ViTs with RoPE in every attention, axial ('xy',
# base 100) or mixed (learned frequencies, base 10), without or with a learned position embedding
# on the patches (ape)
ROPE_VIT = dict(patch_size=16, image_size=224, layer_scale=1e-5, pool="cls", fc_norm=False, rope_grid_indexing="xy",
                layer_norm_epsilon=EVA_EPSILON)
ROPE_VIT_KINDS = {
    "rope": dict(position_embedding="none", rope="axial", rope_temperature=100.0),
    "rope_mixed": dict(position_embedding="none", rope="mixed", rope_temperature=10.0),
    "rope_ape": dict(rope="axial", rope_temperature=100.0, no_embed_class=True),
    "rope_mixed_ape": dict(rope="mixed", rope_temperature=10.0, no_embed_class=True),
}
# timm's own ViTs with RoPE, no class token, registers, average pooling (Searching for Better ViT
# Baselines)
ROPE_GAP = dict(patch_size=16, image_size=256, position_embedding="none", rope="axial", rope_ref_grid=[16, 16],
                class_token=False, pool="mean", layer_scale=1e-5, layer_norm_epsilon=EVA_EPSILON)
ROPE_GAP_MODELS = {
    "vit_medium_patch16_rope_reg1_gap_256": dict(embed_dim=512, depth=12, num_heads=8, register_tokens=1, **QKV_BIAS),
    "vit_mediumd_patch16_rope_reg1_gap_256": dict(embed_dim=512, depth=20, num_heads=8, register_tokens=1,
                                                  **NO_QKV_BIAS),
    "vit_betwixt_patch16_rope_reg4_gap_256": dict(embed_dim=640, depth=12, num_heads=10, register_tokens=4,
                                                  **QKV_BIAS),
    "vit_base_patch16_rope_reg1_gap_256": dict(embed_dim=768, depth=12, num_heads=12, register_tokens=1, **QKV_BIAS),
}
SIZES = {"small": dict(embed_dim=384, depth=12, num_heads=6), "base": dict(embed_dim=768, depth=12, num_heads=12),
         "large": dict(embed_dim=1024, depth=24, num_heads=16)}


ROPE_NAMES = set()  # every name registered here: timm builds them with its Eva class


def register_rope_models(register_name):
    """Register every built name with `register_name(name, **ViTConfig fields)` (models/registry.py)."""
    def register(name, **config):
        ROPE_NAMES.add(name)
        register_name(name, **config)

    for size, sizes in DINOV3_SIZES.items():
        biases = [("_qkvb", QKV_BIAS)] + ([("", NO_QKV_BIAS)] if size != "tiny" else [])
        if size == "7b":
            biases = [("", NO_QKV_BIAS)]
        for suffix, bias in biases:
            register(f"vit_{size}_patch16_dinov3{suffix}", **{**DINOV3, **sizes, **bias})
    # lingbot: DINOv3's architecture at 512, read by the class token
    for size, sizes, bias in (("small", DINOV3_SIZES["small"], QKV_BIAS), ("base", DINOV3_SIZES["base"], QKV_BIAS),
                              ("large", DINOV3_SIZES["large"], QKV_BIAS),
                              ("giant", dict(embed_dim=1536, depth=40, num_heads=24, mlp_ratio=4 * 2 / 3,
                                             mlp="swiglu_split", mlp_align_to=8), NO_QKV_BIAS)):
        register(f"vit_{size}_patch16_lingbot", **{**DINOV3, **sizes, **bias, "image_size": 512, "pool": "cls"})

    for size, sizes in EVA02_SIZES.items():
        for resolution, classes in ((224, 0), ({"tiny": 336, "small": 336}.get(size, 448), 1000)):
            register(f"eva02_{size}_patch14_{resolution}", image_size=resolution, num_classes=classes,
                     **{**EVA02, **sizes})
    clip = dict(EVA02, pool="cls", attention_norm=True, mlp="swiglu_split", mlp_norm=True, qkv="separate")
    register("eva02_base_patch16_clip_224", image_size=224, num_classes=512,
             **{**clip, **SIZES["base"], "patch_size": 16})
    for resolution in (224, 336):
        register(f"eva02_large_patch14_clip_{resolution}", image_size=resolution, num_classes=768,
                 **{**clip, **SIZES["large"]})
    # EVA (Fang et al., 2022): a plain ViT-g with q/v-only biases, no RoPE
    giant = dict(patch_size=14, embed_dim=1408, depth=40, num_heads=16, mlp_ratio=4.363636363636363, pool="mean",
                 layer_norm_epsilon=EVA_EPSILON, **QKV_BIAS)
    for resolution in (224, 336, 560):
        register(f"eva_giant_patch14_{resolution}", image_size=resolution, **giant)
    register("eva_giant_patch14_clip_224", image_size=224, num_classes=1024, **{**giant, "pool": "cls"})

    pe_sizes = {"tiny": (16, 384, 192, 12, 3, 512, 24), "small": (16, 384, 384, 12, 6, 512, 24),
                "base": (16, 224, 768, 12, 12, 1024, 14), "large": (14, 336, 1024, 24, 16, 1024, 24)}
    for size, (patch, resolution, width, depth, heads, classes, grid) in pe_sizes.items():
        register(f"vit_pe_core_{size}_patch{patch}_{resolution}", patch_size=patch, image_size=resolution,
                 embed_dim=width, depth=depth, num_heads=heads, num_classes=classes, rope_ref_grid=[grid, grid],
                 **PE, **PE_CORE)
    register("vit_pe_core_gigantic_patch14_448", num_classes=1280, **{**PE, **PE_CORE, **PE_GIGANTIC})
    for size, (patch, resolution, width, depth, heads) in {"tiny": (16, 512, 192, 12, 3),
                                                           "small": (16, 512, 384, 12, 6),
                                                           "base": (16, 512, 768, 12, 12),
                                                           "large": (14, 448, 1024, 24, 16)}.items():
        register(f"vit_pe_spatial_{size}_patch{patch}_{resolution}", patch_size=patch, image_size=resolution,
                 embed_dim=width, depth=depth, num_heads=heads, rope_ref_grid=[32, 32], **PE, **PE_FEATURES)
    register("vit_pe_spatial_gigantic_patch14_448", layer_scale=0.1, **{**PE, **PE_FEATURES, **PE_GIGANTIC})
    register("vit_pe_lang_large_patch14_448", patch_size=14, image_size=448, embed_dim=1024, depth=23, num_heads=16,
             layer_scale=0.1, rope_ref_grid=[32, 32], **PE, **PE_FEATURES)
    register("vit_pe_lang_gigantic_patch14_448", layer_scale=0.1,
             **{**PE, **PE_FEATURES, **PE_GIGANTIC, "depth": 47})

    for size in ("small", "base", "large"):
        for kind, options in ROPE_VIT_KINDS.items():
            register(f"vit_{size}_patch16_{kind}_224", **{**ROPE_VIT, **SIZES[size], **options})
    for name, options in ROPE_GAP_MODELS.items():
        register(name, **{**ROPE_GAP, **options})

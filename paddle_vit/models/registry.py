"""Named model sizes (paper Table 1, plus the small sizes of DeiT/timm and the walkthrough's), and
the paper's hybrid ResNet + ViT models."""
from ..errors import ConfigError, close_matches
from .vit import ViT, ViTConfig

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


def list_models():
    """The registered model names, sorted."""
    return sorted(_REGISTRY)


def get_model_config(name, **overrides):
    """The `ViTConfig` registered as `name` with `overrides` applied (not yet validated)."""
    if name not in _REGISTRY:
        raise ConfigError(f"unknown model {name!r}{close_matches(name, _REGISTRY)}; "
                          f"paddle_vit.list_models() lists them all")
    return _REGISTRY[name].replace(**overrides)

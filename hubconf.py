"""paddle.hub entry points: every registered model, built as `paddle_vit.create_model` builds it.

    import paddle
    paddle.hub.list("PATH/TO/paddle-vit", source="local")          # the model names
    print(paddle.hub.help("PATH/TO/paddle-vit", "vit_base_patch16_224", source="local"))
    model = paddle.hub.load("PATH/TO/paddle-vit", "vit_base_patch16_224", source="local",
                            pretrained="ViT-B_16.npz", num_classes=10)

(``source="github"`` with ``OWNER/paddle-vit`` works the same once the repository is published.)
Each entry point takes what `create_model` takes after the name: `pretrained` (a weights file,
a timm or Hugging Face folder, a dict of arrays), `resample`, `strict` and `ViTConfig` fields as
keyword arguments. Nothing downloads: `pretrained` is a file or folder on this machine.

paddle.hub lists every public callable of this file as a model, so everything else here is private.
"""
import paddle_vit as _paddle_vit
from paddle_vit.models import get_model_config as _get_model_config

dependencies = ["paddle", "numpy", "yaml"]


def _summary(name):
    """One line of what the model is, from its registered ViTConfig."""
    config = _get_model_config(name)
    stem = f"ResNet stages {list(config.backbone_layers)}, then a " if config.is_hybrid else ""
    return (f"{name}: {stem}ViT, {config.image_size} px input, patch {config.patch_size}, width "
            f"{config.embed_dim}, depth {config.depth}, {config.num_heads} heads, {config.num_classes} classes")


def _entry_point(name):
    def build(pretrained=None, **options):
        return _paddle_vit.create_model(name, pretrained=pretrained, **options)
    build.__name__ = build.__qualname__ = name
    build.__doc__ = (f"{_summary(name)}.\n\nBuilt as paddle_vit.create_model({name!r}, pretrained=None, **options): "
                     f"pretrained a weights file or folder on this machine; options resample, strict and "
                     f"ViTConfig fields (num_classes, image_size, drop_path, ...).")
    return build


for _name in _paddle_vit.list_models():
    globals()[_name] = _entry_point(_name)
del _name

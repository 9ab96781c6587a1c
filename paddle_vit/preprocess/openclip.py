"""OpenCLIP's eval preprocessing: `open_clip.image_transform(is_train=False)`, timm's arithmetic
with the RGB conversion after the resize (an RGBA image is resized with its alpha, as PIL does,
before the alpha is dropped)."""
import dataclasses

from .constants import OPENAI_MEAN, OPENAI_STD
from .timm import from_pretrained_cfg


def hint():
    """The preprocessing hint of an OpenAI CLIP or OpenCLIP image tower: what `image_transform` is
    given for OpenAI's weights and OpenCLIP's trained from them (the shorter side resized to the
    image size, bicubic, a centre crop, OpenAI's mean and std)."""
    return {"pipeline": "openclip", "config": {"crop_pct": 1.0, "interpolation": "bicubic", "crop_mode": "center",
                                               "mean": list(OPENAI_MEAN), "std": list(OPENAI_STD)},
            "source": "open_clip.image_transform(is_train=False) with OpenAI's mean and std"}


def from_image_transform(config, image_size, where):
    """`image_transform(is_train=False)` with `config`'s values (timm's pretrained_cfg keys)."""
    preprocess = from_pretrained_cfg(config, image_size, where)
    return dataclasses.replace(preprocess, rgb="convert_after_resize", origin=f"OpenCLIP's image_transform ({where})")

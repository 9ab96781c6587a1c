"""torchvision's eval preprocessing of its ViT weights: `ViT_B_16_Weights.IMAGENET1K_V1.transforms()`."""
from .constants import IMAGENET_MEAN, IMAGENET_STD
from .spec import Preprocess


def from_weights_transforms(config, image_size, where):
    """`ImageClassification(crop_size=224)`: PIL bilinear shorter side 256, crop 224, ImageNet stats
    (the weights carry no config: `config` is unused)."""
    crop = int(image_size) if image_size is not None else 224
    resize = 256 if crop == 224 else int(crop * 256 / 224)  # other sizes: the same 0.875 ratio
    return Preprocess(crop, crop / resize, list(IMAGENET_MEAN), list(IMAGENET_STD), "bilinear",
                      resize_mode="shorter_side", resize_size=resize, long_side="truncate",
                      crop_offset="round", rescale="float32_divide", rgb="convert", exif_transpose=False,
                      origin=f"torchvision IMAGENET1K_V1 transforms() ({where})")

"""The numbers eval preprocessing shares with the rest of the package, each written once here.

Means and standard deviations are per channel (R, G, B) of pixels scaled to [0, 1]. Every module
that names one of them (the checkpoint families, publishing, the per-name defaults of timm, the
recipes' checks) imports it from here.
"""

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # torchvision's, timm's default, DeiT's recipes
IMAGENET_STD = (0.229, 0.224, 0.225)
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI's CLIP, and the models trained from it
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)  # mean = std = 0.5: the original ViT's, SigLIP's, this project's recipes'

# every resize's filter; the pipeline maps each name to PIL's
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")
# transformers' `resample` values (PIL's filter numbers) for those names; a file's number is
# read through the inverse
HF_RESAMPLE = {"nearest": 0, "bilinear": 2, "bicubic": 3}
HF_RESAMPLE_NAMES = {number: name for name, number in HF_RESAMPLE.items()}

# A crop fraction (eval_crop_pct, timm's crop_pct) is in (0, 1]: 1 keeps the whole resized image,
# a smaller one resizes to size / fraction and crops the centre; 0 would resize without bound.
CROP_PCT_RANGE = "(0, 1]"

# Every resize is bounded before it allocates (docs/pretrained.md, "What a folder's values must be"):
# - MAX_IMAGE_SIDE: the largest model input accepted; the registered models take at most 896
#   (and 224 - 518 mostly), so 4096 is more than four times beyond any of them;
# - MAX_RESIZE_FACTOR: the resize aims at most 4 x the crop (a crop_pct of at least 0.25); timm's
#   registered cfgs use 0.875 - 1.0, transformers' processors 1.0 - 1.15 (DeiT's 256 for 224);
# - MAX_RESIZE_SIDE: and at most 8192 pixels whatever the crop;
# - MAX_RESIZED_PIXELS: per image, the resized image has at most 2^26 pixels (201 MB as RGB
#   bytes): a 1 x 60000 panorama resized shorter side to 256 would be 256 x 15 million.
MAX_IMAGE_SIDE = 4096
MAX_RESIZE_FACTOR = 4
MAX_RESIZE_SIDE = 8192
MAX_RESIZED_PIXELS = 2 ** 26

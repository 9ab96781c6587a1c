"""Eval preprocessing: from an image file to the float32 [3, S, S] input of a model.

A checkpoint carries its preprocessing as much as its weights: the same weights fed another
resize, crop or mean give other probabilities. `Preprocess` (spec.py) describes one eval pipeline
in plain values, precisely enough to reproduce the library that made the checkpoint, and one
pipeline (pipeline.py) runs it:

    file --decode (EXIF or not)--> PIL image in any mode --to RGB--> resize --> centre crop
         --> float32 [3, S, S] = (pixel * rescale - mean) / std

This project's own recipes are a `Preprocess` too (`Preprocess.from_config(data_config, size)`):
the validation split of a training run, evaluation, prediction, export and the inference runtime
all run the same steps. One module per library translates its config into a `Preprocess` and,
where a folder is published for it, back (checkpoint.py picks one by the family's hint):

- "timm", timm.py: `resolve_data_config` + `create_transform(is_training=False)`; published as
  a Hub folder's `pretrained_cfg`;
- "huggingface", huggingface.py: the image processor with its PIL backend (ViT, DeiT, Bit, CLIP,
  Siglip); published as `preprocessor_config.json`;
- "torchvision", torchvision.py: `ViT_B_16_Weights.IMAGENET1K_V1.transforms()`;
- "paddleclas", paddleclas.py: PaddleClas's eval ops (cv2 decode, ResizeImage, CropImage), its
  ViT configs' or a config's list;
- "vit_jax", jax.py: `input_pipeline.py`, `tf.image.resize` + (x - 127.5) / 127.5;
- "openclip", openclip.py: `open_clip.image_transform(is_train=False)`, timm's arithmetic with
  the RGB conversion after the resize.

The arithmetic that matters and differs between them (see docs/pretrained.md):
- the longer side after a shorter-side resize: torchvision truncates ``int(s * long / short)``,
  PaddleClas rounds ``round(long * (s / short))``, this project's own recipes round
  ``round(s * long / short)``;
- the crop offset: torchvision/timm ``int(round((h - c) / 2))`` (round half to even) after
  zero-padding an image smaller than the crop; PaddleClas and transformers ``(h - c) // 2``;
- the resize kernel: PIL (antialiased), OpenCV's INTER_LINEAR (fixed point, no antialias) or
  TensorFlow's bilinear (half-pixel centres, float, no antialias): resize_kernels.py;
- the rescale: ``x / 255`` in float32 (torch), ``float64(x) * factor`` then float32
  (transformers), ``float32(x) * float32(1 / 255)`` (PaddleClas);
- the RGB conversion: ``Image.convert("RGB")`` drops alpha and clips 16-bit images (timm,
  torchvision, transformers' `load_image`); OpenCV's and TensorFlow's decoders drop alpha and
  shift 16-bit images right by 8; transformers' processor and this project composite on white.

The numbers they share (ImageNet's, OpenAI's and the 0.5 mean and std, the bounds of every resize)
are written once, in constants.py. The package needs only numpy and PIL: predict, export and the
inference runtime use it without Paddle.
"""
from .checkpoint import preprocess_for_checkpoint
from .pipeline import TooLargeToResize
from .spec import Preprocess

__all__ = ["Preprocess", "TooLargeToResize", "preprocess_for_checkpoint"]

"""RandAugment (Cubuk et al., 2020) on PIL images, with the generator passed in.

Each of `num_ops` operations is drawn uniformly (with replacement) from `OPERATIONS` and
applied at one magnitude `m` out of 10 (`level = m / 10`); operations with a direction
(rotate, shear, translate, the enhancers) take a random sign. The ranges are timm's and
torchvision's: rotate 30 degrees, shear 0.3, translate 0.45 of the side, enhancement factor
1 +- 0.9, solarize threshold 256 -> 0, posterize 8 -> 4 bits. Pixels moved in from outside
the image are grey (128), as in timm.
"""
from PIL import Image, ImageEnhance, ImageOps

from ..errors import ConfigError

FILL = (128, 128, 128)
MAX_MAGNITUDE = 10


def _affine(image, coefficients):
    # PIL's AFFINE maps each output pixel (x, y) to the input (a x + b y + c, d x + e y + f)
    return image.transform(image.size, Image.Transform.AFFINE, coefficients,
                           resample=Image.Resampling.BILINEAR, fillcolor=FILL)


def identity(image, level, sign):
    return image


def autocontrast(image, level, sign):
    return ImageOps.autocontrast(image)


def equalize(image, level, sign):
    return ImageOps.equalize(image)


def rotate(image, level, sign):
    return image.rotate(sign * 30.0 * level, resample=Image.Resampling.BILINEAR, fillcolor=FILL)


def solarize(image, level, sign):
    return ImageOps.solarize(image, threshold=int(round(256 * (1.0 - level))))


def posterize(image, level, sign):
    return ImageOps.posterize(image, 8 - int(4 * level))


def color(image, level, sign):
    return ImageEnhance.Color(image).enhance(1.0 + sign * 0.9 * level)


def contrast(image, level, sign):
    return ImageEnhance.Contrast(image).enhance(1.0 + sign * 0.9 * level)


def brightness(image, level, sign):
    return ImageEnhance.Brightness(image).enhance(1.0 + sign * 0.9 * level)


def sharpness(image, level, sign):
    return ImageEnhance.Sharpness(image).enhance(1.0 + sign * 0.9 * level)


def shear_x(image, level, sign):
    shear = sign * 0.3 * level
    center_y = image.height / 2.0
    return _affine(image, (1.0, shear, -shear * center_y, 0.0, 1.0, 0.0))


def shear_y(image, level, sign):
    shear = sign * 0.3 * level
    center_x = image.width / 2.0
    return _affine(image, (1.0, 0.0, 0.0, shear, 1.0, -shear * center_x))


def translate_x(image, level, sign):
    return _affine(image, (1.0, 0.0, sign * 0.45 * level * image.width, 0.0, 1.0, 0.0))


def translate_y(image, level, sign):
    return _affine(image, (1.0, 0.0, 0.0, 0.0, 1.0, sign * 0.45 * level * image.height))


OPERATIONS = {
    "identity": identity, "autocontrast": autocontrast, "equalize": equalize, "rotate": rotate,
    "solarize": solarize, "color": color, "posterize": posterize, "contrast": contrast,
    "brightness": brightness, "sharpness": sharpness, "shear_x": shear_x, "shear_y": shear_y,
    "translate_x": translate_x, "translate_y": translate_y,
}


class RandAugment:
    """`num_ops` random operations at magnitude `magnitude` (0..10) on an RGB PIL image."""

    def __init__(self, num_ops=2, magnitude=9, operations=None):
        if not 0 <= magnitude <= MAX_MAGNITUDE:
            raise ConfigError(f"data.randaugment_magnitude must be in [0, {MAX_MAGNITUDE}], got {magnitude}")
        if num_ops < 0:
            raise ConfigError(f"data.randaugment_num_ops must be >= 0, got {num_ops}")
        self.num_ops = int(num_ops)
        self.level = magnitude / MAX_MAGNITUDE
        self.operations = list(operations or OPERATIONS)

    def __call__(self, image, rng):
        for _ in range(self.num_ops):
            name = self.operations[rng.integers(len(self.operations))]
            sign = -1.0 if rng.random() < 0.5 else 1.0
            image = OPERATIONS[name](image, self.level, sign)
        return image

    def __repr__(self):
        return f"RandAugment(num_ops={self.num_ops}, magnitude={self.level * MAX_MAGNITUDE:g})"

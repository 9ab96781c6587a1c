"""Image transforms on PIL images and numpy arrays, each random one drawing from a passed-in rng.

A transform is called as `transform(image, rng)`. The dataset hands every sample a generator
keyed by (seed, epoch, index) (see `rng.py`), so the same sample in the same epoch is
augmented identically in any process and after a resume. paddle.vision's transforms are not
used because they draw from the global random state.

Train pipeline (timm/DeiT order): crop ("resize" | "random_resized_crop" | "pad_crop") ->
horizontal flip -> 3-Augment -> colour jitter -> RandAugment -> float, normalise, HWC -> CHW ->
random erasing; a step whose key is off is left out (and draws nothing).
Eval pipeline: the recipe's data keys as a `paddle_vit.preprocess.Preprocess`, run by the one
pipeline predict and export run (resize the shorter side to int(size / eval_crop_pct), centre-crop
size; eval_crop_pct == 1.0 is a plain resize to size x size, as the train "resize").
"""
import math

import numpy as np
from PIL import Image, ImageEnhance

from ..errors import ConfigError, check_choice
from ..preprocess import Preprocess
from ..preprocess.pipeline import PIL_FILTERS
from .config import INTERPOLATIONS, TRAIN_CROPS, color_jitter_strength
from .randaugment import RandAugment
from .three_augment import ThreeAugment


def interpolation_from_name(name):
    """PIL's resampling filter for "bicubic", "bilinear" or "nearest"."""
    return PIL_FILTERS[check_choice("data.interpolation", name, INTERPOLATIONS)]


class Compose:
    """Apply `transforms` in order, passing every one the same generator."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, image, rng=None):
        for transform in self.transforms:
            image = transform(image, rng)
        return image

    def __repr__(self):
        return "Compose(" + ", ".join(repr(t) for t in self.transforms) + ")"


class Resize:
    """Resize to `size` x `size`, ignoring the aspect ratio."""

    def __init__(self, size, interpolation=Image.Resampling.BICUBIC):
        self.size, self.interpolation = int(size), interpolation

    def __call__(self, image, rng=None):
        return image.resize((self.size, self.size), self.interpolation)

    def __repr__(self):
        return f"Resize({self.size})"


class RandomResizedCrop:
    """A random window of area fraction in `scale` and aspect ratio in `ratio`, resized to size.

    The Inception-style crop as torchvision/timm define it: ten tries at a window that fits,
    the log of the ratio uniform; if none fits, the central window with the ratio clamped.
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=Image.Resampling.BICUBIC):
        if not 0 < scale[0] <= scale[1] <= 1:
            raise ConfigError(f"data.crop_scale must be [low, high] with 0 < low <= high <= 1, got {list(scale)}")
        self.size, self.interpolation = int(size), interpolation
        self.scale, self.ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))

    def window(self, width, height, rng):
        """(left, top, crop_width, crop_height) of the crop for an image of this size."""
        area = width * height
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
            crop_width = int(round(math.sqrt(target_area * aspect)))
            crop_height = int(round(math.sqrt(target_area / aspect)))
            if 0 < crop_width <= width and 0 < crop_height <= height:
                left = int(rng.integers(0, width - crop_width + 1))
                top = int(rng.integers(0, height - crop_height + 1))
                return left, top, crop_width, crop_height
        aspect = width / height
        if aspect < self.ratio[0]:
            crop_width, crop_height = width, int(round(width / self.ratio[0]))
        elif aspect > self.ratio[1]:
            crop_width, crop_height = int(round(height * self.ratio[1])), height
        else:
            crop_width, crop_height = width, height
        return (width - crop_width) // 2, (height - crop_height) // 2, crop_width, crop_height

    def __call__(self, image, rng):
        left, top, crop_width, crop_height = self.window(image.width, image.height, rng)
        box = (left, top, left + crop_width, top + crop_height)
        return image.resize((self.size, self.size), self.interpolation, box=box)

    def __repr__(self):
        return f"RandomResizedCrop({self.size}, scale={self.scale})"


class PadCrop:
    """Resize to size x size, pad `padding` black pixels on every side, crop size x size at random.

    The padding is in pixels of the model input (4 at 32 is the CIFAR recipe), not of the
    source image, so an 8x8 digit is not drowned in padding.
    """

    def __init__(self, size, padding=4, interpolation=Image.Resampling.BICUBIC):
        if padding < 0:
            raise ConfigError(f"data.crop_padding must be >= 0, got {padding}")
        self.size, self.padding, self.interpolation = int(size), int(padding), interpolation

    def __call__(self, image, rng):
        if image.size != (self.size, self.size):
            image = image.resize((self.size, self.size), self.interpolation)
        shift_x = int(rng.integers(0, 2 * self.padding + 1)) - self.padding
        shift_y = int(rng.integers(0, 2 * self.padding + 1)) - self.padding
        # PIL fills the part of a crop box outside the image with zeros: that is the padding
        return image.crop((shift_x, shift_y, shift_x + self.size, shift_y + self.size))

    def __repr__(self):
        return f"PadCrop({self.size}, padding={self.padding})"


class RandomHorizontalFlip:
    """Mirror left-right with probability `probability`."""

    def __init__(self, probability=0.5):
        self.probability = float(probability)

    def __call__(self, image, rng):
        if rng.random() < self.probability:
            return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return image

    def __repr__(self):
        return f"RandomHorizontalFlip({self.probability})"


class ColorJitter:
    """Brightness, contrast and saturation with factors f_b, f_c, f_s each uniform in
    [max(0, 1 - strength), 1 + strength], applied in a random order (torchvision's ColorJitter
    without hue, as DeiT III uses it):
        brightness: x -> f_b x;  contrast: x -> f_c x + (1 - f_c) mean(gray(x));
        saturation: x -> f_s x + (1 - f_s) gray(x);   each clipped to 0..255 (PIL's enhancers).
    Draws the order (a permutation of 3) first, then f_b, f_c, f_s.
    """

    ENHANCERS = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)

    def __init__(self, strength):
        if not strength >= 0:
            raise ConfigError(f"data.color_jitter must be >= 0, got {strength}")
        self.strength = float(strength)

    def __call__(self, image, rng):
        order = rng.permutation(len(self.ENHANCERS))
        factors = rng.uniform(max(0.0, 1.0 - self.strength), 1.0 + self.strength, size=len(self.ENHANCERS))
        for which in order:
            image = self.ENHANCERS[which](image).enhance(float(factors[which]))
        return image

    def __repr__(self):
        return f"ColorJitter({self.strength})"


class ToNormalizedArray:
    """RGB PIL image -> float32 [3, H, W] array of (pixel / 255 - mean) / std."""

    def __init__(self, mean, std):
        if len(mean) != 3 or len(std) != 3 or any(s <= 0 for s in std):
            raise ConfigError(f"data.mean and data.std need 3 values each (std > 0), got {list(mean)}, {list(std)}")
        self.mean = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
        self.std = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)

    def __call__(self, image, rng=None):
        pixels = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0  # [H, W, 3] -> [3, H, W]
        return np.ascontiguousarray((pixels - self.mean) / self.std, dtype=np.float32)

    def __repr__(self):
        return f"ToNormalizedArray(mean={self.mean.ravel().tolist()}, std={self.std.ravel().tolist()})"


class RandomErasing:
    """With probability `probability`, replace a random rectangle of the normalised [3, H, W]
    array by standard-normal noise, per pixel and channel (timm's mode="pixel", as in DeiT).

    The rectangle covers `area` (2% to 1/3) of the image with log-uniform aspect ratio in
    (0.3, 1/0.3); ten tries at one that fits, else nothing is erased.
    """

    def __init__(self, probability=0.25, area=(0.02, 1.0 / 3.0), log_ratio=(math.log(0.3), math.log(1 / 0.3))):
        self.probability, self.area, self.log_ratio = float(probability), area, log_ratio

    def __call__(self, array, rng):
        if rng.random() >= self.probability:
            return array
        channels, height, width = array.shape
        for _ in range(10):
            target_area = height * width * rng.uniform(self.area[0], self.area[1])
            aspect = math.exp(rng.uniform(self.log_ratio[0], self.log_ratio[1]))
            erase_height = int(round(math.sqrt(target_area * aspect)))
            erase_width = int(round(math.sqrt(target_area / aspect)))
            if 0 < erase_height < height and 0 < erase_width < width:
                top = int(rng.integers(0, height - erase_height + 1))
                left = int(rng.integers(0, width - erase_width + 1))
                array = array.copy()
                noise = rng.standard_normal((channels, erase_height, erase_width), dtype=np.float32)
                array[:, top:top + erase_height, left:left + erase_width] = noise
                return array
        return array

    def __repr__(self):
        return f"RandomErasing({self.probability})"


def build_transforms(data_config, image_size, train):
    """The train (random, needs an rng) or eval (deterministic) pipeline of `data_config`.

    The result is called as `transform(pil_rgb_image, rng)` and returns float32 [3, S, S].
    """
    interpolation = interpolation_from_name(data_config.interpolation)
    size = int(image_size)
    steps = []
    if train:
        crop = check_choice("data.train_crop", data_config.train_crop, TRAIN_CROPS)
        if crop == "resize":
            steps.append(Resize(size, interpolation))
        elif crop == "random_resized_crop":
            steps.append(RandomResizedCrop(size, data_config.crop_scale, interpolation=interpolation))
        else:  # pad_crop
            steps.append(PadCrop(size, data_config.crop_padding, interpolation))
        if data_config.hflip > 0:
            steps.append(RandomHorizontalFlip(data_config.hflip))
        if data_config.auto_augment == "three_augment":
            steps.append(ThreeAugment())
        jitter = color_jitter_strength(data_config)
        if jitter > 0:
            steps.append(ColorJitter(jitter))
        if data_config.randaugment_num_ops > 0:
            steps.append(RandAugment(data_config.randaugment_num_ops, data_config.randaugment_magnitude))
        steps.append(ToNormalizedArray(data_config.mean, data_config.std))
        if data_config.random_erasing > 0:
            steps.append(RandomErasing(data_config.random_erasing))
        return Compose(steps)
    return Preprocess.from_config(data_config, size).transform()

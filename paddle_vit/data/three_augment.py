"""3-Augment (Touvron et al., "DeiT III: Revenge of the ViT", 2022) on RGB PIL images, with the
generator passed in.

Per image exactly one of three operations, chosen uniformly (probability 1/3 each):
    grayscale: L = 0.299 R + 0.587 G + 0.114 B (ITU-R 601-2 luma), rounded half up, written to
        all three channels;
    solarize: every channel value p >= 128 becomes 255 - p (DeiT III's threshold, PIL's default);
    gaussian blur: sigma uniform in [0.1, 2.0] (DeiT III's radius range, which PIL's GaussianBlur
        takes as the standard deviation), the kernel w(t) = exp(-t^2 / (2 sigma^2)) / sum_t'
        exp(-t'^2 / (2 sigma^2)) at the integers t in [-ceil(3 sigma), ceil(3 sigma)], applied
        along the rows then the columns, border pixels repeated, rounded half up.
DeiT III follows it by a colour jitter of 0.3 (data.color_jitter, `transforms.ColorJitter`) and
precedes it by a random resized crop and a horizontal flip (data.train_crop, data.hflip).
"""
import math

import numpy as np
from PIL import Image, ImageOps

SOLARIZE_THRESHOLD = 128
BLUR_SIGMA_RANGE = (0.1, 2.0)
LUMA_WEIGHTS = (0.299, 0.587, 0.114)  # R, G, B


def _to_image(pixels):
    """float [H, W, 3] -> RGB PIL image, rounded half up and clipped to 0..255."""
    return Image.fromarray(np.clip(np.floor(pixels + 0.5), 0, 255).astype(np.uint8), "RGB")


def grayscale(image):
    """Every channel the image's luma 0.299 R + 0.587 G + 0.114 B."""
    pixels = np.asarray(image, dtype=np.float64)  # [H, W, 3]
    luma = pixels @ np.asarray(LUMA_WEIGHTS)  # [H, W]
    return _to_image(np.repeat(luma[..., None], 3, axis=2))


def solarize(image, threshold=SOLARIZE_THRESHOLD):
    """p -> 255 - p for every channel value p >= threshold (PIL's, as RandAugment's solarize)."""
    return ImageOps.solarize(image, threshold=threshold)


def gaussian_kernel(sigma):
    """The normalised Gaussian weights [2 * ceil(3 sigma) + 1] at the integer offsets."""
    radius = max(1, math.ceil(3.0 * sigma))
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    weights = np.exp(-offsets ** 2 / (2.0 * sigma ** 2))
    return weights / weights.sum()


def gaussian_blur(image, sigma):
    """The image convolved with `gaussian_kernel(sigma)` along rows and columns (edges repeated)."""
    pixels = np.asarray(image, dtype=np.float64)  # [H, W, 3]
    kernel = gaussian_kernel(sigma)
    radius = len(kernel) // 2
    for axis in (0, 1):
        length = pixels.shape[axis]
        pad = [(radius, radius) if a == axis else (0, 0) for a in range(3)]
        padded = np.pad(pixels, pad, mode="edge")
        # the kernel is symmetric: correlation and convolution agree
        pixels = sum(weight * np.take(padded, np.arange(shift, shift + length), axis=axis)
                     for shift, weight in enumerate(kernel))
    return _to_image(pixels)


OPERATIONS = ("grayscale", "solarize", "gaussian_blur")


class ThreeAugment:
    """One of grayscale, solarize, gaussian blur per image, drawn from the generator: the
    operation first (rng.integers(3) over `OPERATIONS`), then the blur's sigma when it blurs."""

    def choose(self, rng):
        """(name of the operation, sigma or None) for one image."""
        name = OPERATIONS[int(rng.integers(len(OPERATIONS)))]
        sigma = float(rng.uniform(*BLUR_SIGMA_RANGE)) if name == "gaussian_blur" else None
        return name, sigma

    def __call__(self, image, rng):
        name, sigma = self.choose(rng)
        if name == "grayscale":
            return grayscale(image)
        if name == "solarize":
            return solarize(image)
        return gaussian_blur(image, sigma)

    def __repr__(self):
        return "ThreeAugment()"

"""Mixup (Zhang et al., 2018) and CutMix (Yun et al., 2019) on a batch, with DeiT/timm semantics.

Each sample i is paired with sample B-1-i of the flipped batch. lambda ~ Beta(alpha, alpha).
Mixup: x = lambda x + (1 - lambda) x_flipped. CutMix: a box of side sqrt(1 - lambda) times the
image side, centred at a uniform pixel and clipped to the image, is pasted from x_flipped;
lambda is then corrected to the fraction of the image left unpasted. The targets are
lambda * smooth(y) + (1 - lambda) * smooth(y_flipped), with smooth() the label-smoothed one-hot
(off = smoothing / C, on = 1 - smoothing + off). The generator is passed in: use
`batch_rng(seed, epoch, batch_index)` so a resumed epoch mixes as the uninterrupted one.
"""
import math

import numpy as np
import paddle
import paddle.nn.functional as F

from ..errors import ConfigError


def one_hot_smoothed(labels, num_classes, smoothing=0.0):
    """float32 [B, num_classes] targets: 1 - smoothing + smoothing / C on the label, smoothing / C off it.

    A paddle Tensor for Tensor labels, a numpy array for numpy/list labels.
    """
    off_value = smoothing / num_classes
    on_value = 1.0 - smoothing + off_value
    if isinstance(labels, paddle.Tensor):
        one_hot = F.one_hot(labels.reshape([-1]).astype("int64"), num_classes).astype("float32")
        return one_hot * (on_value - off_value) + off_value
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    targets = np.full((labels.size, num_classes), off_value, dtype=np.float32)
    targets[np.arange(labels.size), labels] = on_value
    return targets


class MixupCutmix:
    """`(images [B, 3, H, W], labels int64 [B], rng) -> (images, soft targets float32 [B, C])`.

    mixup_alpha, cutmix_alpha: Beta parameters (0 switches each off; both 0 never mixes).
    mix_prob: probability that a batch is mixed at all. switch_prob: probability of CutMix
    over Mixup when both are on. label_smoothing: applied to every target, mixed or not.
    """

    def __init__(self, mixup_alpha=0.8, cutmix_alpha=1.0, mix_prob=1.0, switch_prob=0.5,
                 label_smoothing=0.1, num_classes=1000):
        for name, value in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if value < 0:
                raise ConfigError(f"data.{name} must be >= 0, got {value}")
        for name, value in (("mix_prob", mix_prob), ("switch_prob", switch_prob), ("label_smoothing", label_smoothing)):
            if not 0 <= value <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {value}")
        self.mixup_alpha, self.cutmix_alpha = float(mixup_alpha), float(cutmix_alpha)
        self.mix_prob, self.switch_prob = float(mix_prob), float(switch_prob)
        self.label_smoothing, self.num_classes = float(label_smoothing), int(num_classes)

    @classmethod
    def from_config(cls, data_config, label_smoothing, num_classes):
        return cls(data_config.mixup_alpha, data_config.cutmix_alpha, data_config.mix_prob,
                   data_config.switch_prob, label_smoothing, num_classes)

    @property
    def active(self):
        """Whether any batch can be mixed."""
        return (self.mixup_alpha > 0 or self.cutmix_alpha > 0) and self.mix_prob > 0

    def sample(self, rng, height, width):
        """(lambda, box) for one batch: box is (top, bottom, left, right) for CutMix, None for
        Mixup; lambda 1.0 (no box) when the batch is not mixed."""
        if not self.active or rng.random() >= self.mix_prob:
            return 1.0, None
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            use_cutmix = rng.random() < self.switch_prob
        else:
            use_cutmix = self.cutmix_alpha > 0
        if not use_cutmix:
            return float(rng.beta(self.mixup_alpha, self.mixup_alpha)), None
        lam = float(rng.beta(self.cutmix_alpha, self.cutmix_alpha))
        cut_ratio = math.sqrt(1.0 - lam)
        cut_height, cut_width = int(height * cut_ratio), int(width * cut_ratio)
        center_y, center_x = int(rng.integers(0, height)), int(rng.integers(0, width))
        top, bottom = np.clip([center_y - cut_height // 2, center_y + cut_height // 2], 0, height)
        left, right = np.clip([center_x - cut_width // 2, center_x + cut_width // 2], 0, width)
        lam = 1.0 - (bottom - top) * (right - left) / float(height * width)  # the box as clipped
        return lam, (int(top), int(bottom), int(left), int(right))

    def __call__(self, images, labels, rng):
        labels = labels if isinstance(labels, paddle.Tensor) else paddle.to_tensor(np.asarray(labels, dtype=np.int64))
        height, width = images.shape[2], images.shape[3]
        lam, box = self.sample(rng, height, width)
        targets = one_hot_smoothed(labels, self.num_classes, self.label_smoothing)  # [B, C]
        if lam == 1.0:
            return images, targets
        flipped = images.flip([0])  # sample i meets sample B-1-i
        if box is None:
            images = images * lam + flipped * (1.0 - lam)
        else:
            top, bottom, left, right = box
            mask = np.zeros((1, 1, height, width), dtype=np.float32)
            mask[:, :, top:bottom, left:right] = 1.0
            mask = paddle.to_tensor(mask, dtype=images.dtype, place=images.place)
            images = images * (1.0 - mask) + flipped * mask
        targets = targets * lam + targets.flip([0]) * (1.0 - lam)
        return images, targets

"""timm's ResNet-D as a hybrid's backbone (timm's ``vit_*_resnet26d_224``, ``vit_*_resnet50d_*``).

Not the paper's ResNet-v2 (resnet.py): these hybrids are timm's own, built on its ``resnet26d`` /
``resnet50d`` (He et al., "Bag of Tricks for Image Classification with CNNs", 2019, the "D" tweaks)
with ``features_only`` and ``out_indices`` choosing the stage whose map the patch Conv2D reads:

- a deep stem: three 3x3 convolutions 32-32-64 (the first with stride 2), BatchNorm + ReLU after
  each, then a 3x3 stride-2 max pool (PyTorch's padding 1, not "SAME");
- bottleneck units (1x1, 3x3 with the stride, 1x1 to 4x the width), BatchNorm after every
  convolution, ReLU after the residual sum;
- the first unit of each stage projects its input through an average pool with the stride (2x2,
  ceil mode, the padding not counted) and then a 1x1 convolution + BatchNorm: the "D" shortcut;
- plain convolutions (no weight standardisation), BatchNorm epsilon 1e-5, in eval mode computing
  with the running mean and variance the checkpoint carries.

The layers keep timm's names (``conv1.0``, ``bn1``, ``layer1.0.downsample.1``, ...), so a timm
state dict under ``patch_embed.backbone.*`` renames one to one, the running
statistics as buffers under timm's names (``running_mean``, ``running_var``; `BatchNorm2D`).
"""
import math

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from .resnet import STAGE_CHANNELS

STEM_WIDTHS = (32, 32, 64)  # timm's stem_width=32, stem_type='deep'
BATCH_NORM_EPSILON = 1e-5  # PyTorch's BatchNorm2d default
BATCH_NORM_MOMENTUM = 0.9  # Paddle's running = 0.9 running + 0.1 batch, PyTorch's momentum 0.1


class BatchNorm2D(nn.Layer):
    """PyTorch's BatchNorm2d, [B, C, H, W] -> [B, C, H, W]: in training the batch's statistics
    (and the running ones updated, momentum 0.1), in eval mode the running mean and variance.

    Paddle's nn.BatchNorm2D keeps those two as (frozen) parameters, which every parameter count,
    optimizer group and weight-decay list would then hold; here they are buffers, as in PyTorch,
    under timm's names (``running_mean``, ``running_var``), in the state dict and not trained."""

    def __init__(self, channels):
        super().__init__()
        self.weight = self.create_parameter([channels], default_initializer=nn.initializer.Constant(1.0))
        self.bias = self.create_parameter([channels], is_bias=True, default_initializer=nn.initializer.Constant(0.0))
        self.register_buffer("running_mean", paddle.zeros([channels]))
        self.register_buffer("running_var", paddle.ones([channels]))

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=self.training,
                            momentum=BATCH_NORM_MOMENTUM, epsilon=BATCH_NORM_EPSILON)


def batch_norm(channels):
    return BatchNorm2D(channels)


def conv(in_channels, out_channels, kernel_size, stride=1):
    return nn.Conv2D(in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2,
                     bias_attr=False)


class Bottleneck(nn.Layer):
    """A bottleneck unit, [B, I, H, W] -> [B, O, H/s, W/s], O = 4 x its width, BatchNorm after each
    convolution: relu(x' + bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))))), x' the input, or for
    the first unit of a stage conv(avgpool(x)) with its BatchNorm (`downsample`)."""

    def __init__(self, in_channels, out_channels, stride, projection):
        super().__init__()
        width = out_channels // 4
        self.conv1 = conv(in_channels, width, 1)
        self.bn1 = batch_norm(width)
        self.conv2 = conv(width, width, 3, stride)  # the stride sits on the 3x3
        self.bn2 = batch_norm(width)
        self.conv3 = conv(width, out_channels, 1)
        self.bn3 = batch_norm(out_channels)
        self.act = nn.ReLU()
        # timm's downsample_avg: Sequential(pool, conv, norm), the pool an Identity without a stride
        pool = (nn.AvgPool2D(2, stride=stride, ceil_mode=True, exclusive=True) if stride > 1 else nn.Identity())
        self.downsample = (nn.Sequential(pool, conv(in_channels, out_channels, 1), batch_norm(out_channels))
                           if projection else nn.Identity())

    def forward(self, x):
        shortcut = self.downsample(x)  # [B, O, H/s, W/s]
        y = self.act(self.bn1(self.conv1(x)))  # [B, I, H, W] -> [B, O/4, H, W]
        y = self.act(self.bn2(self.conv2(y)))  # [B, O/4, H, W] -> [B, O/4, H/s, W/s]
        y = self.bn3(self.conv3(y))  # [B, O/4, H/s, W/s] -> [B, O, H/s, W/s]
        return self.act(y + shortcut)


class ResNetD(nn.Layer):
    """The hybrid's backbone, [B, C, H, W] -> feature map [B, F, H/S, W/S] (timm's ResNet with
    ``stem_type='deep', stem_width=32, avg_down=True``, ``features_only`` up to its last stage).

    Args:
        layers: units per stage, e.g. (2, 2, 2, 2) (resnet26d), (3, 4, 6, 3) (resnet50d), (3, 4, 6)
            (resnet50d up to stage 3, stride 16); () keeps the stem alone (stride 4).
        in_channels: image channels.

    Attributes: out_channels (F), stride (S, the product of every stride).
    """

    def __init__(self, layers=(2, 2, 2, 2), in_channels=3):
        super().__init__()
        first, second, stem_channels = STEM_WIDTHS
        self.conv1 = nn.Sequential(conv(in_channels, first, 3, 2), batch_norm(first), nn.ReLU(),
                                   conv(first, second, 3), batch_norm(second), nn.ReLU(),
                                   conv(second, stem_channels, 3))
        self.bn1 = batch_norm(stem_channels)
        self.act = nn.ReLU()
        self.maxpool = nn.MaxPool2D(kernel_size=3, stride=2, padding=1)
        channels, self.stride = stem_channels, 4
        self.stages = []
        for index, depth in enumerate(layers):
            out_channels, stride = STAGE_CHANNELS[index], 1 if index == 0 else 2
            stage = nn.Sequential(*[Bottleneck(channels if unit == 0 else out_channels, out_channels,
                                               stride if unit == 0 else 1, projection=unit == 0)
                                    for unit in range(depth)])
            self.add_sublayer(f"layer{index + 1}", stage)  # timm's names: layer1 .. layer4
            self.stages.append(stage)
            channels, self.stride = out_channels, self.stride * stride
        self.out_channels = channels
        self.layers = tuple(layers)

    def forward(self, x):
        x = self.act(self.bn1(self.conv1(x)))  # [B, C, H, W] -> [B, 64, H/2, W/2]
        x = self.maxpool(x)  # [B, 64, H/4, W/4]
        for stage in self.stages:
            x = stage(x)  # stride 1 for the first stage, 2 for the others
        return x  # [B, F, H/S, W/S]

    def first_conv_weight(self):
        """The weights of the convolution that sees pixels, [32, C, 3, 3]."""
        return self.conv1[0].weight

    def init_weights(self):
        """As timm initialises its ResNet: He-normal (fan-out) convolutions, BatchNorm 1 / 0, and
        the last BatchNorm of every unit 0 (zero_init_last), so that each unit starts as its shortcut."""
        for layer in self.sublayers():
            if isinstance(layer, nn.Conv2D):
                fan_out = layer.weight.shape[0] * layer.weight.shape[2] * layer.weight.shape[3]
                nn.initializer.Normal(std=math.sqrt(2.0 / fan_out))(layer.weight)
            elif isinstance(layer, BatchNorm2D):
                nn.initializer.Constant(1.0)(layer.weight)
                nn.initializer.Constant(0.0)(layer.bias)
        for layer in self.sublayers():
            if isinstance(layer, Bottleneck):
                nn.initializer.Constant(0.0)(layer.bn3.weight)


def resnet_d_macs(layers, in_channels, image_size):
    """Multiply-accumulates of the ResNet-D's convolutions for one image, counted analytically
    (the sides as PyTorch's padded convolutions and ceil-mode pools give them: ceil(side / stride))."""
    rows, cols = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    macs = 0

    def convolve(channels_in, channels_out, kernel, stride):
        nonlocal rows, cols, macs
        out_rows, out_cols = -(-rows // stride), -(-cols // stride)
        macs += out_rows * out_cols * channels_out * channels_in * kernel * kernel
        return out_rows, out_cols

    first, second, channels = STEM_WIDTHS
    rows, cols = convolve(in_channels, first, 3, 2)
    rows, cols = convolve(first, second, 3, 1)
    rows, cols = convolve(second, channels, 3, 1)
    rows, cols = -(-rows // 2), -(-cols // 2)  # the max pool
    for index, depth in enumerate(layers):
        out_channels, stride = STAGE_CHANNELS[index], 1 if index == 0 else 2
        for unit in range(depth):
            unit_stride, unit_in = (stride, channels) if unit == 0 else (1, out_channels)
            convolve(unit_in, out_channels // 4, 1, 1)
            rows, cols = convolve(out_channels // 4, out_channels // 4, 3, unit_stride)
            convolve(out_channels // 4, out_channels, 1, 1)
            if unit == 0:  # the projection, after the average pool
                convolve(unit_in, out_channels, 1, 1)
        channels = out_channels
    return macs

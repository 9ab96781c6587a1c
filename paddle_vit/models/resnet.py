"""The ResNet-v2 of the paper's hybrid models (Section 3.1 "Hybrid Architecture"; BiT style).

The paper's hybrids feed the Transformer the feature map of a ResNet instead of image patches.
That ResNet (Kolesnikov et al., "Big Transfer", as in ``vit_jax/models_resnet.py`` and timm's
``resnetv2.py`` with ``preact=False``):

- every convolution standardises its weights (`StdConv2D`) and pads "SAME" (TensorFlow's
  rule: the padding that keeps ceil(size / stride), the odd pixel at the end);
- GroupNorm with 32 groups instead of BatchNorm;
- a stem: 7x7 stride-2 convolution, GroupNorm, ReLU, 3x3 stride-2 max pool ("SAME");
- bottleneck units (1x1, 3x3 with the stride, 1x1 to 4x the width), the first of each stage
  with a 1x1 projection of its input, post-activation (ReLU after the residual sum);
- stages of (3, 4, 9) units for R50 in the B/16 hybrid (stride 16: the paper drops stage 4 and
  moves its units to stage 3), (2, 2, 2, 2) for R26 (stride 32), (3, 4, 6, 3) for the L/32 hybrid,
  and the stem alone for the tiny hybrid (stride 4).

The two codes standardise and normalise with different constants, and a checkpoint computes as
its own code does (`STYLES`):
- "timm": w = (w - mean) / sqrt(var + 1e-8), GroupNorm epsilon 1e-5;
- "jax":  w = (w - mean) / (std + 1e-5),     GroupNorm epsilon 1e-6 (flax's default).
"""
import math

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

# style -> (weight standardisation: epsilon, whether it goes inside the square root; GroupNorm epsilon)
STYLES = {"timm": dict(std_epsilon=1e-8, epsilon_in_sqrt=True, group_norm_epsilon=1e-5),
          "jax": dict(std_epsilon=1e-5, epsilon_in_sqrt=False, group_norm_epsilon=1e-6)}
GROUPS = 32
STEM_CHANNELS = 64
STAGE_CHANNELS = (256, 512, 1024, 2048)  # output width of each stage, 4x its bottleneck width


def same_output_size(size, stride):
    """The output side of a "SAME" convolution or pool: ceil(size / stride)."""
    return -(-size // stride)


class StdConv2D(nn.Conv2D):
    """Conv2D with weight standardisation and "SAME" padding, [B, I, H, W] -> [B, O, H/s, W/s].

    Each output filter is standardised over its (I, kh, kw) inputs before the convolution:
    ``(w - mean) / sqrt(var + eps)`` (timm) or ``(w - mean) / (std + eps)`` (vit_jax).
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, style="timm"):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding="SAME", bias_attr=False)
        self.std_epsilon = STYLES[style]["std_epsilon"]
        self.epsilon_in_sqrt = STYLES[style]["epsilon_in_sqrt"]

    def standardized_weight(self):
        weight = self.weight  # [O, I, kh, kw]
        centred = weight - weight.mean(axis=[1, 2, 3], keepdim=True)  # [O, I, kh, kw] - [O, 1, 1, 1]
        variance = (centred * centred).mean(axis=[1, 2, 3], keepdim=True)  # [O, 1, 1, 1], biased, as both codes
        return self.standardize(centred, variance)

    def standardize(self, centred, variance):
        if self.epsilon_in_sqrt:
            return centred / paddle.sqrt(variance + self.std_epsilon)
        return centred / (paddle.sqrt(variance) + self.std_epsilon)

    def forward(self, x):
        return F.conv2d(x, self.standardized_weight(), stride=self._stride, padding="SAME")


def group_norm(channels, style):
    return nn.GroupNorm(num_groups=GROUPS, num_channels=channels, epsilon=STYLES[style]["group_norm_epsilon"])


class Stem(nn.Layer):
    """[B, C, H, W] -> [B, 64 w, H/4, W/4]: 7x7/2 StdConv, GroupNorm, ReLU, 3x3/2 max pool."""

    def __init__(self, in_channels, channels, style):
        super().__init__()
        self.conv = StdConv2D(in_channels, channels, 7, stride=2, style=style)
        self.norm = group_norm(channels, style)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.conv(x)  # [B, C, H, W] -> [B, 64 w, H/2, W/2]
        x = self.act(self.norm(x))
        return F.max_pool2d(x, kernel_size=3, stride=2, padding="SAME")  # [B, 64 w, H/4, W/4]


class Downsample(nn.Layer):
    """The projection shortcut of a stage's first unit: 1x1 StdConv with the stride, GroupNorm."""

    def __init__(self, in_channels, out_channels, stride, style):
        super().__init__()
        self.conv = StdConv2D(in_channels, out_channels, 1, stride=stride, style=style)
        self.norm = group_norm(out_channels, style)

    def forward(self, x):
        return self.norm(self.conv(x))  # [B, I, H, W] -> [B, O, H/s, W/s]


class Bottleneck(nn.Layer):
    """A bottleneck unit, [B, I, H, W] -> [B, O, H/s, W/s], O = 4 x its width:
    relu(x' + norm3(conv3(relu(norm2(conv2(relu(norm1(conv1(x))))))))), x' the (projected) input."""

    def __init__(self, in_channels, out_channels, stride, projection, style):
        super().__init__()
        width = out_channels // 4
        self.downsample = Downsample(in_channels, out_channels, stride, style) if projection else None
        self.conv1 = StdConv2D(in_channels, width, 1, style=style)
        self.norm1 = group_norm(width, style)
        self.conv2 = StdConv2D(width, width, 3, stride=stride, style=style)  # the stride sits on the 3x3
        self.norm2 = group_norm(width, style)
        self.conv3 = StdConv2D(width, out_channels, 1, style=style)
        self.norm3 = group_norm(out_channels, style)
        self.act = nn.ReLU()

    def forward(self, x):
        shortcut = self.downsample(x) if self.downsample is not None else x  # [B, O, H/s, W/s]
        x = self.act(self.norm1(self.conv1(x)))  # [B, I, H, W] -> [B, O/4, H, W]
        x = self.act(self.norm2(self.conv2(x)))  # [B, O/4, H, W] -> [B, O/4, H/s, W/s]
        x = self.norm3(self.conv3(x))  # [B, O/4, H/s, W/s] -> [B, O, H/s, W/s]
        return self.act(x + shortcut)


class ResNetStage(nn.Layer):
    """`depth` bottleneck units; the first projects its input and carries the stride."""

    def __init__(self, in_channels, out_channels, depth, stride, style):
        super().__init__()
        self.blocks = nn.LayerList([
            Bottleneck(in_channels if index == 0 else out_channels, out_channels, stride if index == 0 else 1,
                       projection=index == 0, style=style)
            for index in range(depth)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class ResNetV2(nn.Layer):
    """The hybrid's backbone, [B, C, H, W] -> feature map [B, F, H/S, W/S].

    Args:
        layers: units per stage, e.g. (3, 4, 9); () keeps the stem alone.
        width: the width factor (1 in every hybrid the paper and timm name).
        in_channels: image channels.
        style: "timm" or "jax": whose weight standardisation and GroupNorm epsilon (`STYLES`).

    Attributes: out_channels (F), stride (S, the product of every stride).
    """

    def __init__(self, layers=(3, 4, 9), width=1, in_channels=3, style="timm"):
        super().__init__()
        stem_channels = STEM_CHANNELS * width
        self.stem = Stem(in_channels, stem_channels, style)
        self.stages = nn.LayerList()
        channels, self.stride = stem_channels, 4
        for index, depth in enumerate(layers):
            out_channels = STAGE_CHANNELS[index] * width
            stride = 1 if index == 0 else 2
            self.stages.append(ResNetStage(channels, out_channels, depth, stride, style))
            channels, self.stride = out_channels, self.stride * stride
        self.out_channels = channels
        self.layers = tuple(layers)

    def forward(self, x):
        x = self.stem(x)  # [B, C, H, W] -> [B, 64 w, H/4, W/4]
        for stage in self.stages:
            x = stage(x)  # stride 1 for the first stage, 2 for the others
        return x  # [B, F, H/S, W/S]

    def first_conv_weight(self):
        """The weights of the convolution that sees pixels, standardised, [64 w, C, 7, 7]."""
        return self.stem.conv.standardized_weight()

    def init_weights(self):
        """As timm initialises ResNetV2: He-normal (fan-out) convolutions, GroupNorm 1 / 0, and
        the last GroupNorm of every unit 0, so that each unit starts as its shortcut."""
        for layer in self.sublayers():
            if isinstance(layer, StdConv2D):
                fan_out = layer.weight.shape[0] * layer.weight.shape[2] * layer.weight.shape[3]
                nn.initializer.Normal(std=math.sqrt(2.0 / fan_out))(layer.weight)
            elif isinstance(layer, nn.GroupNorm):
                nn.initializer.Constant(1.0)(layer.weight)
                nn.initializer.Constant(0.0)(layer.bias)
        for layer in self.sublayers():
            if isinstance(layer, Bottleneck):
                nn.initializer.Constant(0.0)(layer.norm3.weight)


def backbone_feature_size(layers, image_size):
    """(rows, cols) of the feature map of a `ResNetV2` with `layers` for an image of `image_size`."""
    sizes = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    strides = [2, 2] + [1 if index == 0 else 2 for index in range(len(layers))]  # stem conv, pool, stages
    for stride in strides:
        sizes = tuple(same_output_size(size, stride) for size in sizes)
    return sizes


def backbone_channels(layers, width=1):
    return (STAGE_CHANNELS[len(layers) - 1] if layers else STEM_CHANNELS) * width


def backbone_macs(layers, width, in_channels, image_size):
    """Multiply-accumulates of the backbone's convolutions for one image, counted analytically."""
    rows, cols = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    macs = 0

    def conv(channels_in, channels_out, kernel, stride):
        nonlocal rows, cols, macs
        rows, cols = same_output_size(rows, stride), same_output_size(cols, stride)
        macs += rows * cols * channels_out * channels_in * kernel * kernel

    channels = STEM_CHANNELS * width
    conv(in_channels, channels, 7, 2)
    rows, cols = same_output_size(rows, 2), same_output_size(cols, 2)  # the max pool
    for index, depth in enumerate(layers):
        out_channels, stride = STAGE_CHANNELS[index] * width, 1 if index == 0 else 2
        for unit in range(depth):
            unit_stride, unit_in = (stride, channels) if unit == 0 else (1, out_channels)
            in_rows, in_cols = rows, cols
            if unit == 0:  # the projection, from the unit's input
                conv(unit_in, out_channels, 1, unit_stride)
                rows, cols = in_rows, in_cols
            conv(unit_in, out_channels // 4, 1, 1)
            conv(out_channels // 4, out_channels // 4, 3, unit_stride)
            conv(out_channels // 4, out_channels, 1, 1)
        channels = out_channels
    return macs

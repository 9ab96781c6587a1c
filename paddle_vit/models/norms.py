"""The norm a model's blocks use: LayerNorm (the paper) or RMSNorm (timm's norm_layer="rmsnorm").

RMSNorm (Zhang and Sennrich 2019) scales each token by the root of its mean square, without
subtracting the mean and without a bias: x * rsqrt(mean(x^2) + eps) * weight, as timm's `RmsNorm`.
`norm_layer` builds the one a `ViTConfig` names; the modules call it in their constructors, so no
forward pass asks which norm it has.
"""
import paddle
import paddle.nn as nn

# "layernorm": Paddle's LayerNorm (weight and bias); "rmsnorm": RMSNorm below (weight only)
NORMS = ("layernorm", "rmsnorm")


class RMSNorm(nn.Layer):
    """[..., D] -> [..., D]: x / sqrt(mean(x^2 over D) + epsilon) * weight (timm's RmsNorm; its
    parameter is `weight`, D numbers starting at 1)."""

    def __init__(self, width, epsilon=1e-6):
        super().__init__()
        self._epsilon = epsilon
        self.weight = self.create_parameter(shape=[width], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x):
        mean_square = x.astype("float32").pow(2).mean(axis=-1, keepdim=True)  # [..., 1]
        x = x * paddle.rsqrt(mean_square + self._epsilon).astype(x.dtype)  # [..., D]
        return x * self.weight.astype(x.dtype)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, epsilon={self._epsilon}"


def norm_layer(kind, width, epsilon):
    """The norm `kind` ("layernorm" or "rmsnorm", see NORMS) over the last axis of `width`."""
    return RMSNorm(width, epsilon) if kind == "rmsnorm" else nn.LayerNorm(width, epsilon=epsilon)

"""The Transformer encoder (paper Eq. 2-4): Mlp, pre-norm EncoderLayer, the Encoder stack."""
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.distributed.fleet.utils import recompute

from .attention import Attention
from .block_parts import NormedMlp, SwiGLU, build_attention_projection, build_qkv
from .rope import rope_of_layer
from .norms import norm_layer

LAYER_NORM_EPSILON = 1e-6  # ViT's value; Paddle's LayerNorm default is 1e-5
# "exact": GELU with the Gaussian CDF (timm, PyTorch, Paddle, Hugging Face "gelu"); "tanh": its tanh
# approximation, flax's nn.gelu default, which the original JAX checkpoints (and SigLIP) were trained
# with; "quick": OpenAI CLIP's x * sigmoid(1.702 x), which its released weights need
GELUS = ("exact", "tanh", "quick")
# "standard": Linear, GELU, Linear (the paper); "swiglu": DINOv2 giant's gated MLP, gate and value
# packed in one Linear int(D * mlp_ratio) wide (timm's SwiGLUPacked); "swiglu_packed": EVA-02 tiny and
# small's, each of the two int(D * mlp_ratio) wide (timm's GluMlp); "swiglu_split": the two as separate
# Linears (EVA-02 base and large, DINOv3 H+; block_parts.SwiGLU)
MLPS = ("standard", "swiglu", "swiglu_packed", "swiglu_split")


class QuickGELU(nn.Layer):
    """OpenAI CLIP's GELU approximation, x * sigmoid(1.702 x) (timm's act_layer="quick_gelu")."""

    def forward(self, x):
        return x * F.sigmoid(1.702 * x)


def gelu_layer(gelu):
    """The activation layer of `gelu` ("exact", "tanh" or "quick")."""
    return QuickGELU() if gelu == "quick" else nn.GELU(approximate=gelu == "tanh")


class Mlp(nn.Layer):
    """Two Linear layers with a GELU between (paper Eq. 3), [B, N, D] -> [B, N, D].

    Args:
        gelu: "exact", "tanh" (the original JAX code's) or "quick" (OpenAI CLIP's), see `GELUS`.
    """

    def __init__(self, embed_dim, mlp_ratio=4.0, dropout=0.0, gelu="exact"):
        super().__init__()
        hidden_dim = int(embed_dim * mlp_ratio)
        self.fc1 = nn.Linear(embed_dim, hidden_dim)
        self.act = gelu_layer(gelu)
        self.fc2 = nn.Linear(hidden_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.fc1(x)  # [B, N, D] -> [B, N, mlp_ratio * D]
        x = self.act(x)
        x = self.dropout(x)
        x = self.fc2(x)  # [B, N, mlp_ratio * D] -> [B, N, D]
        x = self.dropout(x)
        return x


class SwiGLUMlp(nn.Layer):
    """DINOv2 giant's gated MLP, [B, N, D] -> [B, N, D]: one Linear to 2 h, halved into a gate and
    a value, SiLU(gate) * value, a Linear back (timm's SwiGLUPacked; transformers' SwiGLUFFN has
    the same layout: `weights_in`, `weights_out`). h = int(D * mlp_ratio) / 2, as timm counts it, or
    `gate_dim` (EVA-02 tiny and small, timm's GluMlp: int(D * mlp_ratio) each for gate and value)."""

    def __init__(self, embed_dim, mlp_ratio=4.0, dropout=0.0, gate_dim=None):
        super().__init__()
        hidden_dim = 2 * gate_dim if gate_dim is not None else int(embed_dim * mlp_ratio)
        self.fc1 = nn.Linear(embed_dim, hidden_dim)
        self.act = nn.Silu()
        self.fc2 = nn.Linear(hidden_dim // 2, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        gate, value = self.fc1(x).chunk(2, axis=-1)  # [B, N, D] -> 2 x [B, N, h]
        x = self.act(gate) * value  # [B, N, h]
        x = self.dropout(x)
        x = self.fc2(x)  # [B, N, h] -> [B, N, D]
        return self.dropout(x)


class LayerScale(nn.Layer):
    """A learned per-channel factor on a residual branch, [B, N, D] -> [B, N, D] (CaiT; DeiT III and
    DINOv2 train with it): `gamma`, D numbers starting at `init_value` (timm's init_values)."""

    def __init__(self, embed_dim, init_value=1e-5):
        super().__init__()
        self.gamma = self.create_parameter(shape=[embed_dim],
                                           default_initializer=nn.initializer.Constant(init_value))

    def forward(self, x):
        return x * self.gamma


class DropPath(nn.Layer):
    """Stochastic depth: in training, skip a residual branch for a random subset of samples.

    Each sample's branch output is kept with probability 1 - drop_prob and scaled by
    1 / (1 - drop_prob), so its expectation is unchanged; in eval mode it is the identity.
    """

    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep_prob = 1.0 - self.drop_prob
        mask_shape = [x.shape[0]] + [1] * (x.ndim - 1)  # [B, 1, 1]: one coin per sample
        mask = paddle.bernoulli(paddle.full(mask_shape, keep_prob, dtype=x.dtype))
        return x / keep_prob * mask

    def extra_repr(self):
        return f"drop_prob={self.drop_prob}"


class EncoderLayer(nn.Layer):
    """Pre-norm Transformer block, [B, N, D] -> [B, N, D]:
    x = x + attn(norm1(x)); x = x + mlp(norm2(x)) (paper Eq. 2 and 3).

    Args:
        config: the model's `ViTConfig` (embed_dim, num_heads, qkv_bias, qk_scale, mlp_ratio, mlp,
            gelu, layer_norm_epsilon, layer_scale, dropout, attention_dropout, fused_attention are read;
            qkv, attention_norm, proj_bias, mlp_norm, mlp_bias and mlp_align_to choose the later ViTs'
            parts, block_parts.py).
            Layer scale that is off (None, the paper) is an Identity, as in timm's Block; `norm`
            chooses LayerNorm or RMSNorm for norm1 and norm2 (models/norms.py).
        drop_path: this layer's stochastic-depth rate (the Encoder spreads config.drop_path).
    """

    def __init__(self, config, drop_path=0.0):
        super().__init__()
        self.config = config  # what the layer was built from: a variant computing it another way checks it
        embed_dim = config.embed_dim
        self.norm1 = norm_layer(config.norm, embed_dim, config.layer_norm_epsilon)
        all_head_dim = embed_dim // config.num_heads * config.num_heads
        self.attn = Attention(embed_dim, config.num_heads, qkv_bias=config.qkv_bias, dropout=config.dropout,
                              attention_dropout=config.attention_dropout, fused=config.fused_attention,
                              qk_scale=config.qk_scale, qkv=build_qkv(config, all_head_dim),
                              proj=build_attention_projection(config, all_head_dim))
        self.ls1 = LayerScale(embed_dim, config.layer_scale) if config.layer_scale is not None else nn.Identity()
        self.drop_path = DropPath(drop_path)
        self.norm2 = norm_layer(config.norm, embed_dim, config.layer_norm_epsilon)
        if config.mlp == "swiglu":
            self.mlp = SwiGLUMlp(embed_dim, config.mlp_ratio, config.dropout)
        elif config.mlp == "swiglu_packed":
            self.mlp = SwiGLUMlp(embed_dim, config.mlp_ratio, config.dropout, gate_dim=int(embed_dim * config.mlp_ratio))
        elif config.mlp == "swiglu_split":
            self.mlp = SwiGLU(embed_dim, config.mlp_ratio, config.dropout,
                              norm_epsilon=config.layer_norm_epsilon if config.mlp_norm else None,
                              align_to=config.mlp_align_to, norm=config.norm, bias=config.mlp_bias)
        elif config.mlp_norm:
            self.mlp = NormedMlp(embed_dim, config.mlp_ratio, config.dropout, gelu_layer(config.gelu),
                                 config.layer_norm_epsilon, config.norm)
        else:
            self.mlp = Mlp(embed_dim, config.mlp_ratio, config.dropout, gelu=config.gelu)
        self.ls2 = LayerScale(embed_dim, config.layer_scale) if config.layer_scale is not None else nn.Identity()

    def forward(self, x, return_attention=False, rope=None):
        """x: [B, N, D]. Returns [B, N, D], and the attention weights [B, H, N, N] when asked.
        rope: the rotary position embedding for this layer (RoPE ViTs), handed to the attention."""
        attended = self.attn(self.norm1(x), return_attention=return_attention, rope=rope)
        if return_attention:
            attended, weights = attended
        x = x + self.drop_path(self.ls1(attended))  # [B, N, D]
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))  # [B, N, D]
        return (x, weights) if return_attention else x


class Encoder(nn.Layer):
    """`config.depth` EncoderLayers and a final LayerNorm (paper Eq. 4), [B, N, D] -> [B, N, D].

    Args:
        config: the model's `ViTConfig`. Its drop_path is the stochastic-depth rate of the last
            layer; the rate rises linearly from 0 at the first. With `pre_norm` (CLIP's `ln_pre`)
            a LayerNorm runs before the first layer; otherwise `norm_pre` is an Identity.
        final_norm: False when the head normalises after pooling instead (timm's `fc_norm`
            for average pooling), so that those checkpoints load one to one, or when the model
            has no final norm at all (`config.final_norm` False). The norms are `config.norm`'s.
    """

    def __init__(self, config, final_norm=True):
        super().__init__()
        depth = config.depth
        drop_path_rates = [config.drop_path * i / max(depth - 1, 1) for i in range(depth)]
        self.norm_pre = (norm_layer(config.norm, config.embed_dim, config.layer_norm_epsilon) if config.pre_norm
                         else nn.Identity())
        self.layers = nn.LayerList([EncoderLayer(config, rate) for rate in drop_path_rates])
        self.recompute = config.recompute
        self.norm = (norm_layer(config.norm, config.embed_dim, config.layer_norm_epsilon) if final_norm
                     else nn.Identity())

    def forward(self, x, return_attention=False, rope=None):
        """x: [B, N, D]. Returns [B, N, D], and a list of depth x [B, H, N, N] weights when asked.
        rope: the rotary position embedding of the input's grid (RoPE ViTs; models/rope.py)."""
        attentions = []
        recompute_every = self.recompute if self.training and paddle.is_grad_enabled() else 0
        x = self.norm_pre(x)
        for index, layer in enumerate(self.layers):
            layer_rope = rope_of_layer(rope, index)  # mixed RoPE: this layer's frequencies
            if return_attention:
                x, weights = layer(x, return_attention=True, rope=layer_rope)
                attentions.append(weights)
            elif recompute_every and index % recompute_every == 0:
                x = recompute(layer, x, False, layer_rope)  # only x is kept; the layer runs again in the backward pass
            else:
                x = layer(x, rope=layer_rope)
        x = self.norm(x)
        return (x, attentions) if return_attention else x

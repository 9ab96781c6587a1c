"""The parts in which the blocks of later ViTs differ from the paper's, each a small module that
`EncoderLayer` builds in place of the walkthrough's when the `ViTConfig` asks for it, so that the
walkthrough's `Attention.forward` and `EncoderLayer.forward` run unchanged:

- how q, k and v are projected (`ViTConfig.qkv`): the walkthrough's one Linear with a bias
  ("fused"), one Linear with biases for q and v only (EVA-02, DINOv3 ``_qkvb``: timm's
  ``q_bias``/``v_bias``; "fused_qv_bias"), or three Linears, k without bias (EVA-02 CLIP:
  "separate"). Each returns [B, N, 3 H d] as the walkthrough's ``qkv`` does;
- a norm over the heads' output before the projection (EVA-02 CLIP's ``scale_attn_inner``, BEiT-3's
  ``inner_attn_ln``: `NormedProjection`), and an output projection without a bias (AIMv2);
- a gated MLP with separate gate and value Linears (`SwiGLU`: EVA-02 base and large, DINOv3 H+
  and 7B, AIMv2), with a norm over its hidden width (EVA-02's ``scale_mlp``), a hidden width
  rounded up (``swiglu_align_to``) and no biases (AIMv2) where the checkpoint has them. (EVA-02 tiny
  and small pack the two in one Linear: encoder.SwiGLUMlp, mlp "swiglu_packed");
- the walkthrough's MLP with a norm over its hidden width after the GELU (BEiT-3's
  ``ffn_layernorm``, timm's Mlp with a norm_layer: `NormedMlp`).

The norms are the kind `ViTConfig.norm` names (norms.py), as timm builds them with its block's
norm_layer.
"""
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from .norms import norm_layer

QKV_LAYOUTS = ("fused", "fused_qv_bias", "separate")


class QVBiasLinear(nn.Layer):
    """q, k and v from one matrix, with biases for q and v only (k's is zero, as in BEiT, EVA and
    DINOv3): [B, N, D] -> [B, N, 3 H d]."""

    def __init__(self, embed_dim, all_head_dim):
        super().__init__()
        self.weight = self.create_parameter([embed_dim, 3 * all_head_dim])
        self.q_bias = self.create_parameter([all_head_dim], is_bias=True)
        self.v_bias = self.create_parameter([all_head_dim], is_bias=True)

    def forward(self, x):
        bias = paddle.concat([self.q_bias, paddle.zeros_like(self.q_bias), self.v_bias])  # [3 H d]
        return F.linear(x, self.weight, bias)  # [B, N, 3 H d]


class SeparateQKV(nn.Layer):
    """Three projections, k's without a bias (EVA-02 CLIP, timm's qkv_fused=False):
    [B, N, D] -> [B, N, 3 H d], q, k and v side by side as the walkthrough's one Linear gives them."""

    def __init__(self, embed_dim, all_head_dim, qkv_bias=True):
        super().__init__()
        bias = None if qkv_bias else False
        self.q_proj = nn.Linear(embed_dim, all_head_dim, bias_attr=bias)
        self.k_proj = nn.Linear(embed_dim, all_head_dim, bias_attr=False)
        self.v_proj = nn.Linear(embed_dim, all_head_dim, bias_attr=bias)

    def forward(self, x):
        return paddle.concat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], axis=-1)  # [B, N, 3 H d]


def build_qkv(config, all_head_dim):
    """The q/k/v projection `config.qkv` names, [B, N, D] -> [B, N, 3 H d]."""
    if config.qkv == "fused_qv_bias":
        return QVBiasLinear(config.embed_dim, all_head_dim)
    if config.qkv == "separate":
        return SeparateQKV(config.embed_dim, all_head_dim, config.qkv_bias)
    return None  # the walkthrough's Linear, which Attention builds


class NormedProjection(nn.Linear):
    """The output projection with a norm over the heads' concatenated output (all H d channels)
    first (EVA-02 CLIP's scale_attn_inner, after NormFormer; BEiT-3): [B, N, H d] -> [B, N, D]. A
    Linear (its weight and bias where the walkthrough's are) that holds its norm."""

    def __init__(self, all_head_dim, embed_dim, epsilon, norm="layernorm", bias=True):
        super().__init__(all_head_dim, embed_dim, bias_attr=None if bias else False)
        self.norm = norm_layer(norm, all_head_dim, epsilon)

    def forward(self, x):
        return super().forward(self.norm(x))


def build_attention_projection(config, all_head_dim):
    """The output projection: with `config.attention_norm` a `NormedProjection`, without
    `config.proj_bias` a Linear without a bias (AIMv2), else None (the walkthrough's Linear, which
    Attention builds)."""
    if config.attention_norm:
        return NormedProjection(all_head_dim, config.embed_dim, config.layer_norm_epsilon, config.norm,
                                config.proj_bias)
    if not config.proj_bias:
        return nn.Linear(all_head_dim, config.embed_dim, bias_attr=False)
    return None


def swiglu_hidden_dim(embed_dim, mlp_ratio, align_to=0):
    """h of `SwiGLU`: int(D * mlp_ratio), rounded up to a multiple of `align_to` (0: as it is)."""
    hidden_dim = int(embed_dim * mlp_ratio)
    return hidden_dim + (-hidden_dim % align_to if align_to else 0)


class SwiGLU(nn.Layer):
    """A gated MLP, [B, N, D] -> [B, N, D]: SiLU(x W_g) * (x W_x), an optional norm over the
    hidden width h (EVA-02's scale_mlp), then a Linear back. h = int(D * mlp_ratio), rounded up to
    a multiple of `align_to` (DINOv3 H+: 8, 7B: 64), as timm's SwiGLU; `bias` False: Linears
    without biases (AIMv2)."""

    def __init__(self, embed_dim, mlp_ratio, dropout=0.0, norm_epsilon=None, align_to=0, norm="layernorm",
                 bias=True):
        super().__init__()
        hidden_dim = swiglu_hidden_dim(embed_dim, mlp_ratio, align_to)
        bias_attr = None if bias else False
        self.fc1_g = nn.Linear(embed_dim, hidden_dim, bias_attr=bias_attr)
        self.fc1_x = nn.Linear(embed_dim, hidden_dim, bias_attr=bias_attr)
        self.act = nn.Silu()
        self.norm = norm_layer(norm, hidden_dim, norm_epsilon) if norm_epsilon is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden_dim, embed_dim, bias_attr=bias_attr)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.act(self.fc1_g(x)) * self.fc1_x(x)  # [B, N, D] -> [B, N, h]
        x = self.dropout(x)
        x = self.norm(x)
        x = self.fc2(x)  # [B, N, h] -> [B, N, D]
        return self.dropout(x)




class NormedMlp(nn.Layer):
    """The walkthrough's MLP with a norm over its hidden width after the GELU, [B, N, D] -> [B, N, D]:
    fc1, GELU, norm, fc2 (BEiT-3's ffn_layernorm; timm's Mlp with a norm_layer). The walkthrough's
    `Mlp` (encoder.py) stays as it is; this is built in its place when `ViTConfig.mlp_norm` asks."""

    def __init__(self, embed_dim, mlp_ratio, dropout, activation, norm_epsilon, norm="layernorm"):
        super().__init__()
        hidden_dim = int(embed_dim * mlp_ratio)
        self.fc1 = nn.Linear(embed_dim, hidden_dim)
        self.act = activation
        self.norm = norm_layer(norm, hidden_dim, norm_epsilon)
        self.fc2 = nn.Linear(hidden_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.fc1(x)  # [B, N, D] -> [B, N, h]
        x = self.act(x)
        x = self.dropout(x)
        x = self.norm(x)  # [B, N, h]
        x = self.fc2(x)  # [B, N, h] -> [B, N, D]
        return self.dropout(x)

"""Multi-head self-attention (paper Eq. 5-8, Appendix A), as the walkthrough writes it.

One Linear computes q, k and v together (`qkv`), chunked into the three; each of H heads attends
over D / H channels: softmax(q k^T * scale) v, scale = head_dim^-0.5 unless `qk_scale` says
otherwise. Two paths compute the same numbers:
- the walkthrough's explicit path, the only one that can hand back the attention weights;
- with ``fused=True`` (the registry's default) and no weights asked for, Paddle's fused
  ``scaled_dot_product_attention`` (flash attention on a GPU in fp16/bf16).
On a CPU, where Paddle has no fused kernel, the tools run a packed variant of the fused path
(`paddle_vit.variants`); asking for the weights always takes the explicit path, so visualisation
works whichever path the model runs with.
"""
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from ..errors import ConfigError
from .rope import rotate_qk


class Attention(nn.Layer):
    """Multi-head self-attention, [B, N, D] -> [B, N, D].

    Args:
        embed_dim: D, the token width.
        num_heads: H; each head works on D / H channels.
        qkv_bias: whether the fused q/k/v projection has a bias (True in ViT).
        dropout: dropout after the output projection.
        attention_dropout: dropout on the attention weights.
        fused: use Paddle's fused scaled_dot_product_attention when weights are not requested.
        qk_scale: the factor of q k^T; None is head_dim^-0.5 (paper Eq. 5). Every path uses it.
        qkv, proj: a later ViT's q/k/v projection ([B, N, D] -> [B, N, 3 H d]) or output
            projection ([B, N, H d] -> [B, N, D]) in place of the walkthrough's Linear
            (block_parts.py); None builds the walkthrough's.
    """

    def __init__(self, embed_dim, num_heads, qkv_bias=True, dropout=0.0, attention_dropout=0.0, fused=False,
                 qk_scale=None, qkv=None, proj=None):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ConfigError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}: "
                              f"choose num_heads among the divisors of {embed_dim}")
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.all_head_dim = self.head_dim * num_heads
        self.scales = qk_scale if qk_scale is not None else self.head_dim ** -0.5
        self.fused = fused
        self.attention_dropout_rate = attention_dropout
        # walkthrough bug fixed: its `bias_attr=False if qkv_bias is True else None` dropped the bias when asked for
        self.qkv = qkv if qkv is not None else nn.Linear(embed_dim, self.all_head_dim * 3,
                                                         bias_attr=None if qkv_bias else False)
        self.proj = proj if proj is not None else nn.Linear(self.all_head_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.softmax = nn.Softmax(axis=-1)

    def transpose_multihead(self, x):
        # [B, N, H * d] -> [B, N, H, d] -> [B, H, N, d]
        x = x.reshape([0, 0, self.num_heads, self.head_dim])
        return x.transpose([0, 2, 1, 3])

    def forward(self, x, return_attention=False, rope=None):
        """x: [B, N, D]. Returns out [B, N, D], and the weights [B, H, N, N] when asked.
        rope: the rotary position embedding of the input's grid (models/rope.py), for the ViTs
        that use one; None (the paper's ViT) leaves q and k as they are."""
        if self.fused and not return_attention:
            return self.fused_attention(x, rope)
        qkv = self.qkv(x).chunk(3, axis=-1)  # 3 x [B, N, H * d]
        q, k, v = map(self.transpose_multihead, qkv)  # 3 x [B, H, N, d]
        q, k = rotate_qk(q, k, rope)  # RoPE ViTs: q and k turned by their patch's place
        attention = paddle.matmul(q, k, transpose_y=True)  # [B, H, N, N]
        attention = attention * self.scales
        attention = self.softmax(attention)
        weights = attention
        attention = self.attention_dropout(attention)
        out = paddle.matmul(attention, v)  # [B, H, N, d]
        out = out.transpose([0, 2, 1, 3])  # [B, N, H, d]
        out = out.reshape([0, 0, self.all_head_dim])  # [B, N, H * d]
        out = self.proj(out)  # [B, N, D]
        out = self.dropout(out)
        return (out, weights) if return_attention else out

    def fused_attention(self, x, rope=None):
        """The same attention through Paddle's fused kernel, which takes [B, N, H, d]: no transpose."""
        qkv = self.qkv(x).reshape([0, 0, 3, self.num_heads, self.head_dim])  # [B, N, 3, H, d]
        q, k, v = qkv.unbind(axis=2)  # 3 x [B, N, H, d]
        q, k = rotate_qk(q, k, rope, heads_first=False)
        if self.scales != self.head_dim ** -0.5:
            # the fused kernels scale by head_dim^-0.5 and not every backend takes another
            # factor (flash attention ignores `scale`): fold the rest into q
            q = q * (self.scales * self.head_dim ** 0.5)
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attention_dropout_rate if self.training else 0.0,
            training=self.training)  # [B, N, H, d]
        out = out.reshape([0, 0, self.all_head_dim])  # [B, N, H * d]
        out = self.proj(out)  # [B, N, D]
        return self.dropout(out)

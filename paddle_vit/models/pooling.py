"""Attention pooling (SigLIP's "MAP" head): a learned query attends over every token.

timm's `AttentionPoolLatent` (global_pool="map"), which big_vision's SigLIP calls the MAP head:
one learned latent token is the query of a multi-head attention whose keys and values are the
encoder's tokens; its output goes through a residual MLP, x + mlp(norm(x)), and is the pooled
feature. Shapes: tokens [B, N, D] -> pooled [B, D].
"""
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from .encoder import Mlp


class AttentionPool(nn.Layer):
    """[B, N, D] tokens -> [B, D]: softmax(q k^T / sqrt(d)) v for one learned query, then
    x + mlp(norm(x)). Names as timm's (`latent`, `q`, `kv`, `proj`, `norm`, `mlp`).

    Args:
        embed_dim, num_heads, mlp_ratio, gelu, layer_norm_epsilon: as the encoder's (timm builds
            the pool with the model's own norm and activation).
    """

    def __init__(self, embed_dim, num_heads, mlp_ratio=4.0, gelu="exact", layer_norm_epsilon=1e-6):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.latent = self.create_parameter(shape=[1, 1, embed_dim],
                                            default_initializer=nn.initializer.TruncatedNormal(std=embed_dim ** -0.5))
        self.q = nn.Linear(embed_dim, embed_dim)  # with a bias whatever the encoder's qkv_bias, as timm
        self.kv = nn.Linear(embed_dim, 2 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.norm = nn.LayerNorm(embed_dim, epsilon=layer_norm_epsilon)
        self.mlp = Mlp(embed_dim, mlp_ratio, gelu=gelu)

    def forward(self, x):
        batch, width = x.shape[0], x.shape[2]
        latent = self.latent.astype(x.dtype).expand([batch, 1, width])  # [B, 1, D]
        q = self.q(latent).reshape([0, 0, self.num_heads, self.head_dim]).transpose([0, 2, 1, 3])  # [B, H, 1, d]
        kv = self.kv(x).reshape([0, 0, 2, self.num_heads, self.head_dim])  # [B, N, 2, H, d]
        k, v = kv.transpose([2, 0, 3, 1, 4]).unbind(axis=0)  # 2 x [B, H, N, d]
        weights = F.softmax(paddle.matmul(q * self.head_dim ** -0.5, k, transpose_y=True), axis=-1)  # [B, H, 1, N]
        pooled = paddle.matmul(weights, v).transpose([0, 2, 1, 3]).reshape([0, 1, width])  # [B, 1, D]
        pooled = self.proj(pooled)  # [B, 1, D]
        pooled = pooled + self.mlp(self.norm(pooled))  # [B, 1, D]
        return pooled[:, 0]  # [B, D]

"""The ViT modules, named as in the walkthrough (and the options of today's ViTs beside them)."""
from .attention import Attention
from .encoder import DropPath, Encoder, EncoderLayer, LayerScale, Mlp, QuickGELU, SwiGLUMlp
from .patch_embed import PatchEmbedding, sincos_2d_embedding
from .pooling import AttentionPool
from .registry import get_model_config, list_models, search_order, search_tier
from .vit import PreLogits, ViT, ViTConfig

__all__ = ["Attention", "AttentionPool", "DropPath", "Encoder", "EncoderLayer", "LayerScale", "Mlp", "PatchEmbedding",
           "PreLogits", "QuickGELU", "SwiGLUMlp", "ViT", "ViTConfig", "get_model_config", "list_models", "search_order",
           "search_tier", "sincos_2d_embedding"]

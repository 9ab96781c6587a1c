"""The ViT modules, named as in the walkthrough."""
from .attention import Attention
from .encoder import DropPath, Encoder, EncoderLayer, Mlp
from .patch_embed import PatchEmbedding, sincos_2d_embedding
from .registry import get_model_config, list_models
from .vit import PreLogits, ViT, ViTConfig

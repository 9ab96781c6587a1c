"""paddle-vit: the Vision Transformer (Dosovitskiy et al., 2021) in PaddlePaddle."""
from .errors import ConfigError, DataError, PaddleVitError, WeightsError
from .models import ViT, ViTConfig, create_model, list_models

__version__ = "0.1.0"

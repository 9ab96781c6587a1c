"""paddle-vit: the Vision Transformer (Dosovitskiy et al., 2021) in PaddlePaddle."""
import warnings

# Paddle warns on every import that ccache (for compiling custom C++ ops) is missing; we build none
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)

from .errors import ConfigError, DataError, PaddleVitError, TrainingError, WeightsError
from .models import ViT, ViTConfig, create_model, list_models
from .weights import load_pretrained, LoadReport

__version__ = "0.1.0"

"""paddle-vit: the Vision Transformer (Dosovitskiy et al., 2021) in PaddlePaddle."""
import warnings

# Paddle warns on every import that ccache (for compiling custom C++ ops) is missing; we build none
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)

# first, before Paddle computes anything: MKL's AVX2 kernels on AMD CPUs (runtime.py says why)
from .runtime import configure_cpu_math

configure_cpu_math()

from .errors import ConfigError, DataError, PaddleVitError, TrainingError, WeightsError
from .models import ViT, ViTConfig, create_model, list_models
from .weights import load_pretrained, LoadReport

# dense transpose/slice kernels instead of strided views: attention's transposes 8x cheaper (runtime.py)
from .runtime import configure_paddle_flags

configure_paddle_flags()

__version__ = "0.1.0"

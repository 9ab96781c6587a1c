"""paddle-vit: the Vision Transformer (Dosovitskiy et al., 2021) in PaddlePaddle."""
import os
import sys
import warnings

# Paddle warns on every import that ccache (for compiling custom C++ ops) is missing; we build none
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
if "--debug" not in sys.argv[1:]:  # a tool's --debug shows Paddle's own messages again
    # Paddle's C++ log (glog) prints warnings and notes that are not the user's to act on ("static
    # graph(PIR) not support input out tensor" for every traced model, "New Executor is Running");
    # keep its errors. Read when Paddle's library loads, so set before the first import of paddle;
    # a GLOG_minloglevel the user set wins.
    os.environ.setdefault("GLOG_minloglevel", "2")
    # to_static's backward pass asks a traced tensor for its place, inside Paddle 3.3
    warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface", category=UserWarning)

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

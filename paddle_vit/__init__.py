"""paddle-vit: the Vision Transformer (Dosovitskiy et al., 2021) in PaddlePaddle.

    import paddle_vit
    model = paddle_vit.create_model("vit_walkthrough")                  # the walkthrough's ViT
    model = paddle_vit.create_model("vit_base_patch16_224", pretrained="ViT-B_16.npz")

Importing the package changes nothing outside it (no environment variable, Paddle flag, warning
filter or log level), and Paddle itself is imported only when a name that needs it is first used.
On a CPU, `create_model` gives the model the CPU fast paths and, the first time, makes the process
settings that change no result (`paddle_vit.runtime.configure_for_models`); the rest of the speed
settings the tools make are one explicit call, `paddle_vit.runtime.configure()` (docs/design.md).
"""
from .errors import ConfigError, DataError, ExportError, PaddleVitError, TrainingError, WeightsError
from .lazy import lazy_names

__version__ = "0.1.0"

# public name -> the module that defines it, imported on first use (PEP 562)
_LAZY = {
    "ViT": "models",
    "ViTConfig": "models",
    "list_models": "models",
    "create_model": "factory",
    "load_pretrained": "weights",
    "LoadReport": "weights",
    "fewshot_accuracy": "fewshot",
    "extract_features": "fewshot",
}

__all__ = ["ConfigError", "DataError", "ExportError", "PaddleVitError", "TrainingError", "WeightsError",
           "__version__", *_LAZY]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

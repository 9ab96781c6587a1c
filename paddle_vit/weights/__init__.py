"""Pretrained weights: every ViT checkpoint family read into a `ViT`, computed as its own code
computes it.

One module per family (timm.py, jax.py, huggingface.py, paddleclas.py for PaddleClas and PLSC,
torchvision.py, dinov3.py for Meta's own DINOv3 .pth files, native.py for this project's files), each with its detection rule, name map and the options
it implies; resample.py for position embeddings; loader.py for fitting a checkpoint to a model
and the report; source.py for a weights source resolved once (its config.json read and checked, its
tensors read when first needed); reading.py and saving.py for files; publish.py writes timm Hub and transformers folders (`save_pretrained`)
in the names the families read (renaming.py reads their tables backwards). `family.py` says what a family is.

Layouts (docs/design.md, "Checkpoint layouts"): Paddle Linear weights are [in, out], PyTorch's [out, in]; conv weights are
OIHW in both; JAX Dense kernels are [in, out], the JAX conv kernel is HWIO, and JAX attention
kernels are split per head: query/key/value [D, heads, head_dim], out [heads, head_dim, D].
"""
from .family import CheckpointFamily, ConvertedCheckpoint, Implied, detect_family, families
from .loader import LoadReport, build_pretrained, implied_options, load_pretrained
from .reading import Checkpoint, read_checkpoint
from .resample import RESAMPLE_METHODS, resample_position_embedding
from .saving import save_weights
from .source import WeightsSource, resolve_weights
from .publish import save_pretrained


__all__ = ["CheckpointFamily", "Checkpoint", "ConvertedCheckpoint", "Implied", "LoadReport", "RESAMPLE_METHODS",
           "build_pretrained", "detect_family", "families", "implied_options", "load_pretrained",
           "read_checkpoint", "resample_position_embedding", "resolve_weights", "save_pretrained", "save_weights",
           "WeightsSource"]

"""Variants of the walkthrough's modules that compute the same numbers another way, applied to a
built model explicitly. `paddle_vit.models` keeps one readable path per module (and Paddle's fused
attention kernel); what Paddle on a CPU, or a traced graph, needs besides lives here:

- `use_cpu_fast_paths(model)`: eager float32 on a CPU (cpu.py): attention from the packed q/k/v
  projection with one transpose, its weights recomputed in the backward pass of training; Linear
  layers with the bias inside the matrix product; the embedding's Conv2D bias and position
  embedding added expanded to the batch (Paddle's broadcast add is slow there); in training,
  LayerNorm's backward pass by a kernel compiled on this machine at first use (compiled.py; what
  each saves: docs/benchmarks.md);
  dropout and drop path that draw from a seed stream of their own inside a slice of
  batch_threads.py (slice_random.py). The tools apply it to every model they build.
- `batch_threads.BatchThreads`: a training step's batch in slices, one thread each, on replicas
  of the model sharing its parameters (train.batch_threads).
- `traceable(model)` (a context) and `use_traceable_variants(model)`: what a traced graph
  (`paddle.jit.to_static`, export, paddle.inference) computes with (graph.py): on a CPU, q, k
  and v from their own weight columns so that oneDNN folds the head transposes into the products;
  the tanh GELU, GroupNorm and token means written out in plain ops, because paddle2onnx and
  Paddle Inference's oneDNN passes mistranslate or chatter over the fused ones.

Each variant is a subclass of the module it stands for that overrides one method and keeps every
parameter, so the state dict, the structured names and `isinstance` stay as they were: applying a
variant gives the layer the subclass, and `use_walkthrough_modules(model)` gives every layer its
own class back. Where a variant does not apply (another device or dtype, eager mode for a graph
variant) it computes exactly as the module it stands for. tests/test_variants.py holds every
variant to its module's numbers.
"""
import contextlib

from .cpu import (AddmmLinear, DenseTransposeViT, ExpandedAddPatchEmbedding, ExpandedAddPatchPositionEmbedding,
                  ExpandedAddPositionEmbedding, ExpandedBiasConv2D, FastCpuAttention, FastCpuGELU, FastCpuLayerNorm,
                  RecomputedAttention, dense_transposes, runs_on_cpu)
from .fused_layer import FusedCpuEncoderLayer
from .graph import (ONNX_GRAPH, TRACEABLE, OnnxAttention, TraceableDynamicSize, TraceableStdConv2D, TraceableViT,
                    TracedCpuAttention, WrittenOutGroupNorm, WrittenOutTanhGELU, mean_over)
from .slice_random import SeededDropout, SeededDropPath

# SeededDropout/SeededDropPath are the stock modules outside a slice of batch_threads.py
CPU_FAST_PATHS = (FastCpuAttention, AddmmLinear, FastCpuLayerNorm, FastCpuGELU, DenseTransposeViT, SeededDropout,
                  SeededDropPath, FusedCpuEncoderLayer, ExpandedBiasConv2D, ExpandedAddPatchEmbedding,
                  ExpandedAddPositionEmbedding, ExpandedAddPatchPositionEmbedding)


def walkthrough_class(cls):
    """The module class a variant class stands for (a class that is no variant: itself)."""
    return getattr(cls, "variant_of", cls)


def _give_classes(model, variants):
    """Give every layer of `model` (itself included) whose module has a variant among `variants`
    that variant's class; returns [(layer, the class it had)] for undoing it."""
    by_module = {variant.variant_of: variant for variant in variants}
    changed = []
    for layer in [model, *model.sublayers()]:
        variant = by_module.get(walkthrough_class(type(layer)))
        if variant is not None and type(layer) is not variant:
            changed.append((layer, type(layer)))
            layer.__class__ = variant
    return changed


def _undo(changed):
    for layer, cls in changed:
        layer.__class__ = cls


def use_cpu_fast_paths(model):
    """Apply the CPU fast paths (cpu.py) to `model` in place and return it."""
    _give_classes(model, CPU_FAST_PATHS)
    return model


def use_traceable_variants(model):
    """Apply the traced-graph variants (graph.py) to `model` in place, for good (a model trained or
    evaluated as a `paddle.jit.to_static` graph), and return it."""
    _give_classes(model, TRACEABLE)
    return model


@contextlib.contextmanager
def traceable(model):
    """The traced-graph variants applied to `model` while tracing it (`paddle.jit.save`), its
    classes given back afterwards."""
    changed = _give_classes(model, TRACEABLE)
    try:
        yield model
    finally:
        _undo(changed)


@contextlib.contextmanager
def onnx_traceable(model):
    """The variants an ONNX export traces with (`traceable`'s, but the attention's q/k/v weights
    left whole so that each weight is an initializer feeding its MatMul), classes given back after."""
    changed = _give_classes(model, ONNX_GRAPH)
    try:
        yield model
    finally:
        _undo(changed)


def use_walkthrough_modules(model):
    """Give every layer of `model` its walkthrough module's class again; returns `model`."""
    for layer in [model, *model.sublayers()]:
        layer.__class__ = walkthrough_class(type(layer))
    return model


__all__ = ["AddmmLinear", "CPU_FAST_PATHS", "DenseTransposeViT", "ExpandedAddPatchEmbedding",
           "ExpandedAddPatchPositionEmbedding", "ExpandedAddPositionEmbedding", "ExpandedBiasConv2D",
           "FastCpuAttention", "FastCpuGELU", "FastCpuLayerNorm", "FusedCpuEncoderLayer", "OnnxAttention",
           "RecomputedAttention", "TraceableDynamicSize", "TraceableStdConv2D", "TraceableViT", "TracedCpuAttention",
           "WrittenOutGroupNorm", "WrittenOutTanhGELU", "dense_transposes", "mean_over", "onnx_traceable",
           "runs_on_cpu", "traceable", "use_cpu_fast_paths", "use_traceable_variants", "use_walkthrough_modules",
           "walkthrough_class"]

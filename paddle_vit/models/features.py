"""Intermediate features of a ViT for dense tasks, with timm's API and meaning (timm 1.0's
`VisionTransformer.forward_intermediates` and `prune_intermediate_layers`, `feature_take_indices`).

A segmentation or detection head reads the tokens after several encoder layers as feature maps:
the patch tokens [B, N, D] of layer k reshaped to [B, D, H/P, W/P] ("NCHW"), the prefix tokens
(class token, and distillation or register tokens where the model has them) split off. `ViT.forward_intermediates` and `ViT.prune_intermediate_layers` call these.
"""
import dataclasses

import paddle.nn as nn

from ..errors import ConfigError, check_choice
from .rope import rope_of_layer

OUTPUT_FORMATS = ("NCHW", "NLC")


def feature_take_indices(count, indices=None):
    """(the absolute layer indices `indices` selects among `count` layers, the largest of them).

    None: every layer; an int n: the last n; a list: those layers, a negative one counting from
    the end (-1: the last). Out of range is a ConfigError.
    """
    if indices is None:
        indices = count
    if isinstance(indices, int) and not isinstance(indices, bool):
        if not 0 < indices <= count:
            raise ConfigError(f"indices {indices} asks for the last {indices} layers; the model has {count}: "
                              f"use 1 to {count}")
        taken = [count - indices + offset for offset in range(indices)]
    elif isinstance(indices, (list, tuple)):
        taken = []
        for index in indices:
            if not isinstance(index, int) or isinstance(index, bool):
                raise ConfigError(f"indices must hold layer numbers (ints), got {index!r} in {list(indices)!r}")
            absolute = count + index if index < 0 else index
            if not 0 <= absolute < count:
                raise ConfigError(f"layer index {index} is out of range for a model of {count} layers "
                                  f"(0 to {count - 1}, or -{count} to -1)")
            taken.append(absolute)
        if not taken:
            raise ConfigError("indices is an empty list: name at least one layer")
    else:
        raise ConfigError(f"indices must be None, an int (the last n layers) or a list of layer numbers, "
                          f"got {indices!r}")
    return taken, max(taken)


def forward_intermediates(model, x, indices=None, norm=False, output_fmt="NCHW", intermediates_only=False,
                          return_prefix_tokens=False, stop_early=False, output_dict=False):
    """See `ViT.forward_intermediates`. x: [B, C, H, W]."""
    check_choice("output_fmt", output_fmt, OUTPUT_FORMATS)
    layers = model.encoder.layers
    taken, last = feature_take_indices(len(layers), indices)
    batch, height, width = x.shape[0], x.shape[2], x.shape[3]

    model.check_input_size(x)
    rope = model.rope_for(x)  # RoPE ViTs: the rotary table of the input's grid
    tokens = model.encoder.norm_pre(model.patch_embed(x))  # [B, T + N, D]
    intermediates = []
    for index, layer in enumerate(layers):
        if stop_early and index > last:
            break
        tokens = layer(tokens, rope=rope_of_layer(rope, index))  # [B, 1 + N, D]
        if index in taken:  # in layer order, once each, whatever order `indices` has (as timm)
            intermediates.append(model.encoder.norm(tokens) if norm else tokens)

    prefix = model.patch_embed.num_prefix_tokens
    prefixes = [y[:, :prefix] for y in intermediates]  # [B, T, D] each
    intermediates = [y[:, prefix:] for y in intermediates]  # [B, N, D] each
    if output_fmt == "NCHW":
        rows, cols = model.patch_embed.token_grid_for(height, width)
        # [B, N, D] -> [B, h, w, D] -> [B, D, h, w]: token n is row n // w, column n % w
        intermediates = [y.reshape([batch, rows, cols, y.shape[-1]]).transpose([0, 3, 1, 2]) for y in intermediates]

    if output_dict:
        result = {"image_intermediates": intermediates}
        if return_prefix_tokens:
            result["image_intermediates_prefix"] = prefixes
        if not intermediates_only:
            result["image_features"] = model.encoder.norm(tokens)
        return result
    if return_prefix_tokens:
        intermediates = list(zip(intermediates, prefixes))
    if intermediates_only:
        return intermediates
    return model.encoder.norm(tokens), intermediates  # the final tokens after the final norm


def prune_intermediate_layers(model, indices=1, prune_norm=False, prune_head=True):
    """See `ViT.prune_intermediate_layers`: the model keeps what forward_intermediates(indices)
    needs. Its config follows (depth; num_classes 0 and no pre-logits layer without the head);
    a pruned final norm is not a config field. One difference from timm: without its head the
    model's forward still pools as `config.pool` says ([B, D]), where timm's sets global_pool ""
    and returns every token; forward_intermediates is the same in both."""
    layers = model.encoder.layers
    taken, last = feature_take_indices(len(layers), indices)
    model.encoder.layers = nn.LayerList(list(layers)[:last + 1])
    config = dataclasses.replace(model.config, depth=last + 1)
    if prune_norm:
        model.encoder.norm = nn.Identity()
    if prune_head:
        if hasattr(model, "fc_norm"):
            model.fc_norm = nn.Identity()
        if hasattr(model, "pre_logits"):
            del model.pre_logits
        config = dataclasses.replace(config, num_classes=0, representation_size=None)
        model.num_classes, model.num_features = 0, model.embed_dim
        model.head = nn.Identity()
        if hasattr(model, "head_dist"):
            model.head_dist = nn.Identity()
    model.config = config
    return taken

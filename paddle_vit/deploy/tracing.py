"""Tracing a ViT for deployment: the network `paddle.jit.save` writes (the model in eval mode, a
softmax on its logits if asked), its input (any batch size; any H, W for a model built with
dynamic_img_size) and the traced-graph variants it computes with (`paddle_vit.variants`).
Shared by the Paddle inference export (export.py) and the ONNX export (onnx_export.py)."""
import os

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

from ..errors import ExportError
from ..variants import traceable

INPUT_NAME = "image"


class InferenceNetwork(nn.Layer):
    """The layer that is traced: the ViT in eval mode, with a softmax on its logits if asked."""

    def __init__(self, model, with_softmax=False):
        super().__init__()
        self.model = model
        self.with_softmax = with_softmax

    def forward(self, image):
        logits = self.model(image)  # [N, 3, S, S] -> [N, K]
        return F.softmax(logits, axis=-1) if self.with_softmax else logits


def inference_network(model, with_softmax=False):
    """An `InferenceNetwork` of `model`, in eval mode."""
    network = InferenceNetwork(model, with_softmax)
    network.eval()
    return network


def input_shape(config, unknown=-1, dynamic_size=None):
    """[N, C, S, S] of the traced graph, `unknown` for any batch size; a model built with
    dynamic_img_size takes any H, W as well (`dynamic_size=False` fixes them at its image size)."""
    dynamic = config.dynamic_img_size if dynamic_size is None else dynamic_size
    side = unknown if dynamic else int(config.image_size)
    return [unknown, int(config.in_channels), side, side]


def saved_model_file(prefix):
    for extension in (".json", ".pdmodel"):
        if os.path.isfile(prefix + extension):
            return prefix + extension
    raise ExportError(f"paddle.jit.save wrote neither {prefix}.json nor {prefix}.pdmodel")


def save_traced(model, prefix, softmax=False, dtype="float32", variants=traceable, dynamic_size=None):
    """Trace `model` (a ViT) for any batch size and `paddle.jit.save` it at `prefix`; returns
    (program file, parameters file). The graph computes with the traced-graph variants that the
    context `variants` applies (`paddle_vit.variants.traceable` by default); `model` itself stays
    eager and keeps its classes."""
    config = model.config
    was_training = model.training
    network = inference_network(model, softmax)
    spec = InputSpec(input_shape(config, unknown=None, dynamic_size=dynamic_size), dtype,
                     name=INPUT_NAME)  # None: any batch size (and size)
    with variants(model):
        paddle.jit.save(paddle.jit.to_static(network, input_spec=[spec], full_graph=True), prefix)
    if was_training:
        model.train()
    return saved_model_file(prefix), prefix + ".pdiparams"

"""Tracing a ViT for deployment: the network `paddle.jit.save` writes (the model in eval mode, a
softmax on its logits if asked), its input (any batch size; any H, W for a model built with
dynamic_img_size) and the traced-graph variants it computes with (`paddle_vit.variants`).
Shared by the Paddle inference export (export.py) and the ONNX export (onnx_export.py). And the
graph that eval.engine=to_static, train.to_static and the benchmark's to_static engine run
(`to_static_graph`): every trace of this process converts each function once."""
import contextlib
import os
import threading

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

from ..errors import ExportError
from ..paddle_versions import CONVERSIONS_PER_FUNCTION, applies
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
    with variants(model), conversions_kept_per_function():
        paddle.jit.save(paddle.jit.to_static(network, input_spec=[spec], full_graph=True), prefix)
    if was_training:
        model.train()
    return saved_model_file(prefix), prefix + ".pdiparams"


# Paddle 3.3 keeps the function it makes from a method's converted source in a cache keyed, weakly,
# by the bound method it was asked for; that key dies with the call, so a trace converts every
# layer's methods again for each layer and each call (writes the code out as a module, imports
# it, maps its lines back): 853 conversions in a ViT-B/16 export of both formats, which took
# 32-38 s with them and 19-20 s without (docs/deployment.md, "How long"). During our traces the
# cache is keyed by the function itself: a method's converted function takes `self` as an
# argument (Paddle binds it at each call), so one serves every layer of a class. The graphs are
# the same (tests/test_deploy.py).
class _KeptConversions:
    """Paddle's converted functions by function, for every trace of this process, and the traces
    running now (Paddle's own convert_with_cache kept aside while any does)."""

    def __init__(self):
        self.converted = {}  # function -> Paddle's converted function
        self.lock = threading.Lock()
        self.traces = 0
        self.paddles_own = None

    def convert_with_cache(self, cache, function):  # called by Paddle under its conversion lock
        key = getattr(function, "__func__", function)
        if key not in self.converted:
            self.converted[key] = self.paddles_own(cache, function)
        return self.converted[key]


_KEPT = _KeptConversions()


@contextlib.contextmanager
def conversions_kept_per_function():
    """While in it, Paddle's dygraph-to-static conversion converts each function once per
    process (above); Paddle's own cache again after. Nested and concurrent traces share it."""
    if not applies(CONVERSIONS_PER_FUNCTION):
        yield
        return
    from paddle.jit.dy2static.program_translator import FunctionCache
    with _KEPT.lock:
        if _KEPT.traces == 0:
            _KEPT.paddles_own = FunctionCache.convert_with_cache
            FunctionCache.convert_with_cache = lambda cache, function: _KEPT.convert_with_cache(cache, function)
        _KEPT.traces += 1
    try:
        yield
    finally:
        with _KEPT.lock:
            _KEPT.traces -= 1
            if _KEPT.traces == 0:
                FunctionCache.convert_with_cache = _KEPT.paddles_own


def to_static_graph(layer):
    """`paddle.jit.to_static(layer, full_graph=True)`, whose traces (the first call, and a call
    with new input shapes) convert each function once per process, as an export's trace does
    (docs/training.md has the time it saves). Its calls run the graph as Paddle's would."""
    graph = paddle.jit.to_static(layer, full_graph=True)
    if not applies(CONVERSIONS_PER_FUNCTION):
        return graph
    static_forward = graph.forward  # a StaticFunction; each call looks up (or traces) its program here
    get_program = static_forward.get_concrete_program

    def get_program_keeping_conversions(*args, **kwargs):
        with conversions_kept_per_function():
            return get_program(*args, **kwargs)
    static_forward.get_concrete_program = get_program_keeping_conversions
    return graph

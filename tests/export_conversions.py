"""Paddle's dygraph-to-static conversion of the code an export traces, done once in the tool
runner (tests/crash_points.py, ToolRunner.warm) so that its forked export runs find it done.

Paddle keeps the parsed and rewritten source of each function it converts (per source text), but
the function made from it in a cache keyed by the bound method it was asked for, weakly: the key
dies with the call, so every export makes each layer's forward again (writes it out as a module,
imports it, maps its lines back), about 4 s of each 6 s export of the small test model. In the
runner's process, and only there, that cache is keyed by the function itself: a method's converted
function takes `self` as an argument (Paddle binds it at each call), so the same function serves
every instance. The exports are byte for byte those of an unpatched process (inference.json,
inference.pdiparams, model.onnx, model.int8.onnx of the crash tests' export, compared 2026-12-06).
"""
import json
import os


def convert(argv):
    """argv: a scratch folder, the model's keyword arguments as JSON."""
    from paddle_vit import create_model
    from paddle_vit.deploy.tracing import save_traced
    from paddle_vit.variants import onnx_traceable
    keep_conversions_per_function()
    folder, settings = argv[0], json.loads(argv[1])
    model = create_model("vit_walkthrough", **settings)
    save_traced(model, os.path.join(folder, "paddle"))  # the Paddle export's graph
    save_traced(model, os.path.join(folder, "onnx"), variants=onnx_traceable)  # the ONNX export's


def keep_conversions_per_function():
    """Key Paddle's cache of converted functions by the function, not by its bound method (above)."""
    from paddle.jit.dy2static.program_translator import FunctionCache
    convert_once = FunctionCache.convert_with_cache
    converted = {}

    def convert_with_cache(cache, function):
        key = getattr(function, "__func__", function)
        if key not in converted:
            converted[key] = convert_once(cache, function)
        return converted[key]
    FunctionCache.convert_with_cache = convert_with_cache

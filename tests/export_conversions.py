"""Paddle's dygraph-to-static conversion of the code an export traces, done once in the tool
runner (tests/crash_points.py, ToolRunner.warm) so that its forked export runs find it done: the
export keeps each converted function for the rest of its process
(paddle_vit.deploy.tracing.conversions_kept_per_function), and the forks inherit them. Without
this each export of the small test model spent about 4 of its 6 s converting."""
import json
import os


def convert(argv):
    """argv: a scratch folder, the model's keyword arguments as JSON."""
    from paddle_vit import create_model
    from paddle_vit.deploy.tracing import save_traced
    from paddle_vit.variants import onnx_traceable
    folder, settings = argv[0], json.loads(argv[1])
    model = create_model("vit_walkthrough", **settings)
    save_traced(model, os.path.join(folder, "paddle"))  # the Paddle export's graph
    save_traced(model, os.path.join(folder, "onnx"), variants=onnx_traceable)  # the ONNX export's

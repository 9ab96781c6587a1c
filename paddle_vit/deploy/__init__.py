"""Deployment: classifying images (predict.py), exporting a trained model (export.py) and running
an export without the model's Python code (inference.py).

The engine may use this package (tools/eval.py's default engine is a paddle.inference predictor);
this package never imports the engine's trainer or evaluator: it builds models through
`paddle_vit.engine.builder`, which the trainer shares.
"""

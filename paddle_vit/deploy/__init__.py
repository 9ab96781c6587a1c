"""Deployment: classifying images (predict.py), exporting a trained model (export.py) and running
an export without the model's Python code (inference.py).

Imports flow one way: the engine uses this package (tools/eval.py's default engine is a
paddle.inference predictor), and this package never imports the engine. It builds models through
`paddle_vit.factory`, as the trainer does.
"""

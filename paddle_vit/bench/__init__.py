"""The benchmark: throughput of a ViT against timm's (run.py), and timm's side of it in a Python
without Paddle (timm_worker.py)."""

"""PaddleClas's ViT eval transform on each image (run by preprocess_fixtures.py in an interpreter
that has paddle, OpenCV and the paddleclas package: ``pip install --no-deps --target DIR paddleclas
opencv-python-headless``, then PYTHONPATH=DIR).

    python preprocess_paddleclas_ref.py OUT.npz '[["name", "path"], ...]'

The operators are PaddleClas's own (paddleclas/deploy/python/preprocess.py, the inference path,
with the arithmetic of ppcls/data/preprocess/ops/operators.py), in the order of its ViT configs'
eval transform: DecodeImage(to_rgb=True) (cv2.imdecode + BGR -> RGB), ResizeImage(resize_short=256),
CropImage(size=224), NormalizeImage(scale=1/255, mean = std = 0.5, order="hwc"), ToCHWImage.
"paddleclas@pil_decode" runs the same operators after decoding with PIL (convert("RGB")), to
separate the decoder's difference from the rest.
"""
import json
import os
import sys
import types

import numpy as np


def import_operators():
    """The preprocess module of the installed paddleclas package, without its package __init__
    (which imports the whole command-line tool and its dependencies)."""
    import importlib.util
    spec = importlib.util.find_spec("paddleclas")
    root = os.path.dirname(spec.origin) if spec.origin else spec.submodule_search_locations[0]
    for name, path in (("paddleclas", root), ("paddleclas.deploy", os.path.join(root, "deploy")),
                       ("paddleclas.deploy.python", os.path.join(root, "deploy", "python"))):
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
    from paddleclas.deploy.python import preprocess
    return preprocess


def main(out_path, listing):
    import cv2
    from PIL import Image
    ops = import_operators()
    decode = ops.DecodeImage(to_rgb=True, channel_first=False)
    rest = [ops.ResizeImage(resize_short=256), ops.CropImage(size=224),
            ops.NormalizeImage(scale=1.0 / 255.0, mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5], order=""),
            ops.ToCHWImage()]
    results = {"version/opencv": np.array(cv2.__version__), "version/numpy": np.array(np.__version__)}
    for name, path in listing:
        for case, load in (("paddleclas", lambda p: decode(open(p, "rb").read())),
                           ("paddleclas@pil_decode", lambda p: np.asarray(Image.open(p).convert("RGB")))):
            try:
                image = load(path)
                for op in rest:
                    image = op(image)
                results[f"{case}/{name}"] = np.ascontiguousarray(image, dtype=np.float32)
            except Exception as error:  # recorded: PaddleClas refuses this image
                results[f"{case}/{name}"] = np.array(f"{type(error).__name__}: {error}".splitlines()[0])
    np.savez(out_path, **results)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))

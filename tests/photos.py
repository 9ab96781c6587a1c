"""The photos the reference fixtures fed through each library's own pipeline and the tests feed
through ours: scikit-learn's china.jpg and variants made from it (the reference fixture makers
import this file): an RGBA PNG (alpha a horizontal ramp), grayscale, a tiny portrait crop."""
import importlib.util
import os

import numpy as np
from PIL import Image


def make_photos(folder):
    """{name: path} of the four photos, the variants written into `folder`."""
    package = os.path.dirname(importlib.util.find_spec("sklearn").origin)  # found, not imported: seconds saved
    source = os.path.join(package, "datasets", "images", "china.jpg")
    image = Image.open(source)
    image.load()
    alpha = Image.fromarray(np.tile(np.linspace(0, 255, image.width).astype(np.uint8), (image.height, 1)))
    rgba = image.convert("RGBA")
    rgba.putalpha(alpha)
    paths = {"china.jpg": source}
    for name, variant in (("china_rgba.png", rgba), ("china_gray.png", image.convert("L")),
                          ("china_tiny.png", image.crop((200, 100, 211, 117)).resize((11, 17), Image.NEAREST))):
        paths[name] = os.path.join(folder, name)
        variant.save(paths[name])
    return paths

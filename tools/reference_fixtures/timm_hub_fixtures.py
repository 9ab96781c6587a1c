"""A timm Hub folder and timm's own outputs for it, for tests/test_hub_folders.py (run with
PyTorch + timm, not Paddle).

    /work/torchvenv/bin/python tools/make_reference_fixtures.py timm_hub [--out tests/fixtures]

Writes, with timm's own saving function (``timm.models.save_for_hf``, what ``push_to_hf_hub``
calls):
- ``timm_hub_folder/``: ``config.json`` (architecture ``vit_tiny_patch16_224`` built smaller
  through ``model_args``: img 32, patch 8, dim 32, depth 2, 4 heads, 5 classes; five
  ``label_names``; a ``pretrained_cfg`` that differs from paddle-vit's data defaults: crop_pct
  0.9, bicubic, ImageNet mean/std) and ``model.safetensors``, every weight perturbed;
- ``timm_hub_reference.npz`` / ``.json``: the folder read back by timm itself
  (``create_model("local-dir:...")``): its logits for a fixed input batch, and its class
  probabilities for real photos fed through timm's own pipeline (``resolve_data_config`` +
  ``create_transform``, PIL ``Image.open(...).convert("RGB")``). The photos are scikit-learn's
  ``china.jpg`` and variants both sides make with the same deterministic code (`photos`), so
  no image is stored.
"""
import json
import os
import shutil
import sys

import torch

from common import folder_size, write_reference  # tools/reference_fixtures is on sys.path
from torch_reference import import_timm  # tools/ is on sys.path when run as a script

import_timm()  # declares the torchvision op schemas this torch build lacks, then imports timm

import PIL  # noqa: E402
import safetensors  # noqa: E402
import sklearn  # noqa: E402
import timm  # noqa: E402
from PIL import Image  # noqa: E402
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, create_transform, resolve_data_config  # noqa: E402
from timm.models import save_for_hf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = "timm_hub_folder"
ARCHITECTURE = "vit_tiny_patch16_224"
MODEL_ARGS = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=5)
LABELS = ["cormorant", "heron", "kingfisher", "osprey", "puffin"]
DATA_CONFIG = dict(interpolation="bicubic", crop_pct=0.9, crop_mode="center",
                   mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD)
BATCH = 2


def photos(folder):
    """{name: path} of scikit-learn's china.jpg and the variants tests/photos.py makes from it in
    `folder` (the one definition, which the tests run too): an RGBA PNG (alpha a horizontal ramp),
    a grayscale PNG, and a tiny 17x11 portrait crop."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests"))
    from photos import make_photos

    return make_photos(folder)


@torch.no_grad()
def perturb(model, generator):
    """Noise on every tensor (LayerNorm scales and biases, class token, head included), the q/k/v
    weights more, so that a misplaced tensor changes the logits."""
    for name, parameter in model.named_parameters():
        scale = 0.25 if "attn.qkv.weight" in name else 0.1
        parameter.add_(torch.randn(parameter.shape, generator=generator) * scale)


@torch.no_grad()
def make(args):
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    model = timm.create_model(ARCHITECTURE, pretrained=False, **MODEL_ARGS).eval()
    perturb(model, generator)
    folder = os.path.join(args.out, FOLDER)
    shutil.rmtree(folder, ignore_errors=True)
    save_for_hf(model, folder, model_config={"label_names": LABELS}, safe_serialization=True,
                data_config=DATA_CONFIG)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)

    # timm reads the folder back: its model, and its preprocessing from the folder's pretrained_cfg
    loaded = timm.create_model(f"local-dir:{os.path.abspath(folder)}", pretrained=True).eval()
    images = torch.randn(BATCH, 3, 32, 32, generator=generator)
    references = {"input": images.numpy(), "logits": loaded(images).numpy()}
    assert float((model(images) - loaded(images)).abs().max()) == 0.0
    data_config = resolve_data_config({}, model=loaded)
    transform = create_transform(**data_config)
    cases = {"architecture": ARCHITECTURE, "model_args": MODEL_ARGS, "label_names": LABELS,
             "data_config": {key: list(value) if isinstance(value, tuple) else value
                             for key, value in data_config.items()},
             "transform": repr(transform), "photos": []}
    scratch = os.path.join(args.out, ".timm_hub_photos")
    os.makedirs(scratch, exist_ok=True)
    try:
        for name, path in photos(scratch).items():
            with Image.open(path) as image:
                pixels = transform(image.convert("RGB")).unsqueeze(0)
            references[f"photo/{name}/probabilities"] = loaded(pixels).softmax(-1).numpy()[0]
            cases["photos"].append(name)
    finally:
        shutil.rmtree(scratch)
    write_reference(args.out, "timm_hub", references, cases,
                    dict(torch=torch.__version__, timm=timm.__version__, pillow=PIL.__version__,
                         safetensors=safetensors.__version__, sklearn=sklearn.__version__))
    with open(os.path.join(folder, "config.json")) as stream:
        print(json.dumps(json.load(stream)["pretrained_cfg"]))
    print(f"{FOLDER}: {folder_size(folder)} bytes; {transform}")
    return 0

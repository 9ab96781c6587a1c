"""Eval preprocessing references: each library's own pipeline on real photos and awkward variants.

    /work/torchvenv/bin/python tools/make_reference_fixtures.py preprocess \
        [--paddleclas-python PY --paddleclas-path DIR] [--tf-python PY]

Runs with torch, torchvision, timm, transformers, scikit-learn and Pillow (none of them a
paddle-vit dependency); PaddleClas's operators and TensorFlow run in interpreters of their own
(`preprocess_paddleclas_ref.py`, `preprocess_tf_ref.py`), given by the options, and are left out
when not given.

Inputs: scikit-learn's two sample photos (china.jpg, flower.jpg, 640 x 427, read from the
installed package, not copied) and small variants made from them by `make_variants` and
committed in tests/fixtures/preprocess_images/: grayscale, RGBA and LA with varying alpha,
palette with and without a transparent index, CMYK JPEG, 16-bit grayscale, tiny 17 x 11,
portrait, and a JPEG with EXIF orientation 6.

For every (pipeline, image) the library's input tensor float32 [3, S, S] is recorded as a
strided sample ``x[:, 5::29, 5::29]``, per-channel sums and per-channel sums weighted by a fixed
pattern (any single-pixel change shows there), one array per pipeline and quantity with a row
per image (in the json's ``image_order``), and, at 224, the class probabilities of a tiny
timm ViT (patch 16, embed 16, depth 1, 10 classes, perturbed random weights:
``preprocess_vit_tiny.safetensors``) on that input. Where a library refuses an image (it raises),
the error is recorded instead.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

from common import max_diff
from torch_reference import import_timm

import_timm()

import safetensors.torch  # noqa: E402
import sklearn  # noqa: E402
import timm  # noqa: E402
import torchvision  # noqa: E402
import transformers  # noqa: E402
from timm.data import create_transform, resolve_data_config  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402
from torchvision.datasets.folder import pil_loader  # noqa: E402
from torchvision.models import ViT_B_16_Weights  # noqa: E402
from transformers.image_utils import load_image  # noqa: E402
from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil  # noqa: E402
from transformers.models.vit.image_processing_vit import ViTImageProcessor  # noqa: E402  (the "fast" one)

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = (slice(None), slice(5, None, 29), slice(5, None, 29))
IMAGES_DIR = "preprocess_images"
MODEL = dict(img_size=224, patch_size=16, embed_dim=16, depth=1, num_heads=2, num_classes=10)

# name -> the hint a checkpoint family gives paddle_vit.data.preprocessing.preprocess_for_checkpoint
IMAGENET = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
HALF = dict(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
TIMM = {
    "timm_0875_bicubic_imagenet": dict(input_size=[3, 224, 224], crop_pct=0.875, interpolation="bicubic", **IMAGENET),
    "timm_09_bicubic_half": dict(input_size=[3, 224, 224], crop_pct=0.9, interpolation="bicubic", **HALF),
    "timm_095_bilinear_imagenet": dict(input_size=[3, 224, 224], crop_pct=0.95, interpolation="bilinear",
                                       **IMAGENET),
    "timm_1_bicubic_half": dict(input_size=[3, 224, 224], crop_pct=1.0, interpolation="bicubic", **HALF),
    "timm_squash": dict(input_size=[3, 224, 224], crop_pct=0.875, interpolation="bicubic", crop_mode="squash",
                        **IMAGENET),
    "timm_border": dict(input_size=[3, 224, 224], crop_pct=1.0, interpolation="bicubic", crop_mode="border",
                        **IMAGENET),
    "timm_160_09_bilinear": dict(input_size=[3, 160, 160], crop_pct=0.9, interpolation="bilinear", **HALF),
}
HUGGINGFACE = {
    # ViTImageProcessor as google/vit-base-patch16-224 publishes it
    "hf_vit": dict(do_resize=True, size={"height": 224, "width": 224}, resample=2, do_rescale=True,
                   rescale_factor=0.00392156862745098, do_normalize=True, **{"image_mean": HALF["mean"],
                                                                             "image_std": HALF["std"]}),
    # a DeiT-style processor: shorter side 256 bicubic, centre crop 224, ImageNet statistics
    "hf_shortest_edge_crop": dict(do_resize=True, size={"shortest_edge": 256}, resample=3, do_center_crop=True,
                                  crop_size={"height": 224, "width": 224}, do_rescale=True,
                                  rescale_factor=0.00392156862745098, do_normalize=True, do_convert_rgb=True,
                                  image_mean=IMAGENET["mean"], image_std=IMAGENET["std"]),
    # [-1, 1] by the rescale factor alone: x / 127.5 - 1
    "hf_bicubic_rescale_127": dict(do_resize=True, size={"height": 224, "width": 224}, resample=3,
                                   do_rescale=True, rescale_factor=1 / 127.5, do_normalize=True,
                                   image_mean=[1.0, 1.0, 1.0], image_std=[1.0, 1.0, 1.0]),
}


def sklearn_photo(name):
    return os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images", name)


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# ---- the images ----------------------------------------------------------------------------------

def make_variants(folder):
    """Small deterministic variants of the two photos, each a few KB, written to `folder`."""
    os.makedirs(folder, exist_ok=True)
    china = Image.open(sklearn_photo("china.jpg")).convert("RGB")  # 640 x 427
    flower = Image.open(sklearn_photo("flower.jpg")).convert("RGB")
    small = flower.resize((96, 64), Image.Resampling.BILINEAR)
    ramp = np.tile(np.linspace(0, 255, 96).round().astype(np.uint8), (64, 1))  # alpha 0 left .. 255 right
    ramp[:16, :] = 0  # a fully transparent band on top, whose colour convert("RGB") shows

    gray = china.resize((160, 107), Image.Resampling.BILINEAR).convert("L")
    gray.save(os.path.join(folder, "gray.png"), optimize=True)
    rgba = small.copy()
    rgba.putalpha(Image.fromarray(ramp))
    rgba.save(os.path.join(folder, "rgba.png"), optimize=True)
    la = small.convert("L")
    la.putalpha(Image.fromarray(ramp))
    la.save(os.path.join(folder, "la.png"), optimize=True)
    palette = small.quantize(colors=32, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    palette.save(os.path.join(folder, "palette.png"), optimize=True)
    palette.save(os.path.join(folder, "palette_transparent.png"), transparency=0, optimize=True)
    china.resize((120, 80), Image.Resampling.BILINEAR).convert("CMYK").save(
        os.path.join(folder, "cmyk.jpg"), quality=90)
    sixteen = (np.asarray(gray.resize((64, 43), Image.Resampling.BILINEAR), dtype=np.uint16) * 257
               + np.arange(43 * 64, dtype=np.uint16).reshape(43, 64) % 200)  # low byte not a copy of the high
    Image.fromarray(sixteen).save(os.path.join(folder, "gray16.png"))
    china.resize((17, 11), Image.Resampling.BILINEAR).save(os.path.join(folder, "tiny.png"))
    china.crop((250, 40, 350, 200)).save(os.path.join(folder, "portrait.jpg"), quality=90)  # 100 x 160
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown rotated 90 degrees clockwise
    small.save(os.path.join(folder, "exif_rotated.jpg"), quality=90, exif=exif.tobytes())


def image_list(folder):
    """(name, path) of every input: the two photos from scikit-learn, then the variants."""
    names = ["gray.png", "rgba.png", "la.png", "palette.png", "palette_transparent.png", "cmyk.jpg",
             "gray16.png", "tiny.png", "portrait.jpg", "exif_rotated.jpg"]
    return ([("china.jpg", sklearn_photo("china.jpg")), ("flower.jpg", sklearn_photo("flower.jpg"))]
            + [(name, os.path.join(folder, name)) for name in names])


# ---- each library's pipeline, as its users run it ------------------------------------------------

def timm_pipeline(cfg):
    config = resolve_data_config(pretrained_cfg=cfg)
    transform = create_transform(**config, is_training=False)

    def run(path):  # timm's ImageDataset: Image.open(...).convert("RGB"), no EXIF transpose
        with open(path, "rb") as handle:
            return transform(Image.open(handle).convert("RGB")).numpy()
    return run


def hf_pipeline(config, opened=False):
    processor = ViTImageProcessorPil(**config)

    def run(path):
        # the pipeline("image-classification") way: load_image (EXIF transpose + convert("RGB"));
        # `opened`: the model card way, Image.open(path) handed to the processor as it is
        image = Image.open(path) if opened else load_image(path)
        return processor(images=image, return_tensors="np")["pixel_values"][0].astype(np.float32)
    return run


def torchvision_pipeline():
    transform = ViT_B_16_Weights.IMAGENET1K_V1.transforms()  # the preset only: no weights downloaded

    def run(path):  # ImageFolder's loader: convert("RGB"), no EXIF transpose
        return transform(pil_loader(path)).numpy()
    return run


def pipelines():
    """name -> (hint, image size, function path -> float32 [3, S, S])."""
    out = {}
    for name, cfg in TIMM.items():
        out[name] = ({"pipeline": "timm", "config": cfg}, cfg["input_size"][-1], timm_pipeline(cfg))
    for name, config in HUGGINGFACE.items():
        out[name] = ({"pipeline": "huggingface", "config": config}, 224, hf_pipeline(config))
    config = HUGGINGFACE["hf_shortest_edge_crop"]
    out["hf_shortest_edge_crop@opened"] = ({"pipeline": "huggingface", "config": config}, 224,
                                           hf_pipeline(config, opened=True))
    out["torchvision"] = ({"pipeline": "torchvision"}, 224, torchvision_pipeline())
    return out


def external(script, python, extra_path, images, folder):
    """Run a reference script in another interpreter; returns {case: array or error text}."""
    out_path = os.path.join(folder, os.path.basename(script) + ".npz")
    environment = dict(os.environ)
    if extra_path:
        environment["PYTHONPATH"] = extra_path
    subprocess.run([python, os.path.join(HERE, script), out_path, json.dumps(images)], check=True, env=environment)
    with np.load(out_path) as data:
        results = {key: data[key] for key in data.files}
    return {key: (str(value) if value.dtype.kind == "U" else value) for key, value in results.items()}


# ---- the tiny model ------------------------------------------------------------------------------

@torch.no_grad()
def tiny_model(seed):
    torch.manual_seed(seed)  # timm's initialisation draws from the global generator
    generator = torch.Generator().manual_seed(seed)
    model = VisionTransformer(**MODEL).eval()
    for _, parameter in model.named_parameters():
        parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.2)
    return model


def pattern(size):
    """The fixed [S, S] weights of the weighted sums: (3 * row + 5 * column) mod 7 - 3."""
    rows, columns = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    return ((3 * rows + 5 * columns) % 7 - 3).astype(np.float64)


def make(args):
    folder = os.path.join(args.out, IMAGES_DIR)
    make_variants(folder)
    images = image_list(folder)
    model = tiny_model(args.seed)
    weights = os.path.join(args.out, "preprocess_vit_tiny.safetensors")
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    os.chmod(weights, 0o644)

    inputs = {}  # case -> float32 [3, S, S] or the error text
    hints = {}
    for name, (hint, size, run) in pipelines().items():
        hints[name] = {"hint": hint, "size": size}
        for image, path in images:
            try:
                inputs[f"{name}/{image}"] = np.asarray(run(path), dtype=np.float32)
            except Exception as error:  # the library refuses this image: record how
                inputs[f"{name}/{image}"] = f"{type(error).__name__}: {error}".splitlines()[0]

    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__, "timm": timm.__version__,
                "transformers": transformers.__version__, "pillow": Image.__version__,
                "scikit-learn": sklearn.__version__, "seed": args.seed}
    with tempfile.TemporaryDirectory() as scratch:
        listing = [[image, path] for image, path in images]
        if args.paddleclas_python:
            for suffix, results in (("", "cv2"), ("@pil_decode", "pil")):
                hints["paddleclas" + suffix] = {"hint": {"pipeline": "paddleclas"}, "size": 224, "decode": results}
            for key, value in external("preprocess_paddleclas_ref.py", args.paddleclas_python, args.paddleclas_path,
                                       listing, scratch).items():
                if key.startswith("version/"):
                    versions["paddleclas_env_" + key.split("/", 1)[1]] = value
                else:
                    inputs[key] = value
        if args.tf_python:
            for suffix, results in (("", "tf"), ("@pil_decode", "pil")):
                hints["vit_jax" + suffix] = {"hint": {"pipeline": "vit_jax"}, "size": 224, "decode": results}
            for key, value in external("preprocess_tf_ref.py", args.tf_python, None, listing, scratch).items():
                if key.startswith("version/"):
                    versions["tf_env_" + key.split("/", 1)[1]] = value
                else:
                    inputs[key] = value

    # one array per pipeline and quantity, rows in the order of `images` (NaN where refused)
    references, errors, decode_differences = {}, {}, {}
    probabilities = {}
    for name, entry in hints.items():
        size = entry["size"]
        rows = {"sample": [], "sums": [], "weighted_sums": [], "probabilities": []}
        for image, _ in images:
            value = inputs[f"{name}/{image}"]
            if isinstance(value, str):
                errors[f"{name}/{image}"] = value
                value = np.full((3, size, size), np.nan, np.float32)
            rows["sample"].append(value[SAMPLE])
            rows["sums"].append(value.astype(np.float64).sum(axis=(1, 2)))
            rows["weighted_sums"].append((value.astype(np.float64) * pattern(size)).sum(axis=(1, 2)))
            if size == MODEL["img_size"]:
                with torch.no_grad():
                    logits = model(torch.from_numpy(value[None]))
                rows["probabilities"].append(torch.softmax(logits.double(), dim=-1)[0].numpy())
        for quantity, values in rows.items():
            if values:
                references[f"{name}/{quantity}"] = np.stack(values)
        if rows["probabilities"]:
            probabilities[name] = references[f"{name}/probabilities"]
    # how far the library's own decoder (cv2.imdecode, tf.io.decode_image) is from PIL's
    for name in ("paddleclas", "vit_jax"):
        for row, (image, _) in enumerate(images):
            own, pil = inputs.get(f"{name}/{image}"), inputs.get(f"{name}@pil_decode/{image}")
            if isinstance(own, np.ndarray) and isinstance(pil, np.ndarray) and own.shape == pil.shape:
                decode_differences[f"{name}/{image}"] = {
                    "input": max_diff(own, pil),
                    "probabilities": max_diff(probabilities[name][row], probabilities[f"{name}@pil_decode"][row])}

    # transformers 5's default ViTImageProcessor is the torchvision ("fast") backend: how far its
    # inputs and probabilities are from the PIL backend's (which the fixtures reproduce)
    fast_differences = {}
    for name, config in HUGGINGFACE.items():
        fast = ViTImageProcessor(**config)
        pil = ViTImageProcessorPil(**config)
        worst_input, worst_probability = 0.0, 0.0
        for _, path in images:
            image = load_image(path)
            a = fast(images=image, return_tensors="pt")["pixel_values"].float()
            b = torch.from_numpy(pil(images=image, return_tensors="np")["pixel_values"]).float()
            worst_input = max(worst_input, max_diff(a.numpy(), b.numpy()))
            with torch.no_grad():
                pa, pb = (torch.softmax(model(x).double(), -1).numpy() for x in (a, b))
            worst_probability = max(worst_probability, max_diff(pa, pb))
        fast_differences[name] = {"input": worst_input, "probabilities": worst_probability}

    np.savez_compressed(os.path.join(args.out, "preprocess_reference.npz"), **references)
    versions.update(numpy=np.__version__, python=sys.version.split()[0])
    document = {"versions": versions, "model": MODEL, "sample": "x[:, 5::29, 5::29]",
                "weights_pattern": "(3 * row + 5 * column) % 7 - 3",
                "images": {image: {"file": os.path.relpath(path, args.out) if IMAGES_DIR in path else
                                   f"<scikit-learn>/datasets/images/{image}", "sha256": sha256(path)}
                           for image, path in images},
                "image_order": [image for image, _ in images],
                "pipelines": hints, "refused": errors, "decode_differences": decode_differences,
                "hf_fast_processor_differences": fast_differences}
    with open(os.path.join(args.out, "preprocess_reference.json"), "w") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(f"{len(hints)} pipelines x {len(images)} images, {len(errors)} refused by their library")
    for key, text in errors.items():
        print(f"  {key}: {text}")
    for key, entry in decode_differences.items():
        print(f"  decode difference {key}: {entry}")
    for key, entry in fast_differences.items():
        print(f"  transformers' fast processor against the PIL one, {key}: {entry}")
    return 0

"""timm Hub and transformers folders written by paddle-vit's `save_pretrained`, and the libraries'
own reading of them, for tests/test_publish.py. Two steps, because writing needs Paddle and
reading needs PyTorch:

    /work/venv/bin/python    tools/make_reference_fixtures.py publish   # (a) paddle-vit writes the folders
    /work/refvenv/bin/python tools/make_reference_fixtures.py publish   # (b) timm reads them, records its outputs

(a) builds each case of `CASES` (small deterministic models: today's families (distilled DeiT,
CLIP with QuickGELU, SigLIP's MAP head, DINOv2 with registers and layer scale) read from
tests/fixtures/timm_modern/<arch>, a plain ViT with mean pooling, the walkthrough's all-token
average, the tiny stem-only hybrid, a trained-run-like model with class names and the recipe's
preprocessing; three plain ViTs for transformers' ViTForImageClassification, one per image
processor; today's families for their own transformers classes: Dinov2Model (with and without
SwiGLU), Dinov2WithRegistersModel, CLIPVisionModelWithProjection, CLIPVisionModel,
SiglipVisionModel, DeiTForImageClassificationWithTeacher) and writes it with ``paddle_vit.weights.save_pretrained`` into
``tests/fixtures/publish/<case>/``. (b) loads every folder with
``timm.create_model("local-dir:" + folder, pretrained=True)`` (strict) and records its logits for
a fixed input (and transformers' ``AutoModelForImageClassification.from_pretrained(folder)``,
its TimmWrapper, for the same input), and its logits for the photos (tests/photos.py) through
timm's own ``resolve_data_config({}, model=m)`` + ``create_transform(**cfg)``; the transformers
folders (``--to huggingface``) by their class's ``from_pretrained`` (the class config.json's
``architectures`` names; its logits, pooler_output or image_embeds, `HF_OUTPUTS`; and the
processor's pixels of the photos for the family cases) and
``AutoImageProcessor.from_pretrained(folder, backend="pil")``, in
``tests/fixtures/publish_reference.{npz,json}``.

Which step runs is decided by the interpreter: one with paddle_vit writes, one with timm reads.
Only numpy and the standard library are imported at module level: the tests import `CASES` and
`build_case` from here.
"""
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
FOLDER = "publish"
SEED = 0
BATCH = 2
CLASS_NAMES = ["cormorant", "heron", "kingfisher", "osprey", "puffin"]
TOY = dict(image_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=4)
HF_TOY = dict(image_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2)
# case: how the model is made (a timm_modern folder read by create_model, or a registered name
# with overrides, its weights perturbed from `SEED`), and what the publishing is given
CASES = {
    "deit_distilled": dict(folder="deit_small_distilled_patch16_224"),
    "clip_quickgelu": dict(folder="vit_base_patch16_clip_quickgelu_224"),
    "siglip_map": dict(folder="vit_base_patch16_siglip_224"),
    "dinov2_reg4": dict(folder="vit_small_patch14_reg4_dinov2"),
    "plain_mean": dict(name="vit_small_patch16_224", overrides=dict(TOY, num_classes=5, pool="mean")),
    "walkthrough": dict(name="vit_walkthrough", overrides=dict(image_size=28)),
    "hybrid_stem": dict(name="vit_tiny_r_s16_p8_224", overrides=dict(TOY, patch_size=2, num_classes=10)),
    "trained_run": dict(name="vit_tiny_patch16_224", overrides=dict(TOY, num_classes=5),
                        class_names=CLASS_NAMES, recipe=dict(eval_crop_pct=0.875, interpolation="bilinear",
                                                             mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])),
    # transformers' ViTForImageClassification, with each of the three image processors written
    "hf_vit": dict(name="vit_tiny_patch16_224", overrides=dict(HF_TOY, num_classes=5), format="huggingface",
                   class_names=CLASS_NAMES, recipe=dict(eval_crop_pct=1.0, interpolation="bilinear",
                                                        mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])),
    "hf_tanh_bit": dict(name="vit_tiny_patch16_224", format="huggingface", recipe=dict(eval_crop_pct=0.875),
                        overrides=dict(HF_TOY, num_classes=3, gelu="tanh", layer_norm_epsilon=1e-12,
                                       qkv_bias=False)),
    "hf_deit_processor": dict(name="vit_tiny_patch16_224", overrides=dict(HF_TOY, num_classes=4, gelu="quick"),
                              format="huggingface", squash_crop=0.9),
    # today's families to their own transformers classes (appended: the cases above draw their inputs first)
    "hf_dinov2": dict(name="vit_small_patch14_dinov2", overrides=dict(HF_TOY, num_classes=0), format="huggingface"),
    "hf_dinov2_swiglu": dict(name="vit_giant_patch14_dinov2", overrides=dict(HF_TOY, num_classes=0, mlp_ratio=2.0),
                             format="huggingface"),
    "hf_dinov2_reg4": dict(name="vit_small_patch14_reg4_dinov2", overrides=dict(HF_TOY, num_classes=0),
                           format="huggingface"),
    "hf_clip_projection": dict(name="vit_base_patch16_clip_quickgelu_224", overrides=dict(HF_TOY, num_classes=8),
                               format="huggingface", projection=True),
    "hf_clip_gelu": dict(name="vit_base_patch16_clip_224", overrides=dict(HF_TOY, num_classes=0),
                         format="huggingface"),
    "hf_siglip": dict(name="vit_base_patch16_siglip_224", overrides=dict(HF_TOY, num_classes=0), format="huggingface",
                      square=dict(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])),
    "hf_deit_distilled": dict(name="deit_small_distilled_patch16_224", overrides=dict(HF_TOY, num_classes=5),
                              format="huggingface", class_names=CLASS_NAMES, squash_crop=0.9),
}
# what each transformers class's output is this ViT's: the logits, the projection, the pooled features
HF_OUTPUTS = {"ViTForImageClassification": "logits", "DeiTForImageClassificationWithTeacher": "logits",
              "CLIPVisionModelWithProjection": "image_embeds", "CLIPVisionModel": "pooler_output",
              "Dinov2Model": "pooler_output", "Dinov2WithRegistersModel": "pooler_output",
              "SiglipVisionModel": "pooler_output"}


def build_case(case):
    """(model, save_pretrained keyword arguments) of a case, in Paddle (paddle_vit imported here)."""
    import paddle
    import paddle_vit
    from paddle_vit.config import DataConfig
    from paddle_vit.data.preprocessing import Preprocess

    spec = CASES[case]
    if "folder" in spec:
        model = paddle_vit.create_model(pretrained=os.path.join(FIXTURES, "timm_modern", spec["folder"]))
        source = f"tests/fixtures/timm_modern/{spec['folder']}"
        return model.eval(), dict(name=spec["folder"], format="timm", source=source)
    paddle.seed(SEED)
    model = paddle_vit.create_model(spec["name"], **spec["overrides"])
    rng = np.random.default_rng(SEED)
    state = model.state_dict()
    for name in sorted(state):  # noise on every tensor, so that a misplaced one changes the logits
        value = state[name].numpy()
        scale = 0.25 if "qkv.weight" in name else 0.1
        state[name] = paddle.to_tensor((value + rng.standard_normal(value.shape) * scale).astype(value.dtype))
    model.set_state_dict(state)
    kwargs = dict(name=spec["name"], format=spec.get("format", "timm"))
    if spec.get("projection"):  # CLIP's visual projection as the head: no bias, an embedding
        state = model.state_dict()
        state["head.bias"] = paddle.zeros_like(state["head.bias"])
        model.set_state_dict(state)
        model.head_is_projection = True
    if "square" in spec:  # a square resize to the model's size (SigLIP's image processor)
        kwargs["preprocess"] = Preprocess(model.config.image_size, 1.0, resize_mode="both_sides",
                                          origin="a square resize", **spec["square"])
    if "class_names" in spec:
        model.class_names = list(spec["class_names"])
    if "recipe" in spec:
        data = DataConfig(**spec["recipe"])
        kwargs["preprocess"] = Preprocess.from_config(data, model.config.image_size, origin="the recipe's data config")
        kwargs["run"] = {"folder": "runs/run-001", "data": "toy birds (5 classes)", "epochs": 3, "best_top1": 0.8}
    if "squash_crop" in spec:  # a square resize then a centre crop (timm's squash, transformers' DeiT processor)
        kwargs["preprocess"] = Preprocess(model.config.image_size, spec["squash_crop"], resize_mode="both_sides",
                                          origin="a square resize and a centre crop")
    return model.eval(), kwargs


def write_folders(out):
    """(a): every case written by paddle-vit into out/publish/<case>/, and the fixed input."""
    from paddle_vit.weights import save_pretrained

    root = os.path.join(out, FOLDER)
    for case in CASES:
        model, kwargs = build_case(case)
        folder = save_pretrained(model, os.path.join(root, case), overwrite=True, **kwargs)
        for name in os.listdir(folder):
            os.chmod(os.path.join(folder, name), 0o644)
        with open(os.path.join(folder, "config.json")) as stream:
            config = json.load(stream)
        print(f"{case}: {config.get('architecture') or config['architectures'][0]}")
    return 0


def record(out):
    """(b): timm reads every folder; its logits for a fixed input and for the photos."""
    sys.path.insert(0, os.path.dirname(HERE))  # tools/: torch_reference
    from torch_reference import import_timm

    import_timm()
    import PIL
    import safetensors
    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_data_config
    from transformers import AutoModel, AutoModelForImageClassification

    from common import folder_size, write_reference

    sys.path.insert(0, os.path.join(REPO, "tests"))
    from photos import make_photos

    references, cases = {}, {}
    generator = torch.Generator().manual_seed(SEED)
    scratch = os.path.join(out, ".publish_photos")
    os.makedirs(scratch, exist_ok=True)
    try:
        photos = make_photos(scratch)
        for case, spec in CASES.items():
            folder = os.path.abspath(os.path.join(out, FOLDER, case))
            if spec.get("format") == "huggingface":
                cases[case] = record_transformers(case, folder, photos, references, generator)
                continue
            with torch.no_grad():
                model = timm.create_model("local-dir:" + folder, pretrained=True).eval()
                size = model.pretrained_cfg["input_size"]
                images = torch.randn(BATCH, *size, generator=generator)
                references[f"{case}/input"] = images.numpy()
                references[f"{case}/logits"] = model(images).numpy()
                if model.num_classes:  # transformers' timm wrapper
                    wrapped = AutoModelForImageClassification.from_pretrained(folder).eval()
                    references[f"{case}/transformers_logits"] = wrapped(pixel_values=images).logits.numpy()
                else:  # no head: its features (timm's output then)
                    wrapped = AutoModel.from_pretrained(folder).eval()
                    references[f"{case}/transformers_logits"] = wrapped(pixel_values=images).pooler_output.numpy()
                data_config = resolve_data_config({}, model=model)
                transform = create_transform(**data_config)
                for name, path in photos.items():
                    with Image.open(path) as image:
                        pixels = transform(image.convert("RGB")).unsqueeze(0)
                    references[f"{case}/photo/{name}/logits"] = model(pixels).numpy()[0]
            cases[case] = {"class": type(model).__name__, "global_pool": model.global_pool,
                           "transformers_class": type(wrapped).__name__,
                           "data_config": {key: list(value) if isinstance(value, tuple) else value
                                           for key, value in data_config.items()},
                           "transform": repr(transform), "photos": sorted(photos),
                           "folder_bytes": folder_size(folder)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    import transformers

    write_reference(out, "publish", references, cases,
                    dict(torch=torch.__version__, timm=timm.__version__, pillow=PIL.__version__,
                         safetensors=safetensors.__version__, transformers=transformers.__version__))
    print(f"{FOLDER}: {folder_size(os.path.join(out, FOLDER))} bytes; "
          f"publish_reference.npz {os.path.getsize(os.path.join(out, 'publish_reference.npz'))} bytes")
    return 0


def record_transformers(case, folder, photos, references, generator):
    """transformers reads a published folder: ViTForImageClassification.from_pretrained (no key
    missing or left over), its logits for a fixed input and for the photos through
    AutoImageProcessor.from_pretrained(folder, backend="pil") (the photo converted to RGB first, as
    transformers' load_image does)."""
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor

    from common import folder_size

    import transformers

    with open(os.path.join(folder, "config.json")) as stream:
        architecture = json.load(stream)["architectures"][0]
    model, info = getattr(transformers, architecture).from_pretrained(folder, output_loading_info=True)
    model.eval()
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    output = HF_OUTPUTS[architecture]
    processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    size = model.config.image_size
    new = architecture != "ViTForImageClassification"
    with torch.no_grad():
        images = torch.randn(BATCH, 3, size, size, generator=generator)
        references[f"{case}/input"] = images.numpy()
        references[f"{case}/logits"] = getattr(model(pixel_values=images), output).numpy()
        for name, path in photos.items():
            with Image.open(path) as image:
                pixels = processor(image.convert("RGB"), return_tensors="pt")["pixel_values"]
            if new:  # the processor's pixels, for paddle-vit's reading of preprocessor_config.json
                references[f"{case}/photo/{name}/pixels"] = pixels.numpy()[0]
            references[f"{case}/photo/{name}/logits"] = getattr(model(pixel_values=pixels), output).numpy()[0]
    info = {"class": type(model).__name__, "processor": type(processor).__name__,
            "attn_implementation": model.config._attn_implementation, "photos": sorted(photos),
            "folder_bytes": folder_size(folder)}
    if new:
        info["output"] = output
    return info


def make(args):
    try:
        import paddle_vit  # noqa: F401
    except ImportError:
        return record(args.out)
    return write_folders(args.out)

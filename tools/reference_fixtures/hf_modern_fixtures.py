"""Reference outputs of today's ViT families in transformers and OpenCLIP, made with their own
code (run with torch + transformers + open_clip, not Paddle).

    /work/refvenv/bin/python tools/make_reference_fixtures.py hf_modern

Writes ``tests/fixtures/hf_modern/``:

- ``<name>/``: ``save_pretrained`` folders (``config.json``, ``model.safetensors``) of small
  transformers models -- ``Dinov2Model`` (``dinov2``; with ``use_swiglu_ffn``:
  ``dinov2_swiglu``), ``Dinov2WithRegistersModel`` (``dinov2_registers``, 4 registers),
  ``CLIPVisionModel`` (``clip_vision``), ``CLIPVisionModelWithProjection``
  (``clip_vision_projection``), ``SiglipVisionModel`` with its MAP head (``siglip_vision``),
  ``DeiTForImageClassificationWithTeacher`` (``deit_distilled``, 5 named classes) and
  ``ViTMAEModel`` (``vit_mae``, mask_ratio 0) -- plus a ``preprocessor_config.json`` written by
  the family's own image processor class with the family's Hub defaults (mean/std, resampling,
  resize + crop recipe) at a small size;
- ``openclip_quickgelu.safetensors``, ``openclip_gelu.safetensors``: the image tower of an
  ``open_clip.model.CLIP`` (width 32, 2 layers, 4 heads, patch 8, image 32, output 16), with
  OpenAI's QuickGELU and with nn.GELU, under the names a full CLIP state dict gives it
  (``visual.conv1.weight`` ... ``visual.proj``; OpenAI's released .pt files use the same names).

and ``hf_modern_reference.npz`` / ``.json``: per case the fixed input batch and the model's
outputs; the same for one image at a second, non-square size (``interpolate_pos_encoding=True`` where the class
has that flag, Dinov2 always interpolates); scikit-learn's ``china.jpg`` and its variants
(``photos()`` of timm_hub_fixtures) opened with PIL and fed, as they are, through the processor
that ``AutoImageProcessor.from_pretrained(folder, backend="pil")`` builds (OpenCLIP: through
``open_clip.image_transform``), their ``pixel_values`` and the model's outputs for them.

Every parameter is perturbed (Gaussian noise 0.1; q/k/v and the MLP weights 0.25, SigLIP's MAP
head MLP 0.5, so that the tanh GELU's approximation shows; layer-scale lambdas 0.5 + noise),
and the embedding side (patch projection, class/distillation/register tokens, position
embeddings) is scaled by 1e-3, so that the first LayerNorms see variances near their epsilon:
each case checks that another epsilon (1e-12, 1e-6, 1e-5), another activation (QuickGELU <-> exact
GELU, SigLIP's tanh GELU -> exact) and, at the second size, another position-embedding resampling
(antialias flipped, bilinear) move the outputs by more than 1e-3, and records by how much. The
tanh GELU in place of the exact one moves the Dinov2/DeiT/MAE outputs (all behind a final
LayerNorm) by only 7e-4 .. 9e-4: checked against the tests' tolerance 1e-4 there. ViTMAE
shuffles its tokens by random noise even at mask_ratio 0; the references pass
``noise = arange(num_patches)``, which keeps the order.
"""
import contextlib
import json
import os
import re
import shutil

import numpy as np
import torch

from common import folder_size, max_diff, perturbed, write_reference  # tools/reference_fixtures is on sys.path
from torch_reference import import_timm  # tools/ is on sys.path when run as a script

import_timm()  # transformers and open_clip import torchvision, which needs the op declarations

import open_clip  # noqa: E402
import PIL  # noqa: E402
import safetensors  # noqa: E402
import sklearn  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from timm_hub_fixtures import photos  # noqa: E402
from transformers import (AutoImageProcessor, CLIPVisionConfig, CLIPVisionModel,  # noqa: E402
                          CLIPVisionModelWithProjection, DeiTConfig, DeiTForImageClassificationWithTeacher,
                          Dinov2Config, Dinov2Model, Dinov2WithRegistersConfig, Dinov2WithRegistersModel,
                          SiglipVisionConfig, SiglipVisionModel, ViTMAEConfig, ViTMAEModel)
from transformers.activations import ACT2FN  # noqa: E402
from transformers.image_utils import (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD,  # noqa: E402
                                      PILImageResampling)
from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil  # noqa: E402
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil  # noqa: E402
from transformers.models.deit.image_processing_pil_deit import DeiTImageProcessorPil  # noqa: E402
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil  # noqa: E402
from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil  # noqa: E402

FOLDER = "hf_modern"
BATCH = 2
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
DINO = dict(SIZES, patch_size=14, image_size=42)  # mlp_ratio 4 (the class default): MLP 128
PATCH8 = dict(SIZES, patch_size=8, image_size=32, intermediate_size=64)
LABELS = ["cormorant", "heron", "kingfisher", "osprey", "puffin"]
BICUBIC = PILImageResampling.BICUBIC

# Each family's Hub preprocessor (facebook/dinov2-base, openai/clip-vit-base-patch32,
# google/siglip-base-patch16-224, facebook/deit-base-distilled-patch16-224, facebook/vit-mae-base)
# with its sizes scaled to the toy models: 256/224 -> 48/42 (Dinov2), int(256/224*32)=36 -> 32 (DeiT).
PROCESSORS = {
    "dinov2": (BitImageProcessorPil, dict(size={"shortest_edge": 48}, crop_size={"height": 42, "width": 42},
                                          resample=BICUBIC, image_mean=IMAGENET_DEFAULT_MEAN,
                                          image_std=IMAGENET_DEFAULT_STD, do_convert_rgb=True)),
    "clip": (CLIPImageProcessorPil, dict(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})),
    "siglip": (SiglipImageProcessorPil, dict(size={"height": 32, "width": 32})),
    "deit": (DeiTImageProcessorPil, dict(size={"height": 36, "width": 36}, crop_size={"height": 32, "width": 32},
                                         resample=BICUBIC, image_mean=IMAGENET_DEFAULT_MEAN,
                                         image_std=IMAGENET_DEFAULT_STD)),
    "vit_mae": (ViTImageProcessorPil, dict(size={"height": 32, "width": 32}, resample=BICUBIC,
                                           image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD)),
}

# name: (model class, config, processor, outputs, second input size, has an interpolate_pos_encoding flag,
#        another activation to check against)
CASES = {
    "dinov2": (Dinov2Model, Dinov2Config(**DINO), "dinov2", ("last_hidden_state", "pooler_output"),
               (56, 42), False, "gelu_pytorch_tanh"),
    "dinov2_swiglu": (Dinov2Model, Dinov2Config(**DINO, use_swiglu_ffn=True), "dinov2",
                      ("last_hidden_state", "pooler_output"), (56, 42), False, None),
    "dinov2_registers": (Dinov2WithRegistersModel, Dinov2WithRegistersConfig(**DINO, num_register_tokens=4),
                         "dinov2", ("last_hidden_state", "pooler_output"), (56, 42), False, "gelu_pytorch_tanh"),
    "clip_vision": (CLIPVisionModel, CLIPVisionConfig(**PATCH8, projection_dim=16, hidden_act="quick_gelu",
                                                      layer_norm_eps=1e-5), "clip",
                    ("last_hidden_state", "pooler_output"), (48, 40), True, "gelu"),
    "clip_vision_projection": (CLIPVisionModelWithProjection,
                               CLIPVisionConfig(**PATCH8, projection_dim=16, hidden_act="quick_gelu",
                                                layer_norm_eps=1e-5), "clip",
                               ("last_hidden_state", "image_embeds"), (48, 40), True, "gelu"),
    "siglip_vision": (SiglipVisionModel, SiglipVisionConfig(**PATCH8, vision_use_head=True), "siglip",
                      ("last_hidden_state", "pooler_output"), (48, 40), True, "gelu"),
    "deit_distilled": (DeiTForImageClassificationWithTeacher,
                       DeiTConfig(**PATCH8, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
                                  label2id={label: index for index, label in enumerate(LABELS)}), "deit",
                       ("logits", "cls_logits", "distillation_logits", "last_hidden_state"), (48, 40), True,
                       "gelu_pytorch_tanh"),
    "vit_mae": (ViTMAEModel, ViTMAEConfig(**PATCH8, mask_ratio=0.0), "vit_mae", ("last_hidden_state",),
                (48, 40), True, "gelu_pytorch_tanh"),
}

# how each class pools and resizes its position table (transformers 5.24; recorded in the json)
NOTES = {
    "dinov2": "tokens [cls, patches]; block x += layer_scale1(attn(norm1(x))); x += layer_scale2(mlp(norm2(x))); "
              "last_hidden_state = layernorm(x); pooler_output = last_hidden_state[:, 0]. No interpolate_pos_encoding "
              "flag: the patch table is resized whenever the grid is not the config's or H != W "
              "(bicubic, align_corners=False, no antialias, size=(H//p, W//p), computed in float32)",
    "dinov2_swiglu": "as dinov2, the MLP being SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x)), hidden "
                     "(int(4 * 32 * 2 / 3) + 7) // 8 * 8 = 88; the file stores gate and up stacked as "
                     "mlp.weights_in (176 x 32, gate first) and down as mlp.weights_out",
    "dinov2_registers": "tokens [cls, 4 registers, patches]: position embeddings are added to [cls, patches] "
                        "before the registers are inserted (registers get none); the table is resized with "
                        "antialias=True (Dinov2Model: False); pooler_output = layernorm(x)[:, 0]",
    "clip_vision": "tokens [cls, patches], patch conv without bias; pre_layrnorm after the embeddings; "
                   "last_hidden_state = encoder output (NOT post-layernormed); pooler_output = post_layernorm(x[:, 0])",
    "clip_vision_projection": "image_embeds = visual_projection(post_layernorm(x[:, 0])) (no bias); "
                              "last_hidden_state not post-layernormed",
    "siglip_vision": "no class token (position table 16 = 4x4); last_hidden_state = post_layernorm(x); pooler_output "
                     "= MAP head: h = MultiheadAttention(probe, x, x)[0]; h = h + mlp(layernorm(h)); h[:, 0]",
    "deit_distilled": "tokens [cls, distillation, patches]; x = layernorm(x); logits = (cls_classifier(x[:, 0]) + "
                      "distillation_classifier(x[:, 1])) / 2; last_hidden_state recorded from model.deit",
    "vit_mae": "position embeddings added to the patches, then random_masking (argsort of noise), then "
               "[cls_token + pos[0], kept patches]; no pooler. The references pass noise=arange(num_patches) per "
               "image, which keeps the order (ids_restore == arange and mask all 0 are asserted)",
}

QKV = re.compile(r"\.(q_proj|k_proj|v_proj)\.|\.in_proj_(weight|bias)$")
MLP = re.compile(r"\.mlp\.\w+\.weight$")  # fc1/fc2, c_fc/c_proj, SwiGLU's gate/up/down
EMBEDDING_SIDE = re.compile(r"(^|\.)embeddings\.|^(conv1\.|class_embedding$|positional_embedding$)")
EPSILONS = (1e-12, 1e-6, 1e-5)

OPENCLIP_VARIANTS = {"quickgelu": True, "gelu": False}
OPENCLIP_MODEL = dict(embed_dim=16,
                      vision_cfg=dict(image_size=32, layers=2, width=32, head_width=8, patch_size=8),
                      text_cfg=dict(context_length=8, vocab_size=64, width=32, heads=4, layers=1))


@torch.no_grad()
def randomise(model, rng):
    """Noise on every tensor (q/k/v and MLP weights more), layer-scale lambdas ~0.5 so that every block counts,
    then the embedding side scaled by 1e-3 (see the docstring)."""
    for name, parameter in model.named_parameters():
        value = parameter.numpy().astype("float64")
        if name.endswith("lambda1"):
            value = np.full_like(value, 0.5)
        scale = 0.5 if name.startswith("head.mlp.") else 0.25 if QKV.search(name) or MLP.search(name) else 0.1
        value = perturbed(value, rng, scale)
        if EMBEDDING_SIDE.search(name):
            value *= 1e-3
        parameter.copy_(torch.from_numpy(value.astype("float32")))


def save(model, folder):
    model.save_pretrained(folder)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)  # safetensors writes owner-only files


def file_keys(path):
    with safe_open(path, "pt") as handle:
        return {key: list(handle.get_slice(key).get_shape()) for key in sorted(handle.keys())}


@contextlib.contextmanager
def interpolate_spy(**override):
    """Record the arguments of every torch.nn.functional.interpolate call (the models look it up
    at call time), optionally overriding some of them."""
    original, calls = torch.nn.functional.interpolate, []

    def spy(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
            recompute_scale_factor=None, antialias=False):
        arguments = dict(size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners,
                         recompute_scale_factor=recompute_scale_factor, antialias=antialias)
        calls.append(dict(arguments, input_shape=list(input.shape), input_dtype=str(input.dtype)))
        arguments.update(override)
        return original(input, **arguments)

    torch.nn.functional.interpolate = spy
    try:
        yield calls
    finally:
        torch.nn.functional.interpolate = original


@contextlib.contextmanager
def replaced(modules, attribute, values):
    saved = [getattr(module, attribute) for module in modules]
    for module, value in zip(modules, values):
        setattr(module, attribute, value)
    try:
        yield
    finally:
        for module, value in zip(modules, saved):
            setattr(module, attribute, value)


def run(name, model, pixels, interpolate=False):
    """The case's outputs (numpy) for `pixels`."""
    model_class, config, _, outputs, _, has_flag, _ = CASES[name]
    kwargs = {"interpolate_pos_encoding": True} if interpolate and has_flag else {}
    if model_class is ViTMAEModel:
        patches = (pixels.shape[2] // config.patch_size) * (pixels.shape[3] // config.patch_size)
        kwargs["noise"] = torch.arange(patches, dtype=torch.float32).expand(pixels.shape[0], -1)
    result = model(pixel_values=pixels, **kwargs)
    if model_class is ViTMAEModel:  # the order is kept and nothing is masked
        assert (result.ids_restore == torch.arange(result.ids_restore.shape[1])).all() and not result.mask.any()
    values = {key: getattr(result, key) for key in outputs if getattr(result, key, None) is not None}
    if model_class is DeiTForImageClassificationWithTeacher:  # its output has no hidden states
        values["last_hidden_state"] = model.deit(pixels, **kwargs).last_hidden_state
    return {key: value.numpy() for key, value in values.items()}


def moved(reference, values):
    return max(max_diff(reference[key], values[key]) for key in reference)


@torch.no_grad()
def sensitivities(name, model, images, large):
    """How far the outputs move under another epsilon, activation and position resampling."""
    _, config, _, _, _, _, other_activation = CASES[name]
    reference, found = run(name, model, images), {}
    norms = [module for module in model.modules() if isinstance(module, torch.nn.LayerNorm)]
    for epsilon in EPSILONS:
        if epsilon != config.layer_norm_eps:
            with replaced(norms, "eps", [epsilon] * len(norms)):
                found[f"epsilon_{epsilon:g}_moves_by"] = moved(reference, run(name, model, images))
    if other_activation:
        mlps = [module for module in model.modules() if hasattr(module, "activation_fn")]
        with replaced(mlps, "activation_fn", [ACT2FN[other_activation]] * len(mlps)):
            found[f"{other_activation}_instead_of_{config.hidden_act}_moves_by"] = moved(
                reference, run(name, model, images))
    with interpolate_spy() as calls:
        reference_large = run(name, model, large, interpolate=True)
    found["interpolate_calls"] = calls
    call = calls[0]
    with interpolate_spy(antialias=not call["antialias"]):
        found[f"antialias_{not call['antialias']}_moves_by"] = moved(
            reference_large, run(name, model, large, interpolate=True))
    with interpolate_spy(mode="bilinear"):
        found["bilinear_instead_moves_by"] = moved(reference_large, run(name, model, large, interpolate=True))
    for key, value in found.items():
        if key.endswith("_moves_by"):  # the exact -> tanh GELU change hides behind a final LayerNorm
            least = 1e-4 if key == "gelu_pytorch_tanh_instead_of_gelu_moves_by" else 1e-3
            assert value > least, f"{name}: {key} is only {value}"
    return found


def feed_photo(processor, path):
    """The processor's pixel values for the photo opened as it is; where the processor refuses
    (no RGB conversion: RGBA and L give 4 and 1 channels), the caller's convert("RGB")."""
    with Image.open(path) as image:
        info = dict(mode=image.mode, size=list(image.size))
        try:
            pixels = processor(image, return_tensors="pt")["pixel_values"]
            info["converted_by"] = "processor" if image.mode != "RGB" else "none needed"
            if image.mode == "RGBA":  # how the processor's conversion differs from PIL's convert("RGB")
                plain = processor(image.convert("RGB"), return_tensors="pt")["pixel_values"]
                info["differs_from_convert_rgb_by"] = max_diff(pixels.numpy(), plain.numpy())
        except ValueError as error:
            info["processor_error"] = str(error)
            info["converted_by"] = 'caller: Image.convert("RGB")'
            pixels = processor(image.convert("RGB"), return_tensors="pt")["pixel_values"]
    return pixels, info


@torch.no_grad()
def make_hf_case(name, out, rng, photo_paths, references):
    model_class, config, processor_name, _, second, has_flag, _ = CASES[name]
    model = model_class(config).eval()
    randomise(model, rng)
    folder = os.path.join(out, FOLDER, name)
    save(model, folder)
    processor_class, processor_kwargs = PROCESSORS[processor_name]
    processor_class(**processor_kwargs).save_pretrained(folder)
    os.chmod(os.path.join(folder, "preprocessor_config.json"), 0o644)

    loaded = model_class.from_pretrained(folder).eval()  # what a user gets back from the folder
    height = width = config.image_size
    images = torch.from_numpy(rng.standard_normal((BATCH, 3, height, width)).astype("float32"))
    large = torch.from_numpy(rng.standard_normal((1, 3) + second).astype("float32"))
    assert moved(run(name, model, images), run(name, loaded, images)) == 0.0
    references[f"{name}/input"] = images.numpy()
    references.update({f"{name}/{key}": value for key, value in run(name, loaded, images).items()})
    references[f"{name}/interpolated/input"] = large.numpy()
    references.update({f"{name}/interpolated/{key}": value
                       for key, value in run(name, loaded, large, interpolate=True).items()})
    found = sensitivities(name, loaded, images, large)

    processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    assert type(processor) is processor_class
    assert type(AutoImageProcessor.from_pretrained(folder, use_fast=False)) is processor_class
    if model_class is ViTMAEModel:  # what the default noise (torch.rand) does at mask_ratio 0
        shuffled = loaded(pixel_values=images).last_hidden_state.numpy()
        ordered = references[f"{name}/last_hidden_state"]
        found["without_noise_moves_last_hidden_state_by"] = max_diff(shuffled, ordered)
        found["without_noise_moves_cls_row_by"] = max_diff(shuffled[:, 0], ordered[:, 0])
        found["without_noise_rows_are_a_permutation"] = bool(np.allclose(
            np.sort(shuffled[:, 1:], axis=1), np.sort(ordered[:, 1:], axis=1), atol=1e-5))
    photo_info = {}
    for photo, path in photo_paths.items():
        pixels, photo_info[photo] = feed_photo(processor, path)
        references[f"photo/{name}/{photo}/pixel_values"] = pixels.numpy()
        references.update({f"photo/{name}/{photo}/{key}": value
                           for key, value in run(name, loaded, pixels).items()})

    with open(os.path.join(folder, "config.json")) as stream:
        saved_config = json.load(stream)
    with open(os.path.join(folder, "preprocessor_config.json")) as stream:
        processor_config = json.load(stream)
    print(f"{name}: " + ", ".join(f"{key} {value:.2e}" for key, value in found.items() if key.endswith("_by")))
    return dict(folder=f"{FOLDER}/{name}", model_class=model_class.__name__, notes=NOTES[name], config=saved_config,
                processor_class=processor_class.__name__, processor_config=processor_config,
                processor_loaded_as=f'AutoImageProcessor.from_pretrained(folder, backend="pil") -> '
                                    f"{type(processor).__name__} (use_fast=False gives the same class)",
                input_size=[height, width], interpolated_input_size=list(second),
                interpolate_pos_encoding_flag=has_flag, outputs=sorted(run(name, loaded, images)),
                photos=photo_info, file_keys=file_keys(os.path.join(folder, "model.safetensors")),
                attn_implementation=loaded.config._attn_implementation, **found)


def openclip_to_hf(state, quick_gelu):
    """The OpenCLIP image tower's tensors under CLIPVisionModelWithProjection's names (a cross-check
    of the mapping: in_proj split in thirds q, k, v; proj transposed)."""
    hf = {"vision_model.embeddings.class_embedding": state["visual.class_embedding"],
          "vision_model.embeddings.patch_embedding.weight": state["visual.conv1.weight"],
          "vision_model.embeddings.position_embedding.weight": state["visual.positional_embedding"],
          "visual_projection.weight": state["visual.proj"].T}
    for ours, theirs in (("ln_pre", "pre_layrnorm"), ("ln_post", "post_layernorm")):
        for kind in ("weight", "bias"):
            hf[f"vision_model.{theirs}.{kind}"] = state[f"visual.{ours}.{kind}"]
    for index in range(OPENCLIP_MODEL["vision_cfg"]["layers"]):
        ours, theirs = f"visual.transformer.resblocks.{index}.", f"vision_model.encoder.layers.{index}."
        for kind in ("weight", "bias"):
            for part, chunk in zip(("q_proj", "k_proj", "v_proj"), state[ours + f"attn.in_proj_{kind}"].chunk(3)):
                hf[theirs + f"self_attn.{part}.{kind}"] = chunk
            for a, b in (("attn.out_proj", "self_attn.out_proj"), ("ln_1", "layer_norm1"), ("ln_2", "layer_norm2"),
                         ("mlp.c_fc", "mlp.fc1"), ("mlp.c_proj", "mlp.fc2")):
                hf[theirs + f"{b}.{kind}"] = state[ours + f"{a}.{kind}"]
    vision = OPENCLIP_MODEL["vision_cfg"]
    config = CLIPVisionConfig(hidden_size=vision["width"], num_hidden_layers=vision["layers"],
                              num_attention_heads=vision["width"] // vision["head_width"],
                              intermediate_size=4 * vision["width"], patch_size=vision["patch_size"],
                              image_size=vision["image_size"], projection_dim=OPENCLIP_MODEL["embed_dim"],
                              hidden_act="quick_gelu" if quick_gelu else "gelu", layer_norm_eps=1e-5)
    model = CLIPVisionModelWithProjection(config).eval()
    missing, unexpected = model.load_state_dict(hf, strict=False)
    assert not unexpected and all(key.endswith("position_ids") for key in missing), (missing, unexpected)
    return model


@torch.no_grad()
def make_openclip_case(variant, out, rng, photo_paths, references):
    quick_gelu = OPENCLIP_VARIANTS[variant]
    name = f"openclip_{variant}"
    clip = open_clip.model.CLIP(**OPENCLIP_MODEL, quick_gelu=quick_gelu).eval()
    visual = clip.visual
    randomise(visual, rng)
    state = {f"visual.{key}": value.contiguous() for key, value in visual.state_dict().items()}
    assert set(state) == {key for key in clip.state_dict() if key.startswith("visual.")}
    path = os.path.join(out, FOLDER, f"{name}.safetensors")
    save_file(state, path)
    os.chmod(path, 0o644)

    size = OPENCLIP_MODEL["vision_cfg"]["image_size"]
    images = torch.from_numpy(rng.standard_normal((BATCH, 3, size, size)).astype("float32"))
    embeds = visual(images).numpy()
    references[f"{name}/input"] = images.numpy()
    references[f"{name}/image_embeds"] = embeds
    found = {}
    norms = [module for module in visual.modules() if isinstance(module, torch.nn.LayerNorm)]
    with replaced(norms, "eps", [1e-6] * len(norms)):
        found["epsilon_1e-06_moves_by"] = max_diff(visual(images).numpy(), embeds)
    other = open_clip.model.CLIP(**OPENCLIP_MODEL, quick_gelu=not quick_gelu).visual.eval()
    other.load_state_dict(visual.state_dict())
    found[f"{'gelu' if quick_gelu else 'quickgelu'}_instead_moves_by"] = max_diff(other(images).numpy(), embeds)
    for key, value in found.items():
        assert value > 1e-3, f"{name}: {key} is only {value}"
    hf = openclip_to_hf(state, quick_gelu)
    found["hf_clip_vision_projection_matches_to"] = max_diff(hf(pixel_values=images).image_embeds.numpy(), embeds)
    assert found["hf_clip_vision_projection_matches_to"] < 1e-5

    preprocess = open_clip.image_transform(size, is_train=False, mean=open_clip.OPENAI_DATASET_MEAN,
                                           std=open_clip.OPENAI_DATASET_STD)
    hf_processor = CLIPImageProcessorPil(**PROCESSORS["clip"][1])
    photo_info = {}
    for photo, photo_path in photo_paths.items():
        with Image.open(photo_path) as image:
            pixels = preprocess(image).unsqueeze(0)
            hf_pixels = hf_processor(image, return_tensors="pt")["pixel_values"]
            photo_info[photo] = dict(mode=image.mode, size=list(image.size),
                                     hf_clip_processor_differs_by=max_diff(pixels.numpy(), hf_pixels.numpy()))
        references[f"photo/{name}/{photo}/pixel_values"] = pixels.numpy()
        references[f"photo/{name}/{photo}/image_embeds"] = visual(pixels).numpy()
    print(f"{name}: " + ", ".join(f"{key} {value:.2e}" for key, value in found.items()))
    return dict(file=f"{FOLDER}/{name}.safetensors", built_with="open_clip.model.CLIP(**model_cfg, quick_gelu=...)"
                ".visual", model_cfg=OPENCLIP_MODEL, quick_gelu=quick_gelu, layer_norm_eps=1e-5,
                outputs=["image_embeds"], preprocess=repr(preprocess), photos=photo_info,
                file_keys=file_keys(path), **found)


def make(args):
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    shutil.rmtree(os.path.join(args.out, FOLDER), ignore_errors=True)
    os.makedirs(os.path.join(args.out, FOLDER))
    references, cases = {}, {}
    scratch = os.path.join(args.out, ".hf_modern_photos")
    os.makedirs(scratch, exist_ok=True)
    try:
        photo_paths = photos(scratch)
        for name in CASES:
            torch.manual_seed(args.seed)
            cases[name] = make_hf_case(name, args.out, rng, photo_paths, references)
        for variant in OPENCLIP_VARIANTS:
            torch.manual_seed(args.seed)
            cases[f"openclip_{variant}"] = make_openclip_case(variant, args.out, rng, photo_paths, references)
    finally:
        shutil.rmtree(scratch)
    write_reference(args.out, FOLDER, references, cases,
                    dict(torch=torch.__version__, transformers=transformers.__version__,
                         open_clip=open_clip.__version__, pillow=PIL.__version__,
                         safetensors=safetensors.__version__, sklearn=sklearn.__version__, seed=args.seed))
    size = folder_size(os.path.join(args.out, FOLDER)) + sum(
        os.path.getsize(os.path.join(args.out, f"{FOLDER}_reference.{kind}")) for kind in ("npz", "json"))
    print(f"wrote {args.out}: {FOLDER}/ ({len(cases)} cases) and {FOLDER}_reference.npz/.json ({size / 1e6:.2f} MB)")
    return 0

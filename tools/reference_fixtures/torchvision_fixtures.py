"""torchvision reference outputs for tests/test_torchvision_weights.py (run with torch +
torchvision, not Paddle).

    /work/torchvenv/bin/python tools/make_reference_fixtures.py torchvision

Builds small ``torchvision.models.vision_transformer.VisionTransformer``s (the class behind
``vit_b_16`` ... ``vit_h_14``) with random weights, every tensor perturbed so that each one
changes the logits, and the embedding side (``conv_proj``, ``class_token``,
``encoder.pos_embedding``) scaled down by 1e-3 so that the first LayerNorm sees variances near
its epsilon: torchvision's 1e-6 then gives other logits than Paddle's default 1e-5 (checked
below, and recorded). The MLP's first layer and the head get larger weights so that the exact
GELU and its tanh approximation give different logits too (checked and recorded).

Writes:
- ``torchvision_vit.pth``: ``torch.save(model.state_dict())``, as people save
  ``vit_b_16(weights=...)``; the same tensors as ``torchvision_vit.safetensors`` (the tests read
  the .safetensors where torch is not installed);
- ``torchvision_vit_prelogits.safetensors``: a model with ``representation_size`` set, so that
  ``heads.pre_logits`` (Linear + tanh) exists;
- ``torchvision_reference.npz`` / ``.json``: the inputs and torchvision's logits per case; at
  48x48 (``torchvision_vit_48``), ``torchvision_vit``'s weights through torchvision's own
  ``interpolate_embeddings`` (bicubic, align_corners=True), the resampled table and the logits.
  224 -> 384 is the same arithmetic on a 14x14 -> 24x24 grid; here 4x4 -> 6x6.
Also checked here, not stored: a state dict with the MLP names of torchvision < 0.14
(``mlp.linear_1``/``mlp.linear_2``), which torchvision's ``MLPBlock._load_from_state_dict``
renames, loads into torchvision to the same logits.
"""
import collections
import os
import sys

import numpy as np
import torch

from common import max_diff, perturbed, write_reference
from torch_reference import import_timm  # tools/ is on sys.path when run as a script

import_timm()  # torchvision's import needs its op schemas where its library does not match torch

import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.models.vision_transformer import VisionTransformer, interpolate_embeddings  # noqa: E402

TOY = dict(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64)
CASES = {
    "torchvision_vit": dict(num_classes=10, representation_size=None),
    "torchvision_vit_prelogits": dict(num_classes=5, representation_size=24),  # 24 != 32: a wrong wiring cannot load
}
RESAMPLED_SIZE = 48
BATCH = 2  # at 32x32; one image at 48x48: the fixtures stay under their budget
EMBEDDING_SIDE = ("conv_proj.", "class_token", "encoder.pos_embedding")


def build(arguments, image_size=TOY["image_size"]):
    return VisionTransformer(**dict(TOY, image_size=image_size), **arguments).eval()


@torch.no_grad()
def randomise(model, rng):
    """Perturb every tensor (zero-initialised heads and class token included); see the module
    docstring for the scales."""
    for name, parameter in model.named_parameters():
        if "in_proj_weight" in name:
            scale = 0.25  # attention far from uniform, so the q.k scale matters
        elif ".mlp.0." in name:
            scale = 0.4  # large pre-activations, where erf and tanh GELU part
        elif name.startswith("heads.head."):
            scale = 2.0  # the GELU's difference carried to the logits well above the tests' 1e-4
        else:
            scale = 0.1
        value = perturbed(parameter.numpy().astype("float64"), rng, scale)
        if name.startswith(EMBEDDING_SIDE):
            value *= 1e-3
        parameter.copy_(torch.from_numpy(value.astype("float32")))


@torch.no_grad()
def effect_of(model, images, change, undo):
    """How far the logits move when `change(model)` is applied (then undone)."""
    reference = model(images)
    change(model)
    moved = model(images)
    undo(model)
    assert max_diff(model(images), reference) == 0.0
    return max_diff(moved, reference)


def set_epsilon(epsilon):
    def change(model):
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.eps = epsilon
    return change


def set_gelu(approximate):
    def change(model):
        for module in model.modules():
            if isinstance(module, torch.nn.GELU):
                module.approximate = approximate
    return change


def legacy_mlp_names(state_dict):
    """The state dict as torchvision < 0.14 named it (MLPBlock's linear_1 / linear_2), without
    the version metadata, so that torchvision's own loader has to rename them."""
    renamed = collections.OrderedDict()
    for name, tensor in state_dict.items():
        renamed[name.replace(".mlp.0.", ".mlp.linear_1.").replace(".mlp.3.", ".mlp.linear_2.")] = tensor
    return renamed


def save_safetensors(state_dict, path):
    safetensors.torch.save_file({name: tensor.contiguous() for name, tensor in state_dict.items()}, path,
                                metadata={"format": "pt"})
    os.chmod(path, 0o644)  # safetensors creates it owner-only


@torch.no_grad()
def make(args):
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    references, cases, models = {}, {}, {}

    for case, arguments in CASES.items():
        model = build(arguments)
        randomise(model, rng)
        models[case] = model
        images = torch.from_numpy(rng.standard_normal((BATCH, 3, TOY["image_size"], TOY["image_size"]))
                                  .astype("float32"))
        references[f"{case}/input"] = images.numpy()
        references[f"{case}/logits"] = model(images).numpy()
        state_dict = model.state_dict()
        save_safetensors(state_dict, os.path.join(args.out, f"{case}.safetensors"))
        effects = dict(
            epsilon_1e5_moves_logits_by=effect_of(model, images, set_epsilon(1e-5), set_epsilon(1e-6)),
            epsilon_1e12_moves_logits_by=effect_of(model, images, set_epsilon(1e-12), set_epsilon(1e-6)),
            tanh_gelu_moves_logits_by=effect_of(model, images, set_gelu("tanh"), set_gelu("none")))
        for what, moved in effects.items():
            assert moved > 1e-3, f"{case}: {what} only {moved}"
        cases[case] = dict(TOY, **arguments, weights=f"{case}.safetensors", **effects)
        print(f"{case}: max |logit| {float(model(images).abs().max()):.3f}; "
              + ", ".join(f"{what} {moved:.2e}" for what, moved in effects.items()))

    # the format people have: torch.save of the state dict
    source = "torchvision_vit"
    pth = os.path.join(args.out, f"{source}.pth")
    torch.save(models[source].state_dict(), pth)
    os.chmod(pth, 0o644)
    cases[source]["pth"] = f"{source}.pth"

    # torchvision < 0.14's MLP names load into torchvision to the same logits (its own renaming)
    legacy = build(CASES[source])
    legacy.load_state_dict(legacy_mlp_names(models[source].state_dict()), strict=True)
    images = torch.from_numpy(references[f"{source}/input"])
    legacy_diff = max_diff(legacy(images), references[f"{source}/logits"])
    assert legacy_diff == 0.0, legacy_diff
    cases[source]["legacy_mlp_names_reload_max_diff"] = legacy_diff

    # another resolution: torchvision's interpolate_embeddings (bicubic, align_corners=True)
    state = interpolate_embeddings(RESAMPLED_SIZE, TOY["patch_size"], models[source].state_dict())
    model = build(CASES[source], image_size=RESAMPLED_SIZE)
    model.load_state_dict(state, strict=True)
    images = torch.from_numpy(rng.standard_normal((1, 3, RESAMPLED_SIZE, RESAMPLED_SIZE)).astype("float32"))
    case = f"{source}_{RESAMPLED_SIZE}"
    references[f"{case}/input"] = images.numpy()
    references[f"{case}/logits"] = model(images).numpy()
    references[f"{case}/pos_embedding"] = model.encoder.pos_embedding.numpy().copy()  # the parameter is reused below
    # how far the other codes' resampling would be: the check can fail
    old_table = models[source].encoder.pos_embedding
    grid, new_grid = TOY["image_size"] // TOY["patch_size"], RESAMPLED_SIZE // TOY["patch_size"]
    image_part = old_table[:, 1:].reshape(1, grid, grid, -1).permute(0, 3, 1, 2)
    others = {}
    for method, settings in (("bicubic", dict(mode="bicubic", align_corners=False)),
                             ("bicubic_antialias", dict(mode="bicubic", align_corners=False, antialias=True))):
        other = torch.nn.functional.interpolate(image_part, size=new_grid, **settings)
        other = torch.cat([old_table[:, :1], other.permute(0, 2, 3, 1).reshape(1, new_grid * new_grid, -1)], dim=1)
        model.encoder.pos_embedding.copy_(other)
        others[f"{method}_moves_logits_by"] = max_diff(model(images), references[f"{case}/logits"])
    model.encoder.pos_embedding.copy_(torch.from_numpy(references[f"{case}/pos_embedding"]))
    for what, moved in others.items():
        assert moved > 1e-3, f"{case}: {what} only {moved}"
    cases[case] = dict(TOY, **CASES[source], image_size=RESAMPLED_SIZE, weights=f"{source}.safetensors",
                       resample="interpolate_embeddings (bicubic, align_corners=True)", **others)
    print(f"{case}: {source} at {RESAMPLED_SIZE}x{RESAMPLED_SIZE}, grid {grid}x{grid} -> {new_grid}x{new_grid}; "
          + ", ".join(f"{what} {moved:.2e}" for what, moved in others.items()))

    write_reference(args.out, "torchvision", references, cases,
                    dict(torch=torch.__version__, torchvision=torchvision.__version__,
                         safetensors=safetensors.__version__, seed=args.seed))
    written = [name for name in os.listdir(args.out) if name.startswith("torchvision_")]
    total = sum(os.path.getsize(os.path.join(args.out, name)) for name in written)
    print(f"wrote {', '.join(sorted(written))} ({total / 1e3:.0f} KB)")
    return 0

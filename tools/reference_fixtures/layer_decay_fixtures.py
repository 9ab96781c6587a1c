"""timm's layer-wise learning-rate decay scales for tests/test_optim.py (run with PyTorch + timm).

    /work/torchvenv/bin/python tools/make_reference_fixtures.py layer_decay [--out tests/fixtures]

Writes no weights: builds timm's own models (no pretrained weights, nothing downloaded) and
records, for every parameter name, the `lr_scale` of the parameter group timm's
`param_groups_layer_decay` puts it in (timm numbers the layers with the model's
`group_matcher`, BEiT's scheme), in ``layer_decay_reference.json``:
``{"models": {timm name: {"depth": d, "cases": {decay: {parameter: scale}}}}, "versions": ...}``.
The models: ViT-S/16 (depth 12), the paper's R26+ViT-S/32 hybrid (its ResNet-v2 under
`patch_embed.backbone`), ViT-S/16 with average pooling (`fc_norm` instead of the final norm), and
one of each of today's families (DINOv2 with registers, CLIP, SigLIP, distilled DeiT, DeiT III).
"""
import json
import os

import torch

from torch_reference import import_timm  # tools/ is on sys.path when run as a script

import_timm()

import timm  # noqa: E402
from timm.optim import param_groups_layer_decay  # noqa: E402

MODELS = {
    "vit_small_patch16_224": {},
    "vit_small_r26_s32_224": {},
    "vit_small_patch16_224_avg": {"global_pool": "avg"},
    # today's ViTs: register and distillation tokens, CLIP's norm_pre, SigLIP's attention pool
    "vit_small_patch14_reg4_dinov2": {},
    "vit_base_patch16_clip_224": {},
    "vit_base_patch16_siglip_224": {},
    "deit_small_distilled_patch16_224": {},
    "deit3_small_patch16_224": {},
}
DECAYS = (0.75, 0.65)


def scales_by_name(model, decay):
    """{parameter name: lr_scale} as timm's param_groups_layer_decay groups them."""
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    scales = {}
    for group in param_groups_layer_decay(model, weight_decay=0.05, layer_decay=decay):
        for parameter in group["params"]:
            scales[names[id(parameter)]] = group["lr_scale"]
    return scales


def make(args):
    models = {}
    for key, options in MODELS.items():
        name = key.removesuffix("_avg")
        model = timm.create_model(name, pretrained=False, **options)
        models[key] = {"timm_name": name, "options": options, "depth": len(model.blocks),
                       "cases": {str(decay): scales_by_name(model, decay) for decay in DECAYS}}
        assert len(models[key]["cases"][str(DECAYS[0])]) == len(list(model.parameters()))
    path = os.path.join(args.out, "layer_decay_reference.json")
    with open(path, "w") as handle:
        json.dump({"versions": {"timm": timm.__version__, "torch": torch.__version__}, "models": models},
                  handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(f"wrote {path}")
    return 0

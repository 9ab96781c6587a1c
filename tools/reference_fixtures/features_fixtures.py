"""timm reference outputs for tests/test_features.py: `forward_intermediates`,
`prune_intermediate_layers`, `dynamic_img_size` and `dynamic_img_pad` (run with PyTorch + timm).

    /work/torchvenv/bin/python tools/make_reference_fixtures.py features [--out tests/fixtures]

Writes no weights: it loads the timm files the timm family wrote (timm_vit_cls, timm_vit_avg,
timm_hybrid_stage .safetensors) into timm's own VisionTransformer built with the options under
test, and records what timm computes in ``features_reference.npz`` (inputs and outputs, keyed
``<case>/<name>``) with the cases in ``features_reference.json``:
- ``fi_*``: forward_intermediates with several index forms, norm on and off, NCHW and NLC, the
  class tokens split off, the final normed tokens;
- ``prune``: prune_intermediate_layers' return value, then forward_intermediates of the pruned model;
- ``dyn_*``: logits of a dynamic_img_size model at sizes other than the built one (up, down,
  non-square), intermediates at one of them; ``pad_*``: dynamic_img_pad at sizes the patch does
  not divide; the same for the one-stage hybrid.
"""
import json
import os
import sys
from functools import partial

import numpy as np
import torch

from torch_reference import import_timm  # tools/ is on sys.path when run as a script

import_timm()

import safetensors.torch  # noqa: E402
import timm  # noqa: E402
from timm.layers import HybridEmbed  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402
from timm.models.vision_transformer_hybrid import _resnetv2  # noqa: E402

PLAIN = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=10)  # timm_fixtures.CASES
HYBRID = dict(img_size=32, patch_size=2, embed_dim=32, depth=2, num_heads=4, num_classes=10, global_pool="token")

# case -> (weights, forward_intermediates arguments)
INTERMEDIATES = {
    "fi_all": ("timm_vit_cls", dict(indices=None)),
    "fi_last1_norm_nlc": ("timm_vit_cls", dict(indices=1, norm=True, output_fmt="NLC")),
    "fi_list_prefix": ("timm_vit_cls", dict(indices=[-1, 0], return_prefix_tokens=True)),
    "fi_avg_norm": ("timm_vit_avg", dict(indices=[1], norm=True)),
    "fi_hybrid": ("timm_hybrid_stage", dict(indices=2, norm=True, return_prefix_tokens=True)),
}
DYNAMIC_SIZES = [(48, 24), (16, 40), (24, 24)]  # up and non-square, down and non-square, down
PAD_SIZES = [(30, 21), (13, 35)]
HYBRID_DYNAMIC_SIZES = [(40, 24), (16, 48)]
HYBRID_PAD_SIZES = [(36, 20)]  # a 9x5 feature map, padded to 10x6 for the 2x2 patches


def build(weights, out, **options):
    if weights.startswith("timm_hybrid"):
        embed_layer = partial(HybridEmbed, backbone=_resnetv2(layers=(1,)))
        model = VisionTransformer(embed_layer=embed_layer, **HYBRID, **options)
    else:
        pool = "avg" if weights == "timm_vit_avg" else "token"
        model = VisionTransformer(global_pool=pool, **PLAIN, **options)
    state = safetensors.torch.load_file(os.path.join(out, f"{weights}.safetensors"))
    model.load_state_dict(state, strict=True)
    return model.eval()


def record_intermediates(references, case, result):
    """(final, list) or list; list entries a tensor or (spatial, prefix)."""
    if isinstance(result, tuple):
        references[f"{case}/final"] = result[0].numpy()
        result = result[1]
    for index, entry in enumerate(result):
        if isinstance(entry, tuple):
            references[f"{case}/intermediate_{index}"] = entry[0].numpy()
            references[f"{case}/prefix_{index}"] = entry[1].numpy()
        else:
            references[f"{case}/intermediate_{index}"] = entry.numpy()
    return len(result)


@torch.no_grad()
def make(args):
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    references, cases = {}, {}

    def images(height, width, batch=1):
        return torch.randn(batch, 3, height, width, generator=generator)

    for case, (weights, arguments) in INTERMEDIATES.items():
        model = build(weights, args.out)
        x = images(32, 32)
        references[f"{case}/input"] = x.numpy()
        count = record_intermediates(references, case, model.forward_intermediates(x, **arguments))
        cases[case] = dict(weights=weights, arguments=arguments, intermediates=count)
        print(f"{case}: {weights} {arguments} -> {count} intermediates")

    model = build("timm_vit_cls", args.out)
    kept = model.prune_intermediate_layers([0], prune_norm=True)
    x = images(32, 32)
    references["prune/input"] = x.numpy()
    record_intermediates(references, "prune", model.forward_intermediates(x, indices=[0]))
    cases["prune"] = dict(weights="timm_vit_cls", prune=dict(indices=[0], prune_norm=True, prune_head=True),
                          kept=kept, blocks_left=len(model.blocks), then=dict(indices=[0]))
    print(f"prune: kept {kept}, {len(model.blocks)} block(s) left")

    for weights, prefix, sizes, pad_sizes in (("timm_vit_cls", "", DYNAMIC_SIZES, PAD_SIZES),
                                              ("timm_hybrid_stage", "hybrid_", HYBRID_DYNAMIC_SIZES,
                                               HYBRID_PAD_SIZES)):
        dynamic = build(weights, args.out, dynamic_img_size=True)
        for height, width in sizes:
            case = f"{prefix}dyn_{height}x{width}"
            x = images(height, width)
            references[f"{case}/input"] = x.numpy()
            references[f"{case}/logits"] = dynamic(x).numpy()
            cases[case] = dict(weights=weights, dynamic_img_size=True, size=[height, width])
        case = f"{prefix}dyn_intermediates"
        height, width = sizes[0]
        x = images(height, width, batch=1)
        references[f"{case}/input"] = x.numpy()
        record_intermediates(references, case, dynamic.forward_intermediates(x, indices=[0, 1], norm=True))
        cases[case] = dict(weights=weights, dynamic_img_size=True, size=[height, width],
                           arguments=dict(indices=[0, 1], norm=True))
        padded = build(weights, args.out, dynamic_img_size=True, dynamic_img_pad=True)
        for height, width in pad_sizes:
            case = f"{prefix}pad_{height}x{width}"
            x = images(height, width)
            references[f"{case}/input"] = x.numpy()
            references[f"{case}/logits"] = padded(x).numpy()
            cases[case] = dict(weights=weights, dynamic_img_size=True, dynamic_img_pad=True, size=[height, width])
        print(f"{weights}: dynamic at {sizes}, padded at {pad_sizes}")

    path = os.path.join(args.out, "features_reference.npz")
    np.savez_compressed(path, **references)
    versions = dict(torch=torch.__version__, timm=timm.__version__, numpy=np.__version__,
                    safetensors=safetensors.__version__, python=sys.version.split()[0], seed=args.seed)
    with open(os.path.join(args.out, "features_reference.json"), "w") as handle:
        json.dump(dict(versions=versions, cases=cases), handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(f"wrote {path} ({os.path.getsize(path) / 1e3:.0f} kB)")
    return 0

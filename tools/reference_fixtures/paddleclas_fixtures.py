"""PaddleClas and PLSC reference outputs (run with paddlepaddle + paddleclas + plsc installed in
an environment of their own: paddleclas pins numpy 1.24, plsc is installed with --no-deps).

    /work/refvenv-paddleclas/bin/python tools/make_reference_fixtures.py paddleclas

Small models of each code base's own ``VisionTransformer`` class, every parameter perturbed, saved
as those code bases save them (``paddle.save(model.state_dict())``, a ``.pdparams``):

- ``paddleclas_vit_base``: PaddleClas, built as its ``ViT_base_patch16_224`` is (q/k/v bias,
  epsilon 1e-6), at toy size;
- ``paddleclas_vit_small``: PaddleClas, built as its non-standard ``ViT_small_patch16_224`` is
  (no q/k/v bias, MLP ratio 3, q.k scaled by embed_dim^-0.5, the class's epsilon 1e-5), at toy
  size; the embedding side is scaled down so that the first LayerNorms see small variances and
  the epsilon shows in the logits (checked below), as does the scale;
- ``plsc_vit_in21k``: PLSC, built as its ``ViT_base_patch16_224`` is (a pre-logits layer
  ``head0`` of the hidden size, q/k/v bias, epsilon 1e-6), 5 classes;
- ``plsc_vit_48``: ``paddleclas_vit_base`` loaded by PLSC's ``load_pretrained(finetune=True)``
  into its model at 48x48, which resizes the position embedding bicubic (Paddle's interpolate,
  no antialias) and drops the head; the head is then set back to the checkpoint's, so that the
  logits are comparable with a loader that keeps it.

PLSC's package __init__ imports modules written for Paddle 2 (paddle.fluid); its ViT file and the
three small modules it imports are loaded by path instead.
"""
import importlib.util
import os
from importlib import metadata
import sys
import types

import numpy as np

from common import max_diff, perturbed, write_reference

TOY = dict(img_size=32, patch_size=8, depth=2, num_heads=4)
BATCH = 2


def import_paddleclas_vit():
    import paddleclas
    sys.path.insert(0, os.path.dirname(paddleclas.__file__))  # the wheel ships ppcls inside paddleclas/
    from ppcls.arch.backbone.model_zoo import vision_transformer
    return vision_transformer


def import_plsc_vit():
    spec = importlib.util.find_spec("plsc")
    root = os.path.dirname(spec.origin)
    for package in ("plsc", "plsc.utils", "plsc.models", "plsc.nn"):
        module = types.ModuleType(package)
        module.__path__ = [os.path.join(root, *package.split(".")[1:])]
        sys.modules[package] = module
    for name in ("plsc.utils.misc", "plsc.utils.logger", "plsc.models.base_model", "plsc.nn.init",
                 "plsc.models.vision_transformer"):
        path = os.path.join(root, *name.split(".")[1:]) + ".py"
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, module)
    sys.modules["plsc.utils.logger"].init_logger()  # as PLSC's engine does before loading weights
    return sys.modules["plsc.models.vision_transformer"]


def randomise(model, rng, shrink_embeddings=False):
    import paddle
    with paddle.no_grad():
        for name, parameter in model.named_parameters():
            scale = 0.25 if "attn.qkv" in name else (1.0 if name.startswith("head.") else 0.1)
            value = perturbed(parameter.numpy().astype("float64"), rng, scale)
            if shrink_embeddings and name.startswith(("cls_token", "pos_embed", "patch_embed.")):
                value *= 1e-3
            parameter.set_value(value.astype("float32"))
    model.eval()


def logits(model, images):
    import paddle
    with paddle.no_grad():
        return model(paddle.to_tensor(images)).numpy()


def with_attribute(model, layers, attribute, value, images):
    """The logits with `attribute` of every one of `layers` set to `value` for the call."""
    saved = [getattr(layer, attribute) for layer in layers]
    for layer in layers:
        setattr(layer, attribute, value)
    try:
        return logits(model, images)
    finally:
        for layer, old in zip(layers, saved):
            setattr(layer, attribute, old)


def save(model, out, name):
    import paddle
    path = os.path.join(out, f"{name}.pdparams")
    paddle.save(model.state_dict(), path)
    os.chmod(path, 0o644)
    return path


def make(args):
    import paddle
    paddle.set_device("cpu")
    paddle.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    ppcls_vit, plsc_vit = import_paddleclas_vit(), import_plsc_vit()
    references, cases = {}, {}

    base_arguments = dict(TOY, class_num=10, embed_dim=32, mlp_ratio=2, qkv_bias=True, epsilon=1e-6)
    base = ppcls_vit.VisionTransformer(**base_arguments)
    randomise(base, rng)
    base_path = save(base, args.out, "paddleclas_vit_base")
    images = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    references["paddleclas_vit_base/input"] = images
    references["paddleclas_vit_base/logits"] = logits(base, images)
    cases["paddleclas_vit_base"] = dict(code="ppcls VisionTransformer", **base_arguments)

    width = 48
    small_arguments = dict(TOY, class_num=10, embed_dim=width, mlp_ratio=3, qk_scale=width ** -0.5)
    small = ppcls_vit.VisionTransformer(**small_arguments)  # qkv_bias and epsilon: the class's defaults
    randomise(small, rng, shrink_embeddings=True)
    save(small, args.out, "paddleclas_vit_small")
    images = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    reference = logits(small, images)
    norms = [layer for layer in small.sublayers() if isinstance(layer, paddle.nn.LayerNorm)]
    epsilon_effect = max_diff(with_attribute(small, norms, "_epsilon", 1e-6, images), reference)
    attentions = [block.attn for block in small.blocks]
    scale_effect = max_diff(with_attribute(small, attentions, "scale", (width // TOY["num_heads"]) ** -0.5, images),
                            reference)
    assert epsilon_effect > 1e-3 and scale_effect > 1e-3, (epsilon_effect, scale_effect)
    references["paddleclas_vit_small/input"] = images
    references["paddleclas_vit_small/logits"] = reference
    cases["paddleclas_vit_small"] = dict(code="ppcls VisionTransformer", qkv_bias=False, epsilon=1e-5,
                                         epsilon_1e6_moves_logits_by=epsilon_effect,
                                         head_dim_scale_moves_logits_by=scale_effect, **small_arguments)
    print(f"paddleclas_vit_small: epsilon 1e-6 moves the logits by {epsilon_effect:.2e}, "
          f"head_dim^-0.5 by {scale_effect:.2e}")

    in21k_arguments = dict(TOY, class_num=5, embed_dim=32, mlp_ratio=2, qkv_bias=True, epsilon=1e-6,
                           representation_size=32)
    in21k = plsc_vit.VisionTransformer(**in21k_arguments)
    randomise(in21k, rng)
    save(in21k, args.out, "plsc_vit_in21k")
    images = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    references["plsc_vit_in21k/input"] = images
    references["plsc_vit_in21k/logits"] = logits(in21k, images)
    cases["plsc_vit_in21k"] = dict(code="plsc VisionTransformer", **in21k_arguments)

    finetuned = plsc_vit.VisionTransformer(**dict(base_arguments, img_size=48))
    finetuned.load_pretrained(base_path[:-len(".pdparams")], finetune=True)
    with paddle.no_grad():
        finetuned.head.weight.set_value(base.head.weight)
        finetuned.head.bias.set_value(base.head.bias)
    finetuned.eval()
    images = rng.standard_normal((BATCH, 3, 48, 48)).astype("float32")
    references["plsc_vit_48/input"] = images
    references["plsc_vit_48/logits"] = logits(finetuned, images)
    references["plsc_vit_48/pos_embed"] = finetuned.pos_embed.numpy()
    cases["plsc_vit_48"] = dict(code="plsc VisionTransformer.load_pretrained(finetune=True)",
                                weights="paddleclas_vit_base.pdparams", **dict(base_arguments, img_size=48))
    print("plsc_vit_48: grid 4x4 -> 6x6 by PLSC's load_pretrained")

    write_reference(args.out, "paddleclas", references, cases,
                    dict(paddle=paddle.__version__, paddleclas=metadata.version("paddleclas"),
                         plsc=metadata.version("plsc"), seed=args.seed))
    return 0

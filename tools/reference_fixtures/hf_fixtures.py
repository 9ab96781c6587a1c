"""Hugging Face transformers reference outputs (run with torch + transformers, not Paddle).

    /work/refvenv/bin/python tools/make_reference_fixtures.py huggingface

Writes ``save_pretrained`` folders of small models built with transformers' own classes, random
weights perturbed so that every tensor matters, and the token-embedding side scaled down so that
the residual stream starts small: the first LayerNorms then see variances of ~1e-6, where
transformers' epsilon 1e-12 and ViT's 1e-6 give different logits (checked below):

- ``hf_vit_classifier/``: ``ViTForImageClassification`` (``vit.`` prefix + ``classifier``), 10
  named classes, transformers' defaults (layer_norm_eps 1e-12, hidden_act "gelu", q/k/v bias);
  its logits at 32x32, and at 48x48 with ``interpolate_pos_encoding=True`` (bicubic);
- ``hf_vit_model/``: a bare ``ViTModel`` with its pooler (the pre-logits layer), hidden_act
  "gelu_new" (the tanh approximation), no q/k/v bias, layer_norm_eps 1e-5: its pooler output.
"""
import json
import os

import numpy as np
import torch

from common import folder_size, max_diff, perturbed, write_reference
from torch_reference import import_timm

import_timm()  # transformers imports torchvision, which needs the same op declarations as timm

import transformers  # noqa: E402
from transformers import ViTConfig, ViTForImageClassification, ViTModel  # noqa: E402

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
             patch_size=8, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
LABELS = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
BATCH = 2
EMBEDDING_SIDE = ("embeddings.cls_token", "embeddings.position_embeddings", "embeddings.patch_embeddings.")


@torch.no_grad()
def randomise(model, rng):
    """Perturb every tensor, then scale the embedding side down by 1e-3 (see the docstring)."""
    for name, parameter in model.named_parameters():
        scale = 0.25 if ".attention.attention." in name else 0.1
        value = perturbed(parameter.numpy().astype("float64"), rng, scale)
        if any(part in name for part in EMBEDDING_SIDE):
            value *= 1e-3
        parameter.copy_(torch.from_numpy(value.astype("float32")))


def save(model, folder):
    model.save_pretrained(folder)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)  # safetensors writes owner-only files


@torch.no_grad()
def epsilon_effect(model, images, epsilon, output):
    """How far the output moves when every LayerNorm computes with `epsilon` instead."""
    norms = [module for module in model.modules() if isinstance(module, torch.nn.LayerNorm)]
    saved = [norm.eps for norm in norms]
    reference = output(model(images))
    for norm in norms:
        norm.eps = epsilon
    moved = output(model(images))
    for norm, eps in zip(norms, saved):
        norm.eps = eps
    return max_diff(moved, reference)


@torch.no_grad()
def make(args):
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    references, cases = {}, {}

    # a classifier with transformers' defaults and named classes
    config = ViTConfig(**SIZES, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
                       label2id={label: index for index, label in enumerate(LABELS)})
    model = ViTForImageClassification(config).eval()
    randomise(model, rng)
    save(model, os.path.join(args.out, "hf_vit_classifier"))
    images = torch.from_numpy(rng.standard_normal((BATCH, 3, 32, 32)).astype("float32"))
    references["hf_vit_classifier/input"] = images.numpy()
    references["hf_vit_classifier/logits"] = model(pixel_values=images).logits.numpy()
    effect = epsilon_effect(model, images, 1e-6, lambda out: out.logits.numpy())
    assert effect > 1e-3, f"epsilon 1e-6 instead of 1e-12 moves the logits by only {effect}"
    large = torch.from_numpy(rng.standard_normal((BATCH, 3, 48, 48)).astype("float32"))
    references["hf_vit_classifier_48/input"] = large.numpy()
    references["hf_vit_classifier_48/logits"] = model(pixel_values=large, interpolate_pos_encoding=True).logits.numpy()
    cases["hf_vit_classifier"] = dict(folder="hf_vit_classifier", model_class="ViTForImageClassification",
                                      epsilon_1e6_moves_logits_by=effect, **SIZES)
    print(f"hf_vit_classifier: eps 1e-6 instead of 1e-12 moves the logits by {effect:.2e}")

    # a bare ViTModel with its pooler, tanh GELU, no q/k/v bias, epsilon 1e-5
    config = ViTConfig(**SIZES, hidden_act="gelu_new", qkv_bias=False, layer_norm_eps=1e-5)
    model = ViTModel(config, add_pooling_layer=True).eval()
    randomise(model, rng)
    save(model, os.path.join(args.out, "hf_vit_model"))
    images = torch.from_numpy(rng.standard_normal((BATCH, 3, 32, 32)).astype("float32"))
    references["hf_vit_model/input"] = images.numpy()
    references["hf_vit_model/pooler_output"] = model(pixel_values=images).pooler_output.numpy()
    effect = epsilon_effect(model, images, 1e-6, lambda out: out.pooler_output.numpy())
    assert effect > 1e-3, f"epsilon 1e-6 instead of 1e-5 moves the pooler output by only {effect}"
    cases["hf_vit_model"] = dict(folder="hf_vit_model", model_class="ViTModel", hidden_act="gelu_new",
                                 qkv_bias=False, layer_norm_eps=1e-5, epsilon_1e6_moves_output_by=effect, **SIZES)
    print(f"hf_vit_model: eps 1e-6 instead of 1e-5 moves the pooler output by {effect:.2e}")

    write_reference(args.out, "hf", references, cases,
                    dict(torch=torch.__version__, transformers=transformers.__version__, seed=args.seed))
    with open(os.path.join(args.out, "hf_vit_classifier", "config.json")) as stream:
        assert json.load(stream)["layer_norm_eps"] == 1e-12
    size = sum(folder_size(os.path.join(args.out, case)) for case in cases)
    print(f"wrote {args.out}: hf_reference.npz/.json and {len(cases)} folders ({size / 1e6:.2f} MB)")
    return 0

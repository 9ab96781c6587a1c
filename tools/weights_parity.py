"""How closely each checkpoint family is computed as its own code computes it.

    python tools/weights_parity.py [--fixtures tests/fixtures]

Loads every reference fixture (tests/fixtures/README.md: small models saved by timm,
transformers, vit_jax, PaddleClas, PLSC, torchvision and OpenCLIP with those codes' own outputs,
timm Hub folders of today's ViTs) through
``paddle_vit.create_model(name, pretrained=...)`` and prints, per case, the largest absolute
difference from that code's output, and the difference when one option is computed the other
codes' way instead (ViT's epsilon, exact GELU, timm's resampling, ...). The table of sources in
docs/pretrained.md is this output.
"""
import argparse
import json
import os
import sys

import numpy as np

TOY = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2)

# (case, references, key, fixture, overrides, (the other way: overrides) or None)
CASES = [
    ("timm: token pooling", "timm", "timm_vit_cls/logits", "timm_vit_cls.safetensors", dict(mlp_ratio=4), None),
    ("timm: avg pooling + fc_norm", "timm", "timm_vit_avg/logits", "timm_vit_avg.safetensors", dict(mlp_ratio=4),
     None),
    ("timm: resampled 4x4 -> 6x6 (bicubic, antialias)", "timm", "resample_up/logits", "timm_vit_cls.safetensors",
     dict(mlp_ratio=4, image_size=48), ("resample=bicubic", dict(resample="bicubic"))),
    ("timm reading a JAX npz at 48 (exact GELU, bilinear)", "timm", "resample_up_npz/logits", "timm_vit_cls.npz",
     dict(mlp_ratio=4, image_size=48, gelu="exact", resample="bilinear"),
     ("resample=bilinear_align_corners", dict(resample="bilinear_align_corners"))),
    ("Hugging Face ViTForImageClassification", "hf", "hf_vit_classifier/logits", "hf_vit_classifier", {},
     ("layer_norm_epsilon=1e-6", dict(layer_norm_epsilon=1e-6))),
    ("Hugging Face, 48 with interpolate_pos_encoding", "hf", "hf_vit_classifier_48/logits", "hf_vit_classifier",
     dict(image_size=48), ("resample=bicubic_antialias", dict(resample="bicubic_antialias"))),
    ("Hugging Face ViTModel pooler (gelu_new, eps 1e-5)", "hf", "hf_vit_model/pooler_output", "hf_vit_model", {},
     ("gelu=exact", dict(gelu="exact"))),
    ("vit_jax, released numbering", "jax", "jax_vit/logits", "jax_vit_released.npz", {},
     ("gelu=exact", dict(gelu="exact"))),
    ("vit_jax, Linen numbering", "jax", "jax_vit/logits", "jax_vit_linen.npz", {}, ("gelu=exact", dict(gelu="exact"))),
    ("vit_jax load_pretrained at 48 (zoom order 1)", "jax", "jax_vit_48/logits", "jax_vit_released.npz",
     dict(image_size=48), ("resample=bicubic_antialias", dict(resample="bicubic_antialias"))),
    ("vit_jax in21k (pre_logits)", "jax", "jax_vit_in21k/logits", "jax_vit_in21k.npz", {},
     ("gelu=exact", dict(gelu="exact"))),
    ("PaddleClas ViT_base-style", "paddleclas", "paddleclas_vit_base/logits", "paddleclas_vit_base.pdparams", {},
     None),
    ("PaddleClas ViT_small-style (eps 1e-5, scale D^-0.5)", "paddleclas", "paddleclas_vit_small/logits",
     "paddleclas_vit_small.pdparams", dict(embed_dim=48, mlp_ratio=3, qk_scale=48 ** -0.5),
     ("layer_norm_epsilon=1e-6", dict(layer_norm_epsilon=1e-6))),
    ("PLSC in21k (head0)", "paddleclas", "plsc_vit_in21k/logits", "plsc_vit_in21k.pdparams", {}, None),
    ("PLSC finetune at 48 (bicubic)", "paddleclas", "plsc_vit_48/logits", "paddleclas_vit_base.pdparams",
     dict(image_size=48), ("resample=bicubic_antialias", dict(resample="bicubic_antialias"))),
    ("timm hybrid (ResNet stage + ViT)", "timm", "timm_hybrid_stage/logits", "timm_hybrid_stage.safetensors",
     dict(mlp_ratio=4, patch_size=2, backbone_layers=[1]), ("backbone_style=jax", dict(backbone_style="jax"))),
    ("vit_jax hybrid, released layout", "jax", "jax_hybrid/logits", "jax_hybrid_released.npz",
     dict(patch_size=2, backbone_layers=[1]), ("backbone_style=timm", dict(backbone_style="timm"))),
    ("torchvision VisionTransformer", "torchvision", "torchvision_vit/logits", "torchvision_vit.safetensors", {},
     ("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5))),
    ("torchvision with heads.pre_logits", "torchvision", "torchvision_vit_prelogits/logits",
     "torchvision_vit_prelogits.safetensors", {}, ("gelu=tanh", dict(gelu="tanh"))),
    ("torchvision interpolate_embeddings at 48", "torchvision", "torchvision_vit_48/logits",
     "torchvision_vit.safetensors", dict(image_size=48), ("resample=bicubic", dict(resample="bicubic"))),
    # today's ViTs: timm Hub folders (the folder names its model: name None) and OpenCLIP towers
    ("timm folder: DeiT III (layer scale, no_embed_class)", "timm_modern", "deit3_small_patch16_224/logits",
     "timm_modern/deit3_small_patch16_224", dict(name=None), ("gelu=tanh", dict(gelu="tanh"))),
    ("timm folder: distilled DeiT (two heads' mean)", "timm_modern", "deit_small_distilled_patch16_224/logits",
     "timm_modern/deit_small_distilled_patch16_224", dict(name=None),
     ("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5))),
    ("timm folder: DINOv2 (no head: the normed class token)", "timm_modern", "vit_small_patch14_dinov2/logits",
     "timm_modern/vit_small_patch14_dinov2", dict(name=None), ("gelu=tanh", dict(gelu="tanh"))),
    ("timm folder: DINOv2 with 4 registers", "timm_modern", "vit_small_patch14_reg4_dinov2/logits",
     "timm_modern/vit_small_patch14_reg4_dinov2", dict(name=None),
     ("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5))),
    ("timm folder: DINOv2 giant's SwiGLU", "timm_modern", "vit_giant_patch14_dinov2/logits",
     "timm_modern/vit_giant_patch14_dinov2", dict(name=None),
     ("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5))),
    ("timm folder: CLIP (pre-norm, eps 1e-5)", "timm_modern", "vit_base_patch16_clip_224/logits",
     "timm_modern/vit_base_patch16_clip_224", dict(name=None),
     ("layer_norm_epsilon=1e-6", dict(layer_norm_epsilon=1e-6))),
    ("timm folder: CLIP with QuickGELU", "timm_modern", "vit_base_patch16_clip_quickgelu_224/logits",
     "timm_modern/vit_base_patch16_clip_quickgelu_224", dict(name=None), ("gelu=exact", dict(gelu="exact"))),
    ("timm folder: SigLIP (no class token, attention pool)", "timm_modern", "vit_base_patch16_siglip_224/logits",
     "timm_modern/vit_base_patch16_siglip_224", dict(name=None), ("gelu=tanh", dict(gelu="tanh"))),
    ("timm folder: SigLIP, mean after the final norm", "timm_modern", "vit_base_patch16_siglip_gap_224/logits",
     "timm_modern/vit_base_patch16_siglip_gap_224", dict(name=None), ("gelu=tanh", dict(gelu="tanh"))),
    ("timm folder: ViT-M gap (no class token, no q/k/v bias)", "timm_modern", "vit_medium_patch16_gap_256/logits",
     "timm_modern/vit_medium_patch16_gap_256", dict(name=None),
     ("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5))),
    ("HF Dinov2Model (pooler: the normed class token)", "hf_modern", "dinov2/pooler_output", "hf_modern/dinov2",
     dict(name=None), ("gelu=tanh", dict(gelu="tanh"))),
    ("HF Dinov2Model with the SwiGLU MLP", "hf_modern", "dinov2_swiglu/pooler_output", "hf_modern/dinov2_swiglu",
     dict(name=None), ("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5))),
    ("HF Dinov2WithRegistersModel", "hf_modern", "dinov2_registers/pooler_output", "hf_modern/dinov2_registers",
     dict(name=None), ("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5))),
    ("HF CLIPVisionModel (QuickGELU, pooler)", "hf_modern", "clip_vision/pooler_output", "hf_modern/clip_vision",
     dict(name=None), ("gelu=exact", dict(gelu="exact"))),
    ("HF CLIPVisionModelWithProjection (image_embeds)", "hf_modern", "clip_vision_projection/image_embeds",
     "hf_modern/clip_vision_projection", dict(name=None), ("layer_norm_epsilon=1e-6", dict(layer_norm_epsilon=1e-6))),
    ("HF SiglipVisionModel (MAP head, tanh GELU)", "hf_modern", "siglip_vision/pooler_output",
     "hf_modern/siglip_vision", dict(name=None), ("gelu=exact", dict(gelu="exact"))),
    ("HF DeiTForImageClassificationWithTeacher", "hf_modern", "deit_distilled/logits", "hf_modern/deit_distilled",
     dict(name=None), ("layer_norm_epsilon=1e-6", dict(layer_norm_epsilon=1e-6))),
    ("OpenAI CLIP tower (QuickGELU; proj as head)", "hf_modern", "openclip_quickgelu/image_embeds",
     "hf_modern/openclip_quickgelu.safetensors", dict(name="vit_base_patch16_clip_quickgelu_224", mlp_ratio=4),
     ("gelu=exact", dict(gelu="exact"))),
    ("OpenCLIP tower (GELU)", "hf_modern", "openclip_gelu/image_embeds", "hf_modern/openclip_gelu.safetensors",
     dict(name="vit_base_patch16_clip_224", mlp_ratio=4), ("layer_norm_epsilon=1e-6", dict(layer_norm_epsilon=1e-6))),
]


def difference(fixtures, references, key, source, overrides):
    import paddle

    from paddle_vit import create_model

    if overrides.get("name", "") is None:  # a folder that names its model, at its own sizes
        options = dict(overrides)
    else:
        options = dict(TOY, **overrides)
    resample = options.pop("resample", None)
    name = options.pop("name", "vit_base_r50_s16_224" if "backbone_layers" in options else "vit_tiny_patch16_224")
    model = create_model(name, pretrained=os.path.join(fixtures, source), resample=resample, **options).eval()
    case = key.rsplit("/", 1)[0]
    with paddle.no_grad():
        ours = model(paddle.to_tensor(references[f"{case}/input"])).numpy()
    return float(np.abs(ours - references[key]).max())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tests", "fixtures"))
    parser.add_argument("--json", action="store_true", help="one JSON object per case instead of a table")
    args = parser.parse_args(argv)
    references = {family: dict(np.load(os.path.join(args.fixtures, f"{family}_reference.npz")))
                  for family in ("timm", "hf", "jax", "paddleclas", "torchvision", "timm_modern", "hf_modern")}
    if not args.json:
        print("| checkpoint (reference fixture) | max abs difference | computed another way instead |")
        print("|---|---|---|")
    for title, family, key, source, overrides, other in CASES:
        ours = difference(args.fixtures, references[family], key, source, overrides)
        other_text, other_value = "", None
        if other:
            other_value = difference(args.fixtures, references[family], key, source, dict(overrides, **other[1]))
            other_text = f"{other[0]}: {other_value:.1e}"
        if args.json:
            print(json.dumps(dict(case=title, difference=ours, other=other and other[0], other_difference=other_value)))
        else:
            print(f"| {title} | {ours:.1e} | {other_text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

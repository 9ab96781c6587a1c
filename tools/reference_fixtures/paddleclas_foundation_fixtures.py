"""PaddleClas's foundation ViTs (ppcls/arch/backbone/model_zoo/foundation_vit.py) and the outputs
PaddleClas computes for them, for tests/test_paddleclas_foundation.py (run with paddlepaddle +
paddleclas, the environment of paddleclas_fixtures.py; scikit-learn for the photos).

    /work/refvenv-paddleclas/bin/python tools/make_reference_fixtures.py paddleclas_foundation

foundation_vit.py builds every model with one ``VisionTransformer(model_name, ...)`` whose
behaviour is chosen by the name: ``CLIP_vit_base_patch16_224`` is looked up as
``_CLIP_diff`` / ``"vit_base_patch16_224"`` in per-family option lists. The small models here are
that class built under the real names with toy sizes (dim 32, depth 2, 4 heads, MLP ratio 2),
every parameter perturbed (noise 0.1, q/k/v 0.25, the classifier 1.0) and the embedding side
(patch conv, ``pos_embed``, ``cls_token``) scaled by 1e-3 so that the first LayerNorm sees
variances near its epsilon; each case checks that epsilon 1e-6 instead of 1e-5 and QuickGELU
instead of ``nn.GELU`` move the outputs by more than 1e-3. Saved as PaddleClas's released files
are, ``paddle.save(model.state_dict())``:

- ``paddleclas_foundation_clip``: ``CLIP_vit_base_patch16_224`` (patch 16, image 32), built as
  PP-ShiTuV2's recognition configs build it (``return_embed=True, return_mean_embed=True``): no
  classifier; the output is the mean over the patch tokens of ``norm(x) @ proj`` (``proj`` 32 x 8).
  Also recorded: the same weights in PaddleClas's classifier (``return_embed=False``, 5 classes,
  its head in the npz), which reads the first *patch* token (``remove_cls_token_in_forward``);
- ``paddleclas_foundation_clip_large``: ``CLIP_vit_large_patch14_224`` (patch 14, image 28) as a
  5-class classifier (the fine-tuning configs' ``return_embed: False``): the class token;
  and the same weights without the head in the embedding model (mean over every token);
- ``paddleclas_foundation_mae``: ``MAE_vit_base_patch16`` (patch 8, image 32) as a 5-class
  classifier, and at 48x48 (PaddleClas resizes ``pos_embed`` in its forward pass: bicubic,
  align_corners=False), and without the head in the embedding model;
- ``paddleclas_foundation_beitv2``, ``paddleclas_foundation_cae``, ``paddleclas_foundation_unicom``:
  ``BEiTv2_vit_base_patch16_224``, ``CAE_vit_base_patch16_224`` (relative position bias and
  ``gamma_1``/``gamma_2`` in every block) and ``Unicom_vit_base_patch32_224`` (no class token,
  ``feature`` = Linear over all patch tokens + BatchNorm1D ...), which paddle-vit refuses; their
  outputs are recorded all the same.

foundation_vit.py keeps the model's options in two module globals set by the *last* model
built (``_model_size``, ``_model_diff``), and its forward pass reads them: each model is run with
the globals set back to its own, as if it were the last one built (`run`).

Photos: ``photos()`` of timm_hub_fixtures (tests/photos.py, the same code) read as PaddleClas
reads them (bytes, ``cv2.imdecode``, BGR -> RGB: ``DecodeImage(to_rgb=True)``) and fed through
PaddleClas's own operators (deploy/python/preprocess.py; the wheel ships no ppcls/data) in the
order of PaddleX's CLIP_vit_base_patch16_224.yaml and PaddleClas's
CLIP_vit_large_patch14_224_finetune.yaml eval transform: ResizeImage(resize_short, bicubic, pil),
CropImage, NormalizeImage(1/255, ImageNet mean/std), ToCHWImage; 224 there, the model's size here.
"""
import hashlib
import os
import sys
import tempfile
from importlib import metadata

import numpy as np

from common import max_diff, perturbed, write_reference  # tools/reference_fixtures is on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOY = dict(embed_dim=32, depth=2, num_heads=4, mlp_ratio=2, qkv_bias=True)
EMBEDDING = 8  # output_dim: proj is [D, 8]
CLASSES = 5
BATCH = 2
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def eval_ops(size):
    """The eval transform_ops of PaddleX's CLIP_vit_base_patch16_224.yaml (and PaddleClas's
    CLIP_vit_large_patch14_224_finetune.yaml), 224 replaced by the model's `size`."""
    return [{"DecodeImage": {"to_rgb": True, "channel_first": False}},
            {"ResizeImage": {"resize_short": size, "interpolation": "bicubic", "backend": "pil"}},
            {"CropImage": {"size": size}},
            {"NormalizeImage": {"scale": "1.0/255.0", "mean": IMAGENET_MEAN, "std": IMAGENET_STD, "order": ""}},
            {"ToCHWImage": None}]


def import_foundation_vit():
    import paddleclas
    sys.path.insert(0, os.path.dirname(paddleclas.__file__))  # the wheel ships ppcls inside paddleclas/
    from ppcls.arch.backbone.model_zoo import foundation_vit
    from ppcls.utils import logger
    logger.init_logger()  # as PaddleClas's engine does; models without a head log a warning through it
    return foundation_vit


def build(fv, name, **arguments):
    model = fv.VisionTransformer(model_name=name, **arguments)
    model.eval()
    model._options = (fv._model_size, fv._model_diff)  # what the globals held when it was built
    return model


def run(fv, model, images):
    """PaddleClas's output for `images`, the module globals set back to `model`'s own."""
    import paddle
    fv._model_size, fv._model_diff = model._options
    with paddle.no_grad():
        return model(paddle.to_tensor(images)).numpy()


def randomise(model, rng):
    import paddle
    with paddle.no_grad():
        for name, parameter in model.named_parameters():
            scale = 0.25 if "attn.qkv" in name else (1.0 if name.startswith("head.") else 0.1)
            value = perturbed(parameter.numpy().astype("float64"), rng, scale)
            if name.startswith(("cls_token", "pos_embed", "patch_embed.")):
                value *= 1e-3  # the first LayerNorm then sees variances near its epsilon
            parameter.set_value(value.astype("float32"))


def sensitivities(fv, model, images, reference):
    """How far LayerNorm epsilon 1e-6 (PaddleClas: 1e-5) and QuickGELU (PaddleClas: nn.GELU in
    every foundation model) move the output; both must exceed 1e-3."""
    import paddle
    norms = [layer for layer in model.sublayers() if isinstance(layer, paddle.nn.LayerNorm)]
    saved = [norm._epsilon for norm in norms]
    for norm in norms:
        norm._epsilon = 1e-6
    epsilon = max_diff(run(fv, model, images), reference)
    for norm, value in zip(norms, saved):
        norm._epsilon = value
    mlps = [block.mlp for block in model.blocks]
    acts = [mlp.act for mlp in mlps]
    for mlp in mlps:
        mlp.act = fv.QuickGELU()
    quick = max_diff(run(fv, model, images), reference)
    for mlp, act in zip(mlps, acts):
        mlp.act = act
    assert epsilon > 1e-3 and quick > 1e-3, (epsilon, quick)
    assert isinstance(acts[0], paddle.nn.GELU) and not acts[0]._approximate  # exact GELU, not QuickGELU
    return {"epsilon_1e-6_moves_output_by": epsilon, "quick_gelu_moves_output_by": quick}


def save(model, out, name):
    import paddle
    path = os.path.join(out, f"{name}.pdparams")
    paddle.save(model.state_dict(), path)
    os.chmod(path, 0o644)
    size = os.path.getsize(path)
    assert size < 300_000, (name, size)
    return path, size


def state_without_head(model):
    return {name: value for name, value in model.state_dict().items() if not name.startswith("head.")}


def shapes(model):
    return {name: list(value.shape) for name, value in model.state_dict().items()}


def photo_inputs(size):
    """{photo: float32 [3, size, size]}: PaddleClas's operators on the file's bytes."""
    from paddleclas.deploy.python import preprocess
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from photos import make_photos  # tests/photos.py: timm_hub_fixtures.photos, without torch
    ops = preprocess.create_operators(eval_ops(size))
    inputs, digests = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        for name, path in make_photos(folder).items():
            with open(path, "rb") as handle:
                image = handle.read()
            digests[name] = hashlib.sha256(image).hexdigest()
            for op in ops:
                image = op(image)
            inputs[name] = np.ascontiguousarray(image, dtype=np.float32)
    return inputs, digests


def record_photos(fv, model, case, size, output, references, cases):
    inputs, digests = photo_inputs(size)
    for name, pixels in inputs.items():
        if size == 32:  # the same for every model of this size
            references[f"photo_{size}/{name}/input"] = pixels
        references[f"{case}/photo/{name}/{output}"] = run(fv, model, pixels[None])[0]
    cases[case]["photos"] = {"transform_ops": eval_ops(size), "sha256": digests, "output": output}


def make(args):
    import paddle
    paddle.set_device("cpu")
    paddle.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    fv = import_foundation_vit()
    references, cases, sizes = {}, {}, {}

    # CLIP_vit_base_patch16_224 as PP-ShiTuV2 builds it: return_embed, return_mean_embed
    clip_arguments = dict(TOY, img_size=32, patch_size=16, output_dim=EMBEDDING, epsilon=1e-5)
    classifier = build(fv, "CLIP_vit_base_patch16_224", class_num=CLASSES, **clip_arguments)
    randomise(classifier, rng)
    clip = build(fv, "CLIP_vit_base_patch16_224", return_embed=True, return_mean_embed=True, **clip_arguments)
    clip.set_state_dict(state_without_head(classifier))
    _, sizes["clip"] = save(clip, args.out, "paddleclas_foundation_clip")
    images = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    references["clip/input"] = images
    references["clip/embedding"] = embedding = run(fv, clip, images)
    references["clip/classifier_logits"] = run(fv, classifier, images)
    references["clip/classifier_head.weight"] = classifier.head.fc_head.weight.numpy()
    references["clip/classifier_head.bias"] = classifier.head.fc_head.bias.numpy()
    cases["clip"] = dict(code="ppcls foundation_vit.VisionTransformer", model_name="CLIP_vit_base_patch16_224",
                         return_embed=True, return_mean_embed=True, shapes=shapes(clip),
                         classifier=dict(class_num=CLASSES, return_embed=False),
                         **clip_arguments, **sensitivities(fv, clip, images, embedding))
    record_photos(fv, clip, "clip", 32, "embedding", references, cases)

    # CLIP_vit_large_patch14_224 as its fine-tuning configs build it: a classifier (return_embed False)
    large_arguments = dict(TOY, img_size=28, patch_size=14, output_dim=EMBEDDING, epsilon=1e-5)
    large = build(fv, "CLIP_vit_large_patch14_224", class_num=CLASSES, **large_arguments)
    randomise(large, rng)
    _, sizes["clip_large"] = save(large, args.out, "paddleclas_foundation_clip_large")
    images = rng.standard_normal((BATCH, 3, 28, 28)).astype("float32")
    references["clip_large/input"] = images
    references["clip_large/logits"] = logits = run(fv, large, images)
    large_embedding = build(fv, "CLIP_vit_large_patch14_224", return_embed=True, return_mean_embed=True,
                            **large_arguments)
    large_embedding.set_state_dict(state_without_head(large))
    references["clip_large/embedding"] = run(fv, large_embedding, images)
    cases["clip_large"] = dict(code="ppcls foundation_vit.VisionTransformer", model_name="CLIP_vit_large_patch14_224",
                               class_num=CLASSES, return_embed=False, shapes=shapes(large),
                               embedding=dict(return_embed=True, return_mean_embed=True,
                                              weights="the file less head.*"),
                               **large_arguments, **sensitivities(fv, large, images, logits))
    record_photos(fv, large, "clip_large", 28, "logits", references, cases)

    # MAE_vit_base_patch16: no ln_pre, the class's epsilon 1e-5 (MAE_* pass none), no patch bias
    mae_arguments = dict(TOY, img_size=32, patch_size=8, output_dim=EMBEDDING)
    mae = build(fv, "MAE_vit_base_patch16", class_num=CLASSES, **mae_arguments)
    randomise(mae, rng)
    _, sizes["mae"] = save(mae, args.out, "paddleclas_foundation_mae")
    images = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    references["mae/input"] = images
    references["mae/logits"] = logits = run(fv, mae, images)
    mae_embedding = build(fv, "MAE_vit_base_patch16", return_embed=True, return_mean_embed=True, **mae_arguments)
    mae_embedding.set_state_dict(state_without_head(mae))
    references["mae/embedding"] = run(fv, mae_embedding, images)
    images_48 = rng.standard_normal((1, 3, 48, 48)).astype("float32")
    references["mae_48/input"] = images_48
    references["mae_48/logits"] = run(fv, mae, images_48)  # pos_embed resized in the forward pass
    cases["mae"] = dict(code="ppcls foundation_vit.VisionTransformer", model_name="MAE_vit_base_patch16",
                        class_num=CLASSES, return_embed=False, epsilon=1e-5, shapes=shapes(mae),
                        embedding=dict(return_embed=True, return_mean_embed=True, weights="the file less head.*"),
                        at_48="the 32 model given 48x48 images: foundation_vit.resize_pos_embed in forward_features",
                        **mae_arguments, **sensitivities(fv, mae, images, logits))
    record_photos(fv, mae, "mae", 32, "logits", references, cases)

    # MAE_vit_huge_patch14's classifier: Head.fc_norm over x[:, 1:].mean(1) of the pooled [B, D] features
    huge = build(fv, "MAE_vit_huge_patch14", class_num=CLASSES, **mae_arguments)
    try:
        run(fv, huge, images)
        raise AssertionError("MAE_vit_huge_patch14's classifier ran")
    except ValueError as error:
        cases["mae_huge_classifier"] = dict(model_name="MAE_vit_huge_patch14", class_num=CLASSES,
                                            error=f"ValueError: {str(error).splitlines()[0]}",
                                            tensors=sorted(name for name in huge.state_dict()
                                                           if name.startswith("head.")))

    # what paddle-vit refuses: relative position bias (BEiTv2, CAE), Unicom's feature head
    for case, name, extra in (("beitv2", "BEiTv2_vit_base_patch16_224", dict(epsilon=1e-6)),
                              ("cae", "CAE_vit_base_patch16_224", dict(epsilon=1e-6)),
                              # runs only with return_embed (its head reads D features, feature gives
                              # output_dim) and a patch-32 name (patch16's drops a token: feature's size
                              # no longer fits)
                              ("unicom", "Unicom_vit_base_patch32_224",
                               dict(qkv_bias=False, conv_bias=True, feature_frame=True, image_project=False,
                                    return_embed=True))):
        arguments = dict(TOY, img_size=32, patch_size=8, output_dim=EMBEDDING, class_num=CLASSES, **extra)
        model = build(fv, name.replace("Unicom", "CLIP"), **arguments)
        randomise(model, rng)
        _, sizes[case] = save(model, args.out, f"paddleclas_foundation_{case}")
        references[f"{case}/output"] = run(fv, model, references["mae/input"])  # input: mae's
        cases[case] = dict(code="ppcls foundation_vit.VisionTransformer", model_name=name, shapes=shapes(model),
                           **arguments)

    write_reference(args.out, "paddleclas_foundation", references, cases,
                    dict(paddle=paddle.__version__, paddleclas=metadata.version("paddleclas"),
                         opencv=metadata.version("opencv-python"), pillow=metadata.version("pillow"),
                         scikit_learn=metadata.version("scikit-learn"), seed=args.seed))
    for case, size in sizes.items():
        print(f"paddleclas_foundation_{case}.pdparams: {size} bytes")
    for case in ("clip", "clip_large", "mae"):
        print(f"{case}: epsilon 1e-6 moves the output by {cases[case]['epsilon_1e-6_moves_output_by']:.2e}, "
              f"QuickGELU by {cases[case]['quick_gelu_moves_output_by']:.2e}")
    print(f"MAE_vit_huge_patch14 classifier: {cases['mae_huge_classifier']['error']}")
    return 0

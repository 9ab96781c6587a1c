"""Reference outputs of the original JAX code (google-research/vision_transformer's vit_jax),
run with jax + flax, not Paddle.

    /work/refvenv-jax/bin/python tools/make_reference_fixtures.py jax --vit-jax /path/to/vision_transformer

Small ``vit_jax.models_vit.VisionTransformer``s are initialised by flax, every parameter
perturbed (the zero-initialised head and class token included), and saved with vit_jax's own
checkpoint writer (``test_utils._save``, Linen numbering: ``LayerNorm_0,
MultiHeadDotProductAttention_0, LayerNorm_1, MlpBlock_0``) and in the numbering of the released
files (``LayerNorm_0, MultiHeadDotProductAttention_1, LayerNorm_2, MlpBlock_3``), which
vit_jax's ``checkpoint.load`` is shown to read back to the same parameters. Recorded:

- ``jax_vit``: the logits ``model.apply`` computes (flax's ``nn.gelu``, the tanh approximation),
  and how far exact GELU would move them;
- ``jax_vit_48``: the same file loaded by ``checkpoint.load_pretrained`` into the model at 48x48,
  which resizes the position embedding with ``scipy.ndimage.zoom(order=1)``: the resized table
  and the logits (the head given to it is the checkpoint's, so the logits are comparable);
- ``jax_vit_in21k``: an in21k-style model with a square pre-logits layer (representation_size =
  hidden size, as the released in21k files) and 5 classes.

vit_jax's checkpoint.py imports ``tensorflow.io.gfile`` for GCS paths; a local-file stand-in
(``open``) is put in its place, so TensorFlow is not needed.
"""
import os
import sys
import types

import numpy as np

from common import max_diff, perturbed, write_reference

SIZE = dict(hidden_size=32, mlp_dim=64, num_heads=4, num_layers=2, patch=8)
BATCH = 2
RELEASED_NUMBERING = {"MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
                      "LayerNorm_1": "LayerNorm_2", "MlpBlock_0": "MlpBlock_3"}


def import_vit_jax(checkout):
    """vit_jax's models_vit, checkpoint and test_utils from a checkout of the repository."""
    import flax.training.checkpoints  # noqa: F401  (before the stand-in: flax looks for TensorFlow itself)

    tensorflow = types.ModuleType("tensorflow")
    tensorflow.io = types.ModuleType("tensorflow.io")
    tensorflow.io.gfile = types.SimpleNamespace(GFile=open, stat=os.stat)
    sys.modules.setdefault("tensorflow", tensorflow)
    sys.modules.setdefault("tensorflow.io", tensorflow.io)
    sys.path.insert(0, checkout)
    from vit_jax import checkpoint, models_vit

    # vit_jax/models.py imports the LiT model (tensorflow_text); test_utils needs only the ViT
    sys.modules["vit_jax.models"] = types.SimpleNamespace(VisionTransformer=models_vit.VisionTransformer)
    from vit_jax import test_utils
    return models_vit, checkpoint, test_utils


def build(models_vit, num_classes, representation_size=None, resnet_layers=None, patch=None):
    import ml_collections
    transformer = ml_collections.ConfigDict(dict(mlp_dim=SIZE["mlp_dim"], num_heads=SIZE["num_heads"],
                                                 num_layers=SIZE["num_layers"], attention_dropout_rate=0.0,
                                                 dropout_rate=0.0))
    resnet = None if resnet_layers is None else ml_collections.ConfigDict(
        dict(num_layers=tuple(resnet_layers), width_factor=1))
    patch = patch or SIZE["patch"]
    return models_vit.VisionTransformer(
        num_classes=num_classes, patches=ml_collections.ConfigDict({"size": (patch, patch)}),
        transformer=transformer, hidden_size=SIZE["hidden_size"], classifier="token",
        representation_size=representation_size, resnet=resnet)


def scale_of(path):
    """Noise scale per parameter: larger for the attention kernels (attention far from
    uniform) and for the MLP and the head, so that the GELU's approximation shows in the logits
    well above the tests' 1e-4 (the released ViT-B/16 files: 2-4e-4)."""
    name = "/".join(path)
    if "MultiHeadDotProductAttention" in name:
        return 0.25
    if "MlpBlock" in name and path[-1] == "kernel":
        return 0.4
    if path[0] == "head":
        return 1.0
    return 0.1


def initialised(model, size, seed, rng, backbone_scale=1.0):
    import flax
    import jax
    import jax.numpy as jnp
    params = model.init(jax.random.PRNGKey(seed), jnp.ones([1, size, size, 3], jnp.float32), train=False)["params"]
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
    def value(path, leaf):
        array = perturbed(np.asarray(leaf), rng, scale_of(path))
        is_backbone_conv = path[0].startswith(("conv_root", "block")) and path[-1] == "kernel"
        return array * backbone_scale if is_backbone_conv else array

    return flax.traverse_util.unflatten_dict({path: value(path, leaf) for path, leaf in sorted(flat.items())})


def released_names(path_in, path_out):
    """A Linen-numbered .npz renamed to the numbering of the released files, GroupNorm scales
    and biases shaped [1, 1, 1, C] as the released hybrid files have them (flax < 0.3.6)."""
    with np.load(path_in) as archive:
        arrays = dict(archive)
    renamed = {}
    for name, array in arrays.items():
        for linen, released in RELEASED_NUMBERING.items():
            name = name.replace(f"/{linen}/", f"/{released}/")
        if len(name.split("/")) > 1 and name.split("/")[-2].startswith("gn"):
            array = array.reshape(1, 1, 1, -1)
        renamed[name] = array
    np.savez(path_out, **renamed)


def logits(model, params, images_nchw):
    return np.asarray(model.apply({"params": params}, np.transpose(images_nchw, (0, 2, 3, 1)), train=False))


def exact_gelu_logits(models_vit, model, params, images):
    """The logits had MlpBlock called exact GELU instead of flax's default."""
    import functools
    import jax
    saved = models_vit.nn.gelu
    models_vit.nn.gelu = functools.partial(jax.nn.gelu, approximate=False)
    try:
        return logits(model, params, images)
    finally:
        models_vit.nn.gelu = saved


def same_tree(a, b):
    import jax
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    return tree_a == tree_b and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves_a, leaves_b))


def make(args):
    if not args.vit_jax:
        raise SystemExit("the jax family needs --vit-jax DIR, a checkout of google-research/vision_transformer")
    models_vit, checkpoint, test_utils = import_vit_jax(os.path.abspath(args.vit_jax))
    import flax
    import jax
    import ml_collections
    import scipy
    rng = np.random.default_rng(args.seed)
    references, cases = {}, {}

    model = build(models_vit, num_classes=10)
    params = initialised(model, 32, args.seed, rng)
    linen_path = os.path.join(args.out, "jax_vit_linen.npz")
    released_path = os.path.join(args.out, "jax_vit_released.npz")
    test_utils._save(params, linen_path)
    released_names(linen_path, released_path)
    for path in (linen_path, released_path):  # vit_jax's own reader gives back the same parameters
        assert same_tree(checkpoint.load(path), flax.core.unfreeze(params)), path
    images = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    references["jax_vit/input"] = images
    references["jax_vit/logits"] = logits(model, params, images)
    gelu_gap = max_diff(exact_gelu_logits(models_vit, model, params, images), references["jax_vit/logits"])
    assert gelu_gap > 1e-3, gelu_gap
    cases["jax_vit"] = dict(files=["jax_vit_linen.npz", "jax_vit_released.npz"], image_size=32, num_classes=10,
                            exact_gelu_moves_logits_by=gelu_gap, **SIZE)
    print(f"jax_vit: exact GELU instead of flax's tanh GELU moves the logits by {gelu_gap:.2e}")

    # fine-tuning at 48x48: vit_jax's load_pretrained resizes the position embedding (zoom order 1)
    model_48 = build(models_vit, num_classes=10)
    init_48 = flax.core.unfreeze(initialised(model_48, 48, args.seed + 1, rng))
    init_48["head"] = flax.core.unfreeze(params)["head"]  # load_pretrained puts the init head back
    loaded_48 = checkpoint.load_pretrained(pretrained_path=released_path, init_params=init_48,
                                           model_config=ml_collections.ConfigDict(
                                               dict(classifier="token", representation_size=None)))
    images_48 = rng.standard_normal((BATCH, 3, 48, 48)).astype("float32")
    references["jax_vit_48/input"] = images_48
    references["jax_vit_48/logits"] = logits(model_48, loaded_48, images_48)
    references["jax_vit_48/pos_embed"] = np.asarray(loaded_48["Transformer"]["posembed_input"]["pos_embedding"])
    cases["jax_vit_48"] = dict(weights="jax_vit_released.npz", image_size=48, num_classes=10, **SIZE)
    print("jax_vit_48: grid 4x4 -> 6x6 by vit_jax's checkpoint.load_pretrained")

    # an in21k-style checkpoint: square pre-logits layer, its own head
    model_21k = build(models_vit, num_classes=5, representation_size=SIZE["hidden_size"])
    params_21k = initialised(model_21k, 32, args.seed + 2, rng)
    path_21k = os.path.join(args.out, "jax_vit_in21k.npz")
    test_utils._save(params_21k, path_21k + ".linen.npz")
    released_names(path_21k + ".linen.npz", path_21k)
    os.remove(path_21k + ".linen.npz")
    assert same_tree(checkpoint.load(path_21k), flax.core.unfreeze(params_21k))
    images_21k = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    references["jax_vit_in21k/input"] = images_21k
    references["jax_vit_in21k/logits"] = logits(model_21k, params_21k, images_21k)
    cases["jax_vit_in21k"] = dict(weights="jax_vit_in21k.npz", image_size=32, num_classes=5,
                                  representation_size=SIZE["hidden_size"], **SIZE)
    print("jax_vit_in21k: pre_logits 32 -> 32 (tanh), head -> 5")

    # a hybrid (paper Section 3.1): vit_jax's own ResNet (models_resnet.py) of one stage of one unit,
    # whose 2x2 patches of the 8x8 feature map the embedding reads; its convolutions scaled down so
    # that vit_jax's weight standardisation, (w - mean) / (std + 1e-5), shows against timm's
    model_hybrid = build(models_vit, num_classes=10, resnet_layers=(1,), patch=2)
    params_hybrid = initialised(model_hybrid, 32, args.seed + 3, rng, backbone_scale=1e-3)
    path_hybrid = os.path.join(args.out, "jax_hybrid_released.npz")
    test_utils._save(params_hybrid, path_hybrid + ".linen.npz")
    released_names(path_hybrid + ".linen.npz", path_hybrid)
    os.remove(path_hybrid + ".linen.npz")
    assert same_tree(checkpoint.load(path_hybrid), flax.core.unfreeze(params_hybrid))
    images_hybrid = rng.standard_normal((BATCH, 3, 32, 32)).astype("float32")
    references["jax_hybrid/input"] = images_hybrid
    references["jax_hybrid/logits"] = logits(model_hybrid, params_hybrid, images_hybrid)
    cases["jax_hybrid"] = dict(weights="jax_hybrid_released.npz", image_size=32, num_classes=10, resnet_layers=[1],
                               **dict(SIZE, patch=2))
    print("jax_hybrid: conv_root, gn_root, block1/unit1 ([1, 1, 1, C] GroupNorm parameters), 2x2 patches")

    versions = dict(jax=jax.__version__, flax=flax.__version__, scipy=scipy.__version__, seed=args.seed,
                    vit_jax=os.environ.get("VIT_JAX_COMMIT", "see tests/fixtures/README.md"))
    write_reference(args.out, "jax", references, cases, versions)
    for name in ("jax_vit_linen.npz", "jax_vit_released.npz", "jax_vit_in21k.npz", "jax_hybrid_released.npz"):
        os.chmod(os.path.join(args.out, name), 0o644)
    return 0

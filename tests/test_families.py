"""Every checkpoint family computed as its own code computes it: Hugging Face transformers, the
original JAX code (vit_jax), PaddleClas and PLSC, against outputs those codes recorded
(tests/fixtures/README.md; timm's are in test_weights.py). None of those packages is needed here.

All models are toy ViTs (32x32 images, 8x8 patches, D 32, depth 2, 4 heads, MLP 64) loaded
through `create_model(name, pretrained=...)`, so the options each checkpoint implies (epsilon,
GELU, q.k scale, pre-logits layer, class count) are read from the file, not typed.
"""
import json
import os
import shutil
import sys

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file, save_file

from paddle_vit import ViT, WeightsError, create_model, load_pretrained
from paddle_vit.weights import detect_family, families, implied_options, read_checkpoint

from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOLERANCE = 1e-4  # absolute, on logits of magnitude ~1-10
TOY = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2)
NAME = "vit_tiny_patch16_224"  # the registry's name; the toy sizes are overrides


def reference(family):
    return dict(np.load(os.path.join(FIXTURES, f"{family}_reference.npz")))


HF, JAX, PADDLECLAS = reference("hf"), reference("jax"), reference("paddleclas")
with open(os.path.join(FIXTURES, "jax_reference.json")) as _stream:
    JAX_CASES = json.load(_stream)["cases"]


def fixture(name):
    return os.path.join(FIXTURES, name)


def create(pretrained, **overrides):
    return create_model(NAME, pretrained=pretrained, **dict(TOY, **overrides)).eval()


def outputs(model, images):
    with paddle.no_grad():
        return model(paddle.to_tensor(images)).numpy()


def difference(model, references, case, key="logits"):
    return float(np.abs(outputs(model, references[f"{case}/input"]) - references[f"{case}/{key}"]).max())


# ---- Hugging Face transformers ---------------------------------------------------------------

HF_LABELS = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.mark.parametrize("source", ["hf_vit_classifier", "hf_vit_classifier/model.safetensors"])
def test_hugging_face_folder_or_its_safetensors_matches_transformers_logits(source):
    model = create(fixture(source))
    report = model.load_report
    assert report.format == "huggingface" and not (report.missing or report.reinitialized or report.ignored)
    assert report.options["layer_norm_epsilon"][0] == 1e-12 and "config.json" in report.options["layer_norm_epsilon"][1]
    assert model.config.num_classes == 10 and model.class_names == HF_LABELS  # id2label
    assert difference(model, HF, "hf_vit_classifier") < TOLERANCE


def test_hugging_face_epsilon_is_what_makes_the_logits_match():
    model = create(fixture("hf_vit_classifier"), layer_norm_epsilon=1e-6)  # ViT's, not transformers'
    assert model.load_report.overridden["layer_norm_epsilon"][:2] == (1e-6, 1e-12)
    assert difference(model, HF, "hf_vit_classifier") > 100 * TOLERANCE


def test_hugging_face_at_48_matches_interpolate_pos_encoding():
    model = create(fixture("hf_vit_classifier"), image_size=48)
    assert model.load_report.resample_method == "bicubic"
    assert difference(model, HF, "hf_vit_classifier_48") < TOLERANCE
    antialiased = create(fixture("hf_vit_classifier"), image_size=48, resample="bicubic_antialias")
    assert difference(antialiased, HF, "hf_vit_classifier_48") > 10 * TOLERANCE


def test_hugging_face_bare_vit_model_pooler_is_the_pre_logits_layer():
    model = create(fixture("hf_vit_model"))
    options = {option: value for option, (value, _) in model.load_report.options.items()}
    assert options["num_classes"] == 0 and options["representation_size"] == 32  # no classifier; the pooler
    assert (options["gelu"], options["qkv_bias"], options["layer_norm_epsilon"]) == ("tanh", False, 1e-5)
    assert difference(model, HF, "hf_vit_model", key="pooler_output") < TOLERANCE


def test_hugging_face_weights_without_config_json_take_transformers_defaults(tmp_path):
    shutil.copy(fixture("hf_vit_classifier/model.safetensors"), tmp_path / "model.safetensors")
    model = create(str(tmp_path / "model.safetensors"))
    epsilon, reason = model.load_report.options["layer_norm_epsilon"]
    assert epsilon == 1e-12 and "default" in reason
    assert model.class_names is None
    assert difference(model, HF, "hf_vit_classifier") < TOLERANCE  # its config.json said the defaults


def test_hugging_face_sharded_folder(tmp_path):
    state = load_file(fixture("hf_vit_classifier/model.safetensors"))
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, shard_names in shards.items():
        save_file({name: state[name] for name in shard_names}, str(tmp_path / shard), metadata={"format": "pt"})
    weight_map = {name: shard for shard, shard_names in shards.items() for name in shard_names}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    shutil.copy(fixture("hf_vit_classifier/config.json"), tmp_path / "config.json")
    assert difference(create(str(tmp_path)), HF, "hf_vit_classifier") < TOLERANCE


def test_hugging_face_activation_this_vit_cannot_compute_is_named(tmp_path):
    shutil.copytree(fixture("hf_vit_classifier"), tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(config, hidden_act="relu")))
    with pytest.raises(WeightsError, match="hidden_act 'relu'.*supported: gelu, gelu_new"):
        create(str(tmp_path / "hf"))
    for epsilon in ("1e-12", 0, float("nan"), 0.1):
        (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(config, layer_norm_eps=epsilon)))
        with pytest.raises(WeightsError, match="layer_norm_eps .* is not a LayerNorm epsilon"):
            create(str(tmp_path / "hf"))
    (tmp_path / "hf" / "config.json").write_text("{not json")
    with pytest.raises(WeightsError, match="config.json"):
        create(str(tmp_path / "hf"))


def test_a_folder_that_is_not_a_hugging_face_one_says_what_is_expected(tmp_path):
    with pytest.raises(WeightsError, match="is a directory without model.safetensors"):
        create(str(tmp_path))


# ---- the original JAX code ---------------------------------------------------------------------

@pytest.mark.parametrize("numbering", ["released", "linen"])
def test_jax_npz_in_either_numbering_matches_vit_jax_logits(numbering):
    model = create(fixture(f"jax_vit_{numbering}.npz"))
    assert model.load_report.format == "jax" and model.config.gelu == "tanh"
    assert "nn.gelu" in model.load_report.options["gelu"][1]
    assert difference(model, JAX, "jax_vit") < TOLERANCE


def test_jax_npz_with_exact_gelu_is_timms_reading_not_vit_jax():
    model = create(fixture("jax_vit_released.npz"), gelu="exact")
    assert model.load_report.overridden["gelu"][:2] == ("exact", "tanh")
    gap = difference(model, JAX, "jax_vit")
    assert gap > 10 * TOLERANCE and gap == pytest.approx(JAX_CASES["jax_vit"]["exact_gelu_moves_logits_by"], rel=0.05)


def test_jax_fine_tuning_at_48_resamples_as_vit_jax_zoom():
    model = create(fixture("jax_vit_released.npz"), image_size=48)
    report = model.load_report
    assert report.resample_method == "bilinear_align_corners" and "vit_jax" in report.resample_reason
    np.testing.assert_allclose(model.patch_embed.position_embedding.numpy(), JAX["jax_vit_48/pos_embed"], atol=1e-6)
    assert difference(model, JAX, "jax_vit_48") < TOLERANCE
    as_timm_resamples = create(fixture("jax_vit_released.npz"), image_size=48, resample="bicubic_antialias")
    assert difference(as_timm_resamples, JAX, "jax_vit_48") > 10 * TOLERANCE


def test_a_recipes_pretrained_resample_chooses_the_method():
    from paddle_vit.config import load_config
    from paddle_vit.factory import build_model

    model = dict(TOY, name=NAME, image_size=48, pretrained=fixture("jax_vit_released.npz"))
    for method, expected in ((None, "bilinear_align_corners"), ("bicubic_antialias", "bicubic_antialias")):
        config = load_config(data={"model": dict(model, pretrained_resample=method)})
        assert build_model(config, num_classes=10).load_report.resample_method == expected


def test_jax_in21k_pre_logits_layer_is_read_from_the_file():
    model = create(fixture("jax_vit_in21k.npz"))
    assert model.config.representation_size == 32 and model.config.num_classes == 5
    assert difference(model, JAX, "jax_vit_in21k") < TOLERANCE


def test_jax_in21k_fine_tuned_to_other_classes_drops_the_whole_head():
    model = create(fixture("jax_vit_in21k.npz"), num_classes=3)
    assert model.config.representation_size is None  # paper Appendix B.1.1
    assert sorted(model.load_report.ignored) == ["pre_logits/bias", "pre_logits/kernel"]
    assert not np.any(model.head.weight.numpy())


def test_load_pretrained_refuses_a_jax_file_into_an_exact_gelu_model():
    model = ViT(**TOY, num_classes=10)
    with pytest.raises(WeightsError, match="implies gelu='tanh'.*build the model with gelu='tanh'"):
        load_pretrained(model, fixture("jax_vit_released.npz"))
    report = load_pretrained(model, fixture("jax_vit_released.npz"), strict=False)
    assert any("gelu" in note for note in report.notes)
    report = load_pretrained(model, fixture("jax_vit_released.npz"), explicit={"gelu"})
    assert report.overridden["gelu"][:2] == ("exact", "tanh")


# ---- PaddleClas and PLSC -----------------------------------------------------------------------

def test_paddleclas_pdparams_loads_without_transposes_and_matches_paddleclas():
    model = create(fixture("paddleclas_vit_base.pdparams"))
    report = model.load_report
    assert report.format == "paddleclas" and len(report.loaded) == len(model.state_dict())
    assert model.config.layer_norm_epsilon == 1e-6
    assert difference(model, PADDLECLAS, "paddleclas_vit_base") < TOLERANCE


def test_paddleclas_non_standard_small_through_overrides():
    # the epsilon (1e-5) and the missing q/k/v bias come from the file; the toy's scale, width and
    # MLP ratio are what its full-size shape implies (next test) and are given here
    model = create(fixture("paddleclas_vit_small.pdparams"), embed_dim=48, mlp_ratio=3, qk_scale=48 ** -0.5)
    assert (model.config.layer_norm_epsilon, model.config.qkv_bias) == (1e-5, False)
    assert difference(model, PADDLECLAS, "paddleclas_vit_small") < TOLERANCE
    with_vit_epsilon = create(fixture("paddleclas_vit_small.pdparams"), embed_dim=48, mlp_ratio=3,
                              qk_scale=48 ** -0.5, layer_norm_epsilon=1e-6)
    assert difference(with_vit_epsilon, PADDLECLAS, "paddleclas_vit_small") > 100 * TOLERANCE
    with_head_dim_scale = create(fixture("paddleclas_vit_small.pdparams"), embed_dim=48, mlp_ratio=3)
    assert difference(with_head_dim_scale, PADDLECLAS, "paddleclas_vit_small") > 100 * TOLERANCE


def full_size_paddleclas_small():
    """The tensor shapes of PaddleClas's ViT_small_patch16_224 (D 768, depth 8, MLP 2304, no q/k/v
    bias), as zero-stride arrays: what the options are read from, without 195 MB of memory."""
    shapes = {"cls_token": (1, 1, 768), "pos_embed": (1, 197, 768), "patch_embed.proj.weight": (768, 3, 16, 16),
              "patch_embed.proj.bias": (768,), "norm.weight": (768,), "norm.bias": (768,),
              "head.weight": (768, 1000), "head.bias": (1000,)}
    for index in range(8):
        block = f"blocks.{index}."
        shapes.update({block + "norm1.weight": (768,), block + "norm1.bias": (768,),
                       block + "attn.qkv.weight": (768, 2304), block + "attn.proj.weight": (768, 768),
                       block + "attn.proj.bias": (768,), block + "norm2.weight": (768,), block + "norm2.bias": (768,),
                       block + "mlp.fc1.weight": (768, 2304), block + "mlp.fc1.bias": (2304,),
                       block + "mlp.fc2.weight": (2304, 768), block + "mlp.fc2.bias": (768,)})
    return {name: np.broadcast_to(np.float32(0.01), shape) for name, shape in shapes.items()}


def test_paddleclas_small_at_full_size_implies_its_epsilon_and_scale():
    implied = implied_options(full_size_paddleclas_small())
    assert implied["qk_scale"].value == pytest.approx(768 ** -0.5) and "ViT_small_patch16_224" in implied["qk_scale"].reason
    assert implied["layer_norm_epsilon"].value == 1e-5 and implied["qkv_bias"].value is False
    assert implied["num_classes"].value == 1000


def test_plsc_head0_is_the_pre_logits_layer():
    model = create(fixture("plsc_vit_in21k.pdparams"))
    assert model.config.representation_size == 32 and model.config.num_classes == 5
    assert difference(model, PADDLECLAS, "plsc_vit_in21k") < TOLERANCE


def test_plsc_file_into_a_model_without_pre_logits_is_refused_not_zeroed():
    """The bug this replaces: loaded "successfully" with strict=True, the layer dropped, the head
    zeroed, every logit 0."""
    model = ViT(**TOY, num_classes=5)
    with pytest.raises(WeightsError, match=r"pre-logits layer \(head0.weight, 32 -> 32\).*representation_size=32"):
        load_pretrained(model, fixture("plsc_vit_in21k.pdparams"))
    report = load_pretrained(model, fixture("plsc_vit_in21k.pdparams"), strict=False)
    assert report.reinitialized == ["head.weight", "head.bias"]


def test_plsc_fine_tuning_at_48_resamples_as_plsc():
    model = create(fixture("paddleclas_vit_base.pdparams"), image_size=48)
    assert model.load_report.resample_method == "bicubic"
    np.testing.assert_allclose(model.patch_embed.position_embedding.numpy(), PADDLECLAS["plsc_vit_48/pos_embed"],
                               atol=1e-6)
    assert difference(model, PADDLECLAS, "plsc_vit_48") < TOLERANCE


def test_a_paddle_layout_file_of_another_size_names_its_family():
    with pytest.raises(WeightsError, match="PaddleClas / PLSC .*another architecture or size"):
        create(fixture("paddleclas_vit_base.pdparams"), mlp_ratio=4)


def test_a_half_converted_file_is_an_error_naming_both_layouts():
    state = {name: value.numpy() for name, value in paddle.load(fixture("paddleclas_vit_base.pdparams")).items()}
    state["blocks.1.mlp.fc1.weight"] = state["blocks.1.mlp.fc1.weight"].T.copy()
    with pytest.raises(WeightsError, match="mixes Linear layouts.*half converted"):
        create(state)


# ---- one decision per checkpoint: a square matrix transposed by mistake is caught --------------

def square_matrix_transposed(family):
    """(a fixture's arrays with one square matrix transposed, its references, the case, model
    overrides): what a converter deciding the layout per tensor would produce."""
    overrides = {}
    if family == "huggingface":
        state = load_file(fixture("hf_vit_classifier/model.safetensors"))
        name = "vit.encoder.layer.0.attention.attention.query.weight"
        case, references = "hf_vit_classifier", HF
    elif family == "jax":
        state = dict(np.load(fixture("jax_vit_in21k.npz")))
        name, case, references = "pre_logits/kernel", "jax_vit_in21k", JAX
    elif family == "paddleclas":
        state = {key: value.numpy() for key, value in paddle.load(fixture("plsc_vit_in21k.pdparams")).items()}
        name, case, references = "head0.weight", "plsc_vit_in21k", PADDLECLAS
    else:
        state = load_file(fixture("timm_vit_cls.safetensors"))
        name, case = "blocks.0.attn.proj.weight", "timm_vit_cls"
        references, overrides = dict(np.load(fixture("timm_reference.npz"))), {"mlp_ratio": 4}
    assert state[name].shape[0] == state[name].shape[1]
    mistaken = dict(state, **{name: np.ascontiguousarray(state[name].T)})
    return state, mistaken, references, case, overrides


@pytest.mark.parametrize("family", ["timm", "huggingface", "jax", "paddleclas"])
def test_a_square_matrix_transposed_by_mistake_changes_the_logits(family):
    state, mistaken, references, case, overrides = square_matrix_transposed(family)
    assert difference(create(state, **overrides), references, case) < TOLERANCE
    model = create(mistaken, **overrides)
    assert model.load_report.format == family  # detected from the whole checkpoint all the same
    assert difference(model, references, case) > 100 * TOLERANCE


# ---- the families themselves ------------------------------------------------------------------

def test_each_fixture_is_detected_as_its_own_family():
    def arrays(name):
        path = fixture(name)
        if path.endswith(".npz"):
            return dict(np.load(path))
        if path.endswith(".pdparams"):
            return {key: value.numpy() for key, value in paddle.load(path).items()}
        return load_file(path)

    expected = {"hf_vit_classifier/model.safetensors": "huggingface", "hf_vit_model/model.safetensors": "huggingface",
                "jax_vit_released.npz": "jax", "jax_vit_linen.npz": "jax", "paddleclas_vit_base.pdparams": "paddleclas",
                "plsc_vit_in21k.pdparams": "paddleclas", "paddleclas_foundation_clip.pdparams": "paddleclas",
                "paddleclas_foundation_mae.pdparams": "paddleclas", "timm_vit_cls.safetensors": "timm",
                "torchvision_vit.safetensors": "torchvision", "torchvision_vit_prelogits.safetensors": "torchvision",
                "hf_modern/openclip_quickgelu.safetensors": "openclip",
                "timm_modern/vit_small_patch14_reg4_dinov2/model.safetensors": "timm",
                "hf_dinov3/dinov3_vit/model.safetensors": "huggingface-dinov3",
                "hf_dinov3/dinov3_vit_gated/model.safetensors": "huggingface-dinov3",
                "dinov3_original/dinov3_vits.safetensors": "dinov3"}
    assert {name: detect_family(read_checkpoint(arrays(name))).name for name in expected} == expected
    assert [family.name for family in families()] == ["dinov3", "huggingface", "huggingface-clip", "huggingface-deit",
                                                       "huggingface-dinov2", "huggingface-dinov2-registers",
                                                       "huggingface-dinov3", "huggingface-siglip", "jax", "openclip", "paddle-vit",
                                                       "paddleclas", "timm", "torchvision"]


def test_an_unknown_layout_names_every_supported_format():
    with pytest.raises(WeightsError) as caught:
        create({"conv1.weight": np.zeros((3, 3), "float32")})
    message = str(caught.value)
    for family in families():
        assert family.title in message
    assert "\n" not in message


FAMILY_MODULE = '''
from paddle_vit.weights.family import CheckpointFamily, ConvertedCheckpoint, Implied


class ToyFamily(CheckpointFamily):
    name = "toy"
    title = "a toy layout"
    example = "toy.head"

    def detect(self, checkpoint):
        return "toy.head" in checkpoint.arrays

    def convert(self, checkpoint):
        tensors = {"head.weight": checkpoint.arrays["toy.head"], "head.bias": checkpoint.arrays["toy.bias"]}
        return ConvertedCheckpoint(self.name, tensors, {}, [])

    def implied_options(self, checkpoint, converted):
        return {"gelu": Implied("tanh", "toys are trained with it")}


FAMILY = ToyFamily()
'''


def test_a_family_is_one_module(tmp_path, monkeypatch):
    """Dropping one module that defines FAMILY into the package is all it takes."""
    import paddle_vit.weights as weights_package
    from paddle_vit.weights import family as family_module

    (tmp_path / "toy_family.py").write_text(FAMILY_MODULE)
    monkeypatch.setattr(weights_package, "__path__", list(weights_package.__path__) + [str(tmp_path)])
    monkeypatch.setattr(family_module, "_FAMILIES", [])
    monkeypatch.delitem(sys.modules, "paddle_vit.weights.toy_family", raising=False)
    try:
        assert "toy" in [family.name for family in families()]
        state = {"toy.head": np.ones((32, 3), "float32"), "toy.bias": np.zeros(3, "float32")}
        model = create_model(NAME, pretrained=state, strict=False, **TOY)
        assert model.load_report.format == "toy" and model.config.gelu == "tanh" and model.config.num_classes == 3
    finally:
        family_module._FAMILIES.clear()


# ---- the tools take --model NAME --weights FILE and need no hand-typed options ----------------

TOY_FLAGS = ["--model", NAME] + [arg for key, value in TOY.items() for arg in ("-o", f"model.{key}={value}")]


def run_tool(name, argv, capsys):
    """(exit code, stdout lines, stderr) of tools/<name>.py run in this process."""
    import logging

    from paddle_vit.cli import run
    from repo_paths import load_tool

    logger = logging.getLogger("paddle_vit")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    capsys.readouterr()
    try:
        code = run(load_tool(name).main, [str(arg) for arg in argv])  # as its __main__ block does
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_eval_tool_with_a_model_name_and_a_hugging_face_folder(capsys):
    code, lines, errors = run_tool("eval", [*TOY_FLAGS, "--weights", fixture("hf_vit_classifier"),
                                            "-o", "eval.engine=dynamic"], capsys)
    assert code == 0, errors
    summary = json.loads(lines[-1])
    assert summary["num_samples"] == 359 and 0.0 <= summary["top1"] <= 1.0  # the digits val split: 10 classes
    code, lines, errors = run_tool("eval", [*TOY_FLAGS, "--weights", fixture("hf_vit_classifier"),
                                            "-o", "data.dataset=synthetic", "-o", "data.synthetic_classes=4"], capsys)
    assert code == 2 and errors.count("\n") == 1
    assert "does not fit the model for evaluation: its head has 10 classes, the validation data 4" in errors


def test_predict_tool_prints_the_checkpoints_class_names(tmp_path, capsys):
    from PIL import Image
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    code, lines, errors = run_tool("predict", ["--weights", fixture("hf_vit_classifier"), *TOY_FLAGS, "--json",
                                               "--topk", "3", tmp_path / "a.png"], capsys)
    assert code == 0, errors
    predictions = json.loads(lines[0])["predictions"]
    assert len(predictions) == 3 and all(item["label"] in HF_LABELS for item in predictions)


def test_convert_tool_keeps_the_options_in_safetensors_and_names_them_for_pdparams(tmp_path, capsys):
    flags = [arg if not arg.startswith("model.") else arg[len("model."):] for arg in TOY_FLAGS]
    out = tmp_path / "converted.safetensors"
    code, lines, errors = run_tool("convert_weights", ["--weights", fixture("hf_vit_classifier"), *flags,
                                                       "--out", out], capsys)
    assert code == 0, errors
    assert any("layer_norm_epsilon=1e-12" in line for line in lines)
    reloaded = create(str(out))  # our own file: the options recorded in its metadata
    assert reloaded.load_report.format == "paddle-vit" and reloaded.config.layer_norm_epsilon == 1e-12
    assert difference(reloaded, HF, "hf_vit_classifier") < TOLERANCE
    code, lines, errors = run_tool("convert_weights", ["--weights", fixture("jax_vit_released.npz"), *flags,
                                                       "--out", tmp_path / "converted.pdparams"], capsys)
    assert code == 0, errors
    assert "note: a .pdparams records no options; load it with -o model.gelu=tanh" in lines[-1]


def test_convert_tool_takes_the_model_from_a_recipe(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model:\n  name: vit_tiny_patch16_224\n  pretrained: " + fixture("paddleclas_vit_base.pdparams")
                      + "\n" + "".join(f"  {key}: {value}\n" for key, value in TOY.items()))
    code, lines, errors = run_tool("convert_weights", ["-c", recipe, "--out", tmp_path / "out.safetensors"], capsys)
    assert code == 0, errors
    assert difference(create(str(tmp_path / "out.safetensors")), PADDLECLAS, "paddleclas_vit_base") < TOLERANCE
    code, lines, errors = run_tool("convert_weights", ["-c", recipe, "--model", NAME, "--out", tmp_path / "x.pdparams"],
                                   capsys)
    assert code == 2 and errors.startswith("error: ") and "one of them" in errors


def test_the_readmes_parity_table_command(capsys):
    """tools/weights_parity.py, whose output is docs/pretrained.md's table: every case within the
    tests' tolerance, every other way outside it."""
    code, lines, errors = run_tool("weights_parity", ["--json"], capsys)
    assert code == 0, errors
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 39 and all(row["difference"] < TOLERANCE for row in rows)
    assert all(row["other_difference"] > 2 * TOLERANCE for row in rows if row["other"])

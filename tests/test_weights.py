"""Pretrained weights: timm / JAX / paddle-vit checkpoints against logits recorded with timm.

The fixtures (tests/fixtures/README.md) hold small timm ViTs with perturbed random weights, in
timm's .safetensors and in the JAX .npz layout, with timm's own logits for an input batch.
Matching those logits to 1e-4 checks every name, transpose and head split of the converters.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file

from paddle_vit import LoadReport, ViT, WeightsError, create_model, load_pretrained
from paddle_vit.weights import detect_family, read_checkpoint, resample_position_embedding, save_weights

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures")
REFERENCE = dict(np.load(os.path.join(FIXTURES, "timm_reference.npz")))
with open(os.path.join(FIXTURES, "timm_reference.json")) as _handle:
    CASES = json.load(_handle)["cases"]
TOLERANCE = 1e-4  # absolute, on logits of magnitude ~1


def fixture(name):
    return os.path.join(FIXTURES, name)


def build(case, **overrides):
    arguments = {key: value for key, value in CASES[case].items() if key != "weights"}
    arguments.update(overrides)
    return ViT(**arguments).eval()


def logits(model, case):
    with paddle.no_grad():
        return model(paddle.to_tensor(REFERENCE[f"{case}/input"])).numpy()


def assert_matches_timm(model, case):
    difference = np.abs(logits(model, case) - REFERENCE[f"{case}/logits"]).max()
    assert difference < TOLERANCE, f"{case}: max |ours - timm| = {difference}"


def model_names(case, **overrides):
    return list(build(case, **overrides).state_dict())


def load_as_timm(model, source, **options):
    """Load as timm reads the file: the .npz fixtures hold timm's weights in the JAX layout and
    their reference is timm's logits, which timm computes with exact GELU (the JAX code's
    tanh GELU is the default for that layout) and resamples bicubic with antialias."""
    return load_pretrained(model, source, explicit={"gelu"}, resample="bicubic_antialias", **options)


# ---- loading against timm's numbers ----------------------------------------------------------

@pytest.mark.parametrize("case", ["timm_vit_cls", "timm_vit_avg", "timm_vit_p16"])
def test_timm_safetensors_matches_timm_logits(case):
    model = build(case)
    report = load_pretrained(model, fixture(f"{case}.safetensors"))
    assert report.format == "timm"
    assert sorted(report.loaded) == sorted(model_names(case))
    assert not (report.resampled or report.reinitialized or report.ignored or report.missing)
    assert_matches_timm(model, case)


@pytest.mark.parametrize("case", ["timm_vit_cls", "timm_vit_p16"])
def test_jax_npz_matches_timm_logits(case):
    model = build(case)
    report = load_as_timm(model, fixture(f"{case}.npz"))
    assert report.format == "jax"
    assert sorted(report.loaded) == sorted(model_names(case))
    assert_matches_timm(model, case)


@pytest.mark.parametrize("case,extension", [("timm_vit_cls", "safetensors"), ("timm_vit_avg", "safetensors"),
                                            ("timm_vit_cls", "npz"), ("timm_vit_p16", "npz")])
def test_in_memory_dict_matches_timm_logits(case, extension):
    path = fixture(f"{case}.{extension}")
    state = load_file(path) if extension == "safetensors" else dict(np.load(path))
    model = build(case)
    report = load_as_timm(model, state)
    assert report.source == "<dict>"
    assert_matches_timm(model, case)


def test_in_memory_dict_of_paddle_tensors_in_our_names():
    source = build("timm_vit_cls")
    load_pretrained(source, fixture("timm_vit_cls.safetensors"))
    model = build("timm_vit_cls")
    report = load_pretrained(model, source.state_dict())
    assert report.format == "paddle-vit"
    assert_matches_timm(model, "timm_vit_cls")


def big_vision_names(state):
    """The same weights under big_vision's sublayer numbering and a params/ prefix."""
    renamed = {}
    for name, array in state.items():
        name = (name.replace("MultiHeadDotProductAttention_1", "MultiHeadDotProductAttention_0")
                .replace("LayerNorm_2", "LayerNorm_1").replace("MlpBlock_3", "MlpBlock_0"))
        renamed["params/" + name] = array
    return renamed


def stacked_blocks(state, depth):
    """The same weights with the layers stacked along a leading axis (scanned big_vision models)
    and the opt/target/ prefix of the original fine-tuning checkpoints, plus optimizer state."""
    stacked = {}
    for name, array in state.items():
        if name.startswith("Transformer/encoderblock_0/"):
            role = name[len("Transformer/encoderblock_0/"):]
            layers = [state[f"Transformer/encoderblock_{index}/{role}"] for index in range(depth)]
            stacked[f"opt/target/Transformer/encoderblock/{role}"] = np.stack(layers)
        elif not name.startswith("Transformer/encoderblock_"):
            stacked["opt/target/" + name] = array
    stacked["opt/state/step"] = np.array(10)
    return stacked


@pytest.mark.parametrize("variant", ["big_vision", "stacked"])
def test_jax_key_variants_match_timm_logits(variant):
    state = dict(np.load(fixture("timm_vit_cls.npz")))
    depth = CASES["timm_vit_cls"]["depth"]
    state = big_vision_names(state) if variant == "big_vision" else stacked_blocks(state, depth)
    model = build("timm_vit_cls")
    report = load_as_timm(model, state)
    assert report.format == "jax" and not report.missing
    assert_matches_timm(model, "timm_vit_cls")


# ---- position embedding ------------------------------------------------------------------------

@pytest.mark.parametrize("tag", ["up", "down"])
@pytest.mark.parametrize("extension", ["safetensors", "npz"])
def test_resampled_position_embedding_matches_timm(tag, extension):
    case = f"resample_{tag}"
    model = build(case)
    report = load_as_timm(model, fixture(f"{CASES[case]['weights']}.{extension}"))
    grid = CASES[case]["image_size"] // CASES[case]["patch_size"]
    assert report.resampled == [("patch_embed.position_embedding", (4, 4), (grid, grid))]
    assert "patch_embed.position_embedding" not in report.loaded
    position_embedding = model.patch_embed.position_embedding.numpy()
    assert np.abs(position_embedding - REFERENCE[f"{case}/pos_embed"]).max() < 1e-5
    assert_matches_timm(model, case)


def test_timms_own_reading_of_a_jax_npz_is_exact_gelu_and_bilinear():
    """timm's _load_weights at another resolution resamples bilinear without antialias (not
    its checkpoint_filter_fn's bicubic); resample="bilinear" reproduces it."""
    model = build("resample_up_npz")
    report = load_pretrained(model, fixture("timm_vit_cls.npz"), explicit={"gelu"}, resample="bilinear")
    assert report.resample_method == "bilinear" and report.resample_reason == "chosen explicitly"
    np.testing.assert_allclose(model.patch_embed.position_embedding.numpy(), REFERENCE["resample_up_npz/pos_embed"],
                               atol=1e-6)
    assert_matches_timm(model, "resample_up_npz")


def test_create_model_reads_pooling_and_class_count_from_a_timm_file():
    sizes = {key: value for key, value in CASES["timm_vit_avg"].items() if key not in ("pool", "num_classes")}
    model = create_model("vit_tiny_patch16_224", pretrained=fixture("timm_vit_avg.safetensors"), **sizes).eval()
    assert (model.config.pool, model.config.num_classes) == ("mean", 10)
    assert model.load_report.options["pool"][0] == "mean"
    assert_matches_timm(model, "timm_vit_avg")
    resampled = create_model("vit_tiny_patch16_224", pretrained=fixture("timm_vit_cls.safetensors"),
                             **dict(sizes, image_size=48))
    assert resampled.load_report.resample_method == "bicubic_antialias"
    assert "checkpoint_filter_fn" in resampled.load_report.resample_reason


def test_pos_embed_resample_preserves_class_token():
    table = load_file(fixture("timm_vit_cls.safetensors"))["pos_embed"]
    resampled = resample_position_embedding(table, (6, 6))
    assert resampled.shape == (1, 37, table.shape[-1])
    np.testing.assert_array_equal(resampled[:, 0], table[:, 0])


@pytest.mark.parametrize("tag", ["up", "down"])
def test_pos_embed_antialias_matters_and_matches_timm_either_way(tag):
    # the antialiased bicubic kernel (timm's default) is not the plain one, even when upsampling
    table = load_file(fixture("timm_vit_cls.safetensors"))["pos_embed"]
    grid = CASES[f"resample_{tag}"]["image_size"] // CASES[f"resample_{tag}"]["patch_size"]
    plain = resample_position_embedding(table, (grid, grid), antialias=False)
    assert np.abs(plain - REFERENCE[f"resample_{tag}/pos_embed_no_antialias"]).max() < 1e-5
    assert np.abs(plain - REFERENCE[f"resample_{tag}/pos_embed"]).max() > 1e-2


def test_pos_embed_without_class_row_is_an_error():
    state = load_file(fixture("timm_vit_cls.safetensors"))
    state["pos_embed"] = state["pos_embed"][:, 1:]  # 16 rows: a 4x4 grid and no class token
    with pytest.raises(WeightsError, match="class-token row"):
        load_pretrained(build("resample_up"), state)


# ---- heads -------------------------------------------------------------------------------------

def test_pre_logits_npz_matches_timm_features_through_pre_logits():
    model = build("jax_vit_prelogits")
    report = load_as_timm(model, fixture("jax_vit_prelogits.npz"))
    assert {"pre_logits.fc.weight", "pre_logits.fc.bias"} <= set(report.loaded)
    assert_matches_timm(model, "jax_vit_prelogits")


def test_pre_logits_dropped_when_fine_tuning_to_another_class_count():
    model = build("timm_vit_cls")  # 10 classes, the checkpoint's head 5
    report = load_as_timm(model, fixture("jax_vit_prelogits.npz"))
    assert sorted(report.ignored) == ["pre_logits/bias", "pre_logits/kernel"]
    assert report.reinitialized == ["head.weight", "head.bias"]
    reference = build("timm_vit_cls")
    load_as_timm(reference, fixture("timm_vit_cls.npz"))
    images = paddle.to_tensor(REFERENCE["timm_vit_cls/input"])
    with paddle.no_grad():  # same body as the timm fixture: same pooled features
        np.testing.assert_allclose(model.forward_head(model.forward_features(images), pre_logits=True).numpy(),
                                   reference.forward_head(reference.forward_features(images), pre_logits=True).numpy(),
                                   atol=1e-6)


def test_representation_size_without_checkpoint_pre_logits():
    with pytest.raises(WeightsError, match="missing pre_logits.fc.weight"):
        load_as_timm(build("timm_vit_cls", representation_size=24), fixture("timm_vit_cls.npz"))
    model = build("timm_vit_cls", representation_size=24)
    initial = model.pre_logits.fc.weight.numpy()
    report = load_as_timm(model, fixture("timm_vit_cls.npz"), strict=False)
    assert report.missing == ["pre_logits.fc.weight", "pre_logits.fc.bias"]
    np.testing.assert_array_equal(model.pre_logits.fc.weight.numpy(), initial)


@pytest.mark.parametrize("extension", ["safetensors", "npz"])
def test_head_reinitialised_to_zeros_on_class_count_mismatch(extension):
    model = build("timm_vit_cls", num_classes=3)
    report = load_as_timm(model, fixture(f"timm_vit_cls.{extension}"))
    assert report.reinitialized == ["head.weight", "head.bias"]
    assert "10 classes" in " ".join(report.notes) and "re-initialised" in str(report)
    assert not np.any(model.head.weight.numpy()) and not np.any(model.head.bias.numpy())
    assert np.all(logits(model, "timm_vit_cls") == 0.0)
    reference = build("timm_vit_cls")
    load_as_timm(reference, fixture(f"timm_vit_cls.{extension}"))
    images = paddle.to_tensor(REFERENCE["timm_vit_cls/input"])
    with paddle.no_grad():
        np.testing.assert_allclose(model.forward_features(images).numpy(),
                                   reference.forward_features(images).numpy(), atol=1e-6)


def test_headless_model_ignores_the_checkpoint_head():
    model = build("timm_vit_cls", num_classes=0)
    report = load_pretrained(model, fixture("timm_vit_cls.safetensors"))
    assert sorted(report.ignored) == ["head.bias", "head.weight"]


# ---- mismatches and broken files ---------------------------------------------------------------

def test_checkpoint_of_another_architecture_names_tensor_and_shapes():
    with pytest.raises(WeightsError) as caught:
        load_pretrained(build("timm_vit_cls"), fixture("timm_vit_p16.safetensors"))
    message = str(caught.value)
    assert "\n" not in message
    assert "cls_token" in message and "[1, 1, 48]" in message and "[1, 1, 32]" in message


def test_wrong_linear_shape_names_tensor_and_both_shapes():
    state = load_file(fixture("timm_vit_cls.safetensors"))
    state["blocks.1.mlp.fc1.weight"] = np.zeros((64, 32), "float32")  # mlp_ratio 2 instead of 4
    with pytest.raises(WeightsError, match=r"blocks\.1\.mlp\.fc1\.weight has shape \[32, 64\].*\[32, 128\]"):
        load_pretrained(build("timm_vit_cls"), state)


def test_pool_mismatch_is_an_error_with_a_hint():
    with pytest.raises(WeightsError, match="pool='mean'"):
        load_pretrained(build("timm_vit_cls"), fixture("timm_vit_avg.safetensors"))


def test_strict_missing_keys_raise_and_non_strict_keeps_init():
    state = {name: array for name, array in load_file(fixture("timm_vit_cls.safetensors")).items()
             if not name.startswith("blocks.1.mlp.")}
    with pytest.raises(WeightsError, match="missing encoder.layers.1.mlp.fc1.weight"):
        load_pretrained(build("timm_vit_cls"), state)
    model = build("timm_vit_cls")
    initial = model.encoder.layers[1].mlp.fc1.weight.numpy()
    report = load_pretrained(model, state, strict=False)
    assert sorted(report.missing) == sorted(f"encoder.layers.1.mlp.{fc}.{kind}"
                                            for fc in ("fc1", "fc2") for kind in ("weight", "bias"))
    assert "missing" in str(report)
    np.testing.assert_array_equal(model.encoder.layers[1].mlp.fc1.weight.numpy(), initial)


def test_strict_unexpected_keys_raise_and_non_strict_ignores():
    state = load_file(fixture("timm_vit_cls.safetensors"))
    state["blocks.0.ls1.gamma"] = np.ones(32, "float32")  # layer scale: a model this ViT is not
    with pytest.raises(WeightsError, match=r"unexpected blocks\.0\.ls1\.gamma"):
        load_pretrained(build("timm_vit_cls"), state)
    model = build("timm_vit_cls")
    report = load_pretrained(model, state, strict=False)
    assert report.ignored == ["blocks.0.ls1.gamma"]
    assert_matches_timm(model, "timm_vit_cls")


def test_unknown_naming_scheme_is_an_error():
    with pytest.raises(WeightsError, match="naming scheme"):
        load_pretrained(build("timm_vit_cls"), {"conv1.weight": np.zeros(3, "float32")})


def test_the_family_is_read_off_the_names_of_a_dict_of_arrays():
    def family(state):
        return detect_family(read_checkpoint(state)).name

    assert family(load_file(fixture("timm_vit_cls.safetensors"))) == "timm"
    assert family(dict(np.load(fixture("timm_vit_cls.npz")))) == "jax"
    assert family(build("timm_vit_cls").state_dict()) == "paddle-vit"


def test_missing_file_names_the_file(tmp_path):
    path = tmp_path / "nowhere.safetensors"
    with pytest.raises(WeightsError, match=f"{path}.*does not exist"):
        load_pretrained(build("timm_vit_cls"), str(path))


@pytest.mark.parametrize("extension", ["safetensors", "npz", "pdparams"])
def test_truncated_file_names_the_file(tmp_path, extension):
    if extension == "pdparams":
        original = tmp_path / "full.pdparams"
        save_weights(build("timm_vit_cls"), original)
        data = original.read_bytes()
    else:
        data = open(fixture(f"timm_vit_cls.{extension}"), "rb").read()
    truncated = tmp_path / f"truncated.{extension}"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError) as caught:
        load_pretrained(build("timm_vit_cls"), str(truncated))
    assert str(truncated) in str(caught.value) and "\n" not in str(caught.value)


def test_unknown_extension_and_directory(tmp_path):
    (tmp_path / "weights.h5").write_bytes(b"\0")
    with pytest.raises(WeightsError, match="unknown weights file type '.h5'"):
        load_pretrained(build("timm_vit_cls"), str(tmp_path / "weights.h5"))
    with pytest.raises(WeightsError, match="is a directory"):
        load_pretrained(build("timm_vit_cls"), str(tmp_path))


def test_bfloat16_safetensors_are_widened(tmp_path):
    # numpy has no bfloat16: write one by hand (bfloat16 = the top 16 bits of a float32)
    state = load_file(fixture("timm_vit_cls.safetensors"))
    header, chunks, offset = {}, [], 0
    for name, array in state.items():
        raw = (np.ascontiguousarray(array, "<f4").view("<u4") >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    model = build("timm_vit_cls")
    load_pretrained(model, str(path))
    expected = (state["blocks.0.attn.qkv.weight"].view("<u4") & 0xFFFF0000).view("<f4").T
    np.testing.assert_array_equal(model.encoder.layers[0].attn.qkv.weight.numpy(), expected)


def test_pth_needs_torch(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, installed or not
    path = tmp_path / "weights.pth"
    path.write_bytes(b"\0")
    with pytest.raises(WeightsError, match="needs PyTorch.*safetensors"):
        load_pretrained(build("timm_vit_cls"), str(path))


def test_pth_loads_when_torch_is_importable(tmp_path):
    torch = pytest.importorskip("torch", reason="reading .pth/.bin needs PyTorch, which is optional")
    state = {name: torch.from_numpy(array) for name, array in load_file(fixture("timm_vit_cls.safetensors")).items()}
    path = tmp_path / "weights.pth"
    torch.save({"state_dict": state, "epoch": 3}, path)
    model = build("timm_vit_cls")
    report = load_pretrained(model, str(path))
    assert report.format == "timm"
    assert_matches_timm(model, "timm_vit_cls")


# ---- values that are no weights ------------------------------------------------------------------

def rewritten(tmp_path, extension, damage):
    """The timm_vit_cls weights written again as a .npz (JAX layout), a .safetensors (timm's) or
    a .pdparams (this project's), each array passed through `damage(name, array)`."""
    path = tmp_path / f"damaged.{extension}"
    if extension == "npz":
        np.savez(path, **{name: damage(name, array) for name, array in np.load(fixture("timm_vit_cls.npz")).items()})
    elif extension == "safetensors":
        from safetensors.numpy import save_file
        save_file({name: damage(name, array) for name, array in load_file(fixture("timm_vit_cls.safetensors")).items()},
                  str(path))
    else:
        model = build("timm_vit_cls")
        load_as_timm(model, fixture("timm_vit_cls.safetensors"))
        paddle.save({name: paddle.to_tensor(damage(name, tensor.numpy())) for name, tensor in model.state_dict().items()},
                    str(path))
    return str(path)


def a_weight(extension):
    """A tensor of the timm_vit_cls weights in each file's own names, and how the message names it."""
    return {"npz": ("Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel",
                    "tensor Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel (the model's "
                    "encoder.layers.1.mlp.fc1.weight)"),
            "safetensors": ("blocks.1.mlp.fc1.weight", "tensor blocks.1.mlp.fc1.weight (the model's "
                                                        "encoder.layers.1.mlp.fc1.weight)"),
            "pdparams": ("encoder.layers.1.mlp.fc1.weight", "tensor encoder.layers.1.mlp.fc1.weight;")}[extension]


@pytest.mark.parametrize("extension", ["npz", "safetensors", "pdparams"])
def test_integer_weights_are_refused_naming_a_tensor_its_dtype_and_the_file(tmp_path, extension):
    """An integer copy of float weights used to be cast back silently: the model then computed
    with rounded weights (here all of them 0 or +-1) and classified at chance."""
    name, named = a_weight(extension)
    path = rewritten(tmp_path, extension, lambda key, array: array.astype(np.int64) if key == name else array)
    with pytest.raises(WeightsError) as caught:
        load_as_timm(build("timm_vit_cls"), path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {named.rstrip(';')} is int64;"), message
    assert "expected floating-point weights" in message and "more tensor" not in message
    (tmp_path / "all").mkdir()
    everything = rewritten(tmp_path / "all", extension, lambda key, array: array.astype(np.int32))
    with pytest.raises(WeightsError, match=r"is int32 \(and 31 more tensors like it\)"):  # 32 in all
        load_as_timm(build("timm_vit_cls"), everything)


@pytest.mark.parametrize("extension", ["npz", "safetensors", "pdparams"])
def test_nan_and_inf_weights_are_refused_naming_the_tensor_and_how_many(tmp_path, extension):
    name, named = a_weight(extension)

    def poison(key, array):
        if key != name:
            return array
        array = array.copy()
        array.flat[:3] = np.nan
        array.flat[10] = -np.inf
        return array

    with pytest.raises(WeightsError) as caught:
        load_as_timm(build("timm_vit_cls"), rewritten(tmp_path, extension, poison))
    message = str(caught.value)
    assert f"{named.rstrip(';')} holds 3 NaN and 1 Inf of its 4096 values; expected finite weights" in message


def test_a_float64_weight_beyond_float32_range_is_refused_not_made_inf(tmp_path):
    def huge(key, array):
        if key != "cls":
            return array
        array = array.astype(np.float64)
        array.flat[0] = 1e300
        return array

    with pytest.raises(WeightsError, match=r"tensor cls \(the model's patch_embed.class_token\) holds 1 beyond "
                                           r"float32's range of its 32 values"):
        load_as_timm(build("timm_vit_cls"), rewritten(tmp_path, "npz", huge))


def test_integer_or_nan_tensors_the_model_does_not_take_are_no_error(tmp_path):
    """Only what is loaded is checked: a head replaced for fine-tuning may hold anything."""
    def damaged_head(key, array):
        return np.full(array.shape, np.nan, array.dtype) if key.startswith("head/") else array

    model = build("timm_vit_cls", num_classes=3)
    report = load_as_timm(model, rewritten(tmp_path, "npz", damaged_head))
    assert report.reinitialized == ["head.weight", "head.bias"]
    assert all(np.isfinite(tensor.numpy()).all() for tensor in model.state_dict().values())


# ---- saving ------------------------------------------------------------------------------------

@pytest.mark.parametrize("extension", ["pdparams", "safetensors"])
def test_own_format_round_trip(tmp_path, extension):
    model = build("timm_vit_avg")
    load_pretrained(model, fixture("timm_vit_avg.safetensors"))
    path = tmp_path / f"ours.{extension}"
    assert save_weights(model, path) == str(path)
    assert os.listdir(tmp_path) == [path.name]  # the temporary file was renamed, none left over
    fresh = build("timm_vit_avg")
    report = load_pretrained(fresh, str(path))
    assert report.format == "paddle-vit" and sorted(report.loaded) == sorted(model_names("timm_vit_avg"))
    assert_matches_timm(fresh, "timm_vit_avg")
    if extension == "pdparams":  # plain Paddle reads it too
        assert set(paddle.load(str(path))) == set(model.state_dict())


def test_save_weights_replaces_an_existing_file(tmp_path):
    path = tmp_path / "ours.safetensors"
    path.write_bytes(b"old")
    save_weights({"a": np.ones(3, "float32")}, path)
    np.testing.assert_array_equal(load_file(str(path))["a"], np.ones(3, "float32"))


def test_report_is_a_few_readable_lines():
    report = load_pretrained(build("resample_up", num_classes=3), fixture("timm_vit_cls.safetensors"))
    assert isinstance(report, LoadReport)
    text = str(report)
    assert "timm naming" in text and "4x4 -> 6x6" in text and "head.weight" in text
    assert len(text.splitlines()) <= 6


# ---- tools/convert_weights.py ------------------------------------------------------------------

sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))
import convert_weights  # noqa: E402

TINY = ["--model", "vit_tiny_patch16_224", "-o", "image_size=32", "-o", "patch_size=8", "-o", "embed_dim=32",
        "-o", "depth=2", "-o", "num_heads=4", "-o", "num_classes=10"]


@pytest.mark.parametrize("source,extension", [("timm_vit_cls.npz", "pdparams"),
                                              ("timm_vit_cls.safetensors", "safetensors")])
def test_convert_weights_end_to_end(tmp_path, capsys, source, extension):
    out = tmp_path / f"converted.{extension}"
    as_timm = ["-o", "gelu=exact"] if source.endswith(".npz") else []  # the reference is timm's reading
    assert convert_weights.main([fixture(source), *TINY, *as_timm, "--out", str(out)]) == 0
    assert "loaded 32 tensors" in capsys.readouterr().out
    model = build("timm_vit_cls")
    load_pretrained(model, str(out))
    assert_matches_timm(model, "timm_vit_cls")


def test_convert_weights_resamples_with_an_override(tmp_path, capsys):
    out = tmp_path / "converted.pdparams"
    assert convert_weights.main(["--weights", fixture("timm_vit_cls.npz"), *TINY, "-o", "image_size=48",
                                 "-o", "gelu=exact", "--resample", "bicubic_antialias", "--out", str(out)]) == 0
    assert "4x4 -> 6x6" in capsys.readouterr().out
    model = build("resample_up")
    load_pretrained(model, str(out))
    assert_matches_timm(model, "resample_up")


def test_convert_weights_errors_exit_2(tmp_path, capsys):
    assert convert_weights.main([fixture("timm_vit_p16.npz"), *TINY, "--out", str(tmp_path / "x.pdparams")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert convert_weights.main([fixture("timm_vit_cls.npz"), *TINY, "-o", "depthh=2",
                                 "--out", str(tmp_path / "x.pdparams")]) == 2
    assert "depth" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.pdparams")


@pytest.mark.slow
def test_convert_weights_missing_file_subprocess(tmp_path):
    missing = tmp_path / "missing.npz"
    result = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "tools", "convert_weights.py"), str(missing),
                             "--model", "vit_tiny_patch16_224", "--out", str(tmp_path / "out.pdparams")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(missing) in lines[0], result.stderr
    assert "Traceback" not in result.stderr

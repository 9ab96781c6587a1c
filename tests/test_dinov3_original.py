"""Meta's own DINOv3 state dicts (facebookresearch/dinov3's `DinoVisionTransformer`, the `.pth`
files of its hub code) as a checkpoint family, against the outputs Meta's code computed for small
models of its own class (tests/fixtures/README.md, tests/fixtures/make/dinov3_original_fixtures.py).
torch is not needed: the tests read the `.safetensors` twin of each `.pth` (the same tensors under
the same names), except the one that reads the `.pth` where torch is installed.

The toy models: embed 32, 2 heads (head_dim 16), 2 blocks, 4 storage tokens, layer scale, the q/k/v
bias with its k third masked, 64 x 64 images; `dinov3_vits` with the plain MLP of the released
ViT-S/B/L, `dinov3_vitsplus` with the SwiGLU of ViT-S+/H+. The options (RoPE, its base, registers,
q/k/v layout, MLP kind, layer scale, epsilon, the class-token read) come from the file.
"""
import json
import os

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file, save_file

from paddle_vit import WeightsError, create_model, load_pretrained
from paddle_vit.weights import detect_family, read_checkpoint

from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOLERANCE = 1e-4  # absolute, on normed tokens of magnitude ~1-4
TOY = dict(embed_dim=32, depth=2, num_heads=2, image_size=64)
CASES = {"dinov3_vits": "vit_small_patch16_dinov3", "dinov3_vitsplus": "vit_small_plus_patch16_dinov3"}
REFERENCE = dict(np.load(os.path.join(FIXTURES, "dinov3_original_reference.npz")))
with open(os.path.join(FIXTURES, "dinov3_original_reference.json")) as _stream:
    RECORDED = json.load(_stream)["cases"]
SIZES = {"input": "", "input_48x80": "size_48x80/"}


def fixture(case, suffix=".safetensors"):
    return os.path.join(FIXTURES, "dinov3_original", case + suffix)


def create(case, pretrained=None, **overrides):
    return create_model(CASES[case], pretrained=pretrained or fixture(case), **dict(TOY, **overrides)).eval()


def differences(model, case):
    """{output: max |ours - Meta's|} at 64 x 64 (2 images) and 48 x 80 (a 3 x 5 grid)."""
    found = {}
    for key, size in SIZES.items():
        with paddle.no_grad():
            pixels = paddle.to_tensor(REFERENCE[key])
            tokens = model.forward_features(pixels).numpy()  # [B, 1 + 4 + N, D]
            output = model(pixels).numpy()  # [B, D]
        ours = {"forward": output, "x_norm_clstoken": tokens[:, 0], "x_storage_tokens": tokens[:, 1:5],
                "x_norm_patchtokens": tokens[:, 5:]}
        for name, value in ours.items():
            found[size + name] = float(np.abs(value - REFERENCE[f"{case}/{size}{name}"]).max())
    return found


def damaged(tmp_path, case, change):
    """The case's tensors with `change(arrays)` applied, saved to a new .safetensors."""
    arrays = load_file(fixture(case))
    change(arrays)
    path = str(tmp_path / "damaged.safetensors")
    save_file(arrays, path)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_meta_dinov3_state_dict_computes_meta_forward_features_at_both_sizes(case):
    model = create(case)
    found = differences(model, case)
    assert max(found.values()) < TOLERANCE, found
    assert model.load_report.format == "dinov3"


@pytest.mark.parametrize("case", sorted(CASES))
def test_meta_dinov3_file_implies_dinov3_rope_registers_and_the_class_token_read(case):
    model = create(case)
    config = model.config
    assert (config.rope_kind, config.rope_rotate_half, config.rope_temperature) == ("dinov3", True, 100.0)
    assert (config.register_tokens, config.layer_scale, config.position_embedding) == (4, 1e-5, "none")
    assert (config.pool, config.fc_norm, config.num_classes, config.layer_norm_epsilon) == ("cls", False, 0, 1e-5)
    assert (config.qkv, config.qkv_bias) == ("fused_qv_bias", True)
    assert config.mlp == {"dinov3_vits": "standard", "dinov3_vitsplus": "swiglu_split"}[case]
    assert sorted(model.load_report.ignored) == ["blocks.0.attn.qkv.bias_mask", "blocks.1.attn.qkv.bias_mask",
                                                 "mask_token", "rope_embed.periods"]


def test_meta_dinov3_names_are_detected_as_dinov3_not_timm():
    for case in CASES:
        checkpoint = read_checkpoint(fixture(case))
        assert detect_family(checkpoint).name == "dinov3"
        assert set(checkpoint.arrays) == set(RECORDED[case]["state_dict"])  # the names Meta's code saved


def test_meta_dinov3_swiglu_w1_is_the_gate_w2_the_value():
    """Swapping w1 and w2 (gate and value) moves the outputs: the mapping w1 -> fc1_g is checked."""
    model = create("dinov3_vitsplus")
    tensors = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    for layer in range(2):
        at = f"encoder.layers.{layer}.mlp."
        for role in ("weight", "bias"):
            tensors[at + f"fc1_g.{role}"], tensors[at + f"fc1_x.{role}"] = (tensors[at + f"fc1_x.{role}"],
                                                                            tensors[at + f"fc1_g.{role}"])
    model.set_state_dict({name: paddle.to_tensor(value) for name, value in tensors.items()})
    assert differences(model, "dinov3_vitsplus")["x_norm_patchtokens"] > 1e-2


def test_meta_dinov3_k_bias_is_dropped_only_when_masked_or_zero(tmp_path):
    """Meta's LinearKMaskedBias adds bias * bias_mask: the fixtures' k thirds are non-zero but masked
    (read, the outputs match); without the mask, a non-zero k bias is refused naming the tensor;
    an unmasked k third of zeros (as trained weights have) is read."""
    def unmask(arrays):
        arrays["blocks.1.attn.qkv.bias_mask"] = np.ones_like(arrays["blocks.1.attn.qkv.bias_mask"])

    with pytest.raises(WeightsError, match=r"blocks\.1\.attn\.qkv\.bias has a non-zero k part") as error:
        create("dinov3_vits", damaged(tmp_path, "dinov3_vits", unmask))
    assert "\n" not in str(error.value)

    def zero_k_without_mask(arrays):
        for layer in range(2):
            bias = arrays.pop(f"blocks.{layer}.attn.qkv.bias_mask")
            arrays[f"blocks.{layer}.attn.qkv.bias"] = arrays[f"blocks.{layer}.attn.qkv.bias"] * bias

    model = create("dinov3_vits", damaged(tmp_path, "dinov3_vits", zero_k_without_mask))
    assert max(differences(model, "dinov3_vits").values()) < TOLERANCE


def test_meta_dinov3_periods_of_another_base_are_refused_by_a_model_of_base_100(tmp_path):
    """The base comes from rope_embed.periods: a file of base 200 builds a model of base 200 by
    create_model, and a model of base 100 refuses it, naming the tensor; periods of no base
    (Meta's min_period / max_period) are refused whatever the model."""
    def base_200(arrays):
        arrays["rope_embed.periods"] = (200.0 ** (np.arange(4) / 4)).astype("float32")

    path = damaged(tmp_path, "dinov3_vits", base_200)
    assert create("dinov3_vits", path).config.rope_temperature == 200.0
    model = create_model("vit_small_patch16_dinov3_qkvb", pool="cls", **TOY)  # all but the base as the file
    with pytest.raises(WeightsError, match=r"rope_temperature=200.0 \(rope_embed\.periods") as error:
        load_pretrained(model, path)
    assert "\n" not in str(error.value)

    def min_max_periods(arrays):
        arrays["rope_embed.periods"] = np.array([0.5, 2.0, 8.0, 32.0], "float32")

    with pytest.raises(WeightsError, match=r"rope_embed\.periods = \[0\.5, 2\.0, 8\.0, 32\.0\] are not DINOv3's"):
        create("dinov3_vits", damaged(tmp_path, "dinov3_vits", min_max_periods))


def test_meta_dinov3_untied_class_norm_is_refused_by_key_and_local_class_norm_skipped(tmp_path):
    """cls_norm (untie_cls_and_patch_norms) changes the computation: refused in one line naming it;
    local_cls_norm (7B, satellite ViT-L) is used only in training on local crops: skipped."""
    def untie(arrays):
        arrays["cls_norm.weight"] = arrays["norm.weight"].copy()
        arrays["cls_norm.bias"] = arrays["norm.bias"].copy()

    with pytest.raises(WeightsError, match=r"cls_norm\.(bias|weight) is a norm of its own.*does not build") as error:
        create("dinov3_vits", damaged(tmp_path, "dinov3_vits", untie))
    assert "\n" not in str(error.value)

    def local(arrays):
        arrays["local_cls_norm.weight"] = arrays["norm.weight"] * 2
        arrays["local_cls_norm.bias"] = arrays["norm.bias"] + 1

    model = create("dinov3_vits", damaged(tmp_path, "dinov3_vits", local))
    assert "local_cls_norm.weight" in model.load_report.ignored
    assert max(differences(model, "dinov3_vits").values()) < TOLERANCE


def test_meta_dinov3_pth_matches_its_safetensors_twin_when_torch_is_installed():
    pytest.importorskip("torch", reason="reading .pth needs PyTorch, which is optional")
    model = create("dinov3_vits", fixture("dinov3_vits", ".pth"))
    assert max(differences(model, "dinov3_vits").values()) < TOLERANCE


def test_metas_file_goes_out_to_timm_for_a_model_of_any_size(tmp_path, capsys):
    """convert_weights --to timm of Meta's file under a DINOv3 name made small: the timm folder's
    pretrained_cfg takes the preprocessing's size (the name's default pipeline at the model's size),
    not a refusal for a model that takes any size."""
    from test_hub_folders import run_tool
    out = tmp_path / "timm"
    code, _, stderr = run_tool("convert_weights", [
        "--weights", os.path.join(FIXTURES, "dinov3_original", "dinov3_vits.safetensors"),
        "--model", "vit_small_patch16_dinov3_qkvb", "-o", "model.embed_dim=32", "-o", "model.num_heads=2",
        "-o", "model.depth=2", "-o", "model.image_size=64", "--out", str(out), "--to", "timm"], capsys)
    assert code == 0, stderr
    with open(out / "config.json") as stream:
        config = json.load(stream)
    assert config["architecture"] == "vit_small_patch16_dinov3_qkvb" and config["global_pool"] == "token"
    assert config["pretrained_cfg"]["input_size"] == [3, 64, 64]

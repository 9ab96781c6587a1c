"""timm Hub folders of the RoPE generation written by timm itself (`save_for_hf`, timm 1.0.31:
DINOv3 with and without q/v biases and with its aligned SwiGLU, EVA-02 (packed and split SwiGLU,
three projections, a norm inside attention, a non-square reference grid), EVA, the Perception
Encoder's core, spatial and language towers, RoPE-ViT's four kinds and timm's rope GAP model),
read with `create_model(pretrained=FOLDER)` and no name: every output timm recorded
(tests/fixtures/make/timm_rope_fixtures.py) reproduced within 1e-4 — the forward pass, the
features, the pooled features, `forward_intermediates`, the rotary tables, another input size
(the grid recomputed, EVA-02's reference-grid scaling), DINOv3 read by its class token, and image
files through the folder's own pretrained_cfg."""
import json
import os

import numpy as np
import paddle
import pytest

import paddle_vit

from photos import make_photos
from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
REFERENCE = np.load(os.path.join(FIXTURES, "timm_rope_reference.npz"))
with open(os.path.join(FIXTURES, "timm_rope_reference.json")) as _stream:
    CASES = {name: case for name, case in json.load(_stream)["cases"].items() if not name.startswith("_")}
TOLERANCE = 1e-4
FAST = {"vit_small_patch16_dinov3", "eva02_base_patch14_448", "vit_pe_core_tiny_patch16_384",
        "vit_small_patch16_rope_mixed_ape_224"}
ARCHITECTURES = [name if name in FAST else pytest.param(name, marks=pytest.mark.slow) for name in sorted(CASES)]
ROPE_ARCHITECTURES = [case for case in ARCHITECTURES if (case.values[0] if hasattr(case, "values") else case)
                      != "eva_giant_patch14_224"]


def folder_model(architecture, **overrides):
    folder = os.path.join(FIXTURES, CASES[architecture]["folder"])
    return paddle_vit.create_model(pretrained=folder, **overrides).eval()


def reference(architecture, key):
    return REFERENCE[f"{architecture}/{key}"]


def max_difference(ours, theirs):
    assert ours.shape == theirs.shape
    return float(np.abs(ours - theirs).max())


def run(model, key):
    with paddle.no_grad():
        return model(paddle.to_tensor(REFERENCE[key])).numpy()


def test_the_folders_cover_every_family_and_every_rope_kind():
    kinds = {case["rope"]["cls"] for case in CASES.values() if case.get("rope")}
    assert kinds == {"RotaryEmbeddingCat", "RotaryEmbeddingMixed", "RotaryEmbeddingDinoV3"}
    assert len(CASES) == 15


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_folder_builds_timms_architecture_and_computes_its_outputs(architecture):
    model = folder_model(architecture)
    x = paddle.to_tensor(REFERENCE["input"])
    with paddle.no_grad():
        features = model.forward_features(x)
        pooled = model.forward_head(features, pre_logits=True)
        output = model.forward_head(features)
    assert max_difference(features.numpy(), reference(architecture, "features")) < TOLERANCE
    assert max_difference(pooled.numpy(), reference(architecture, "pre_logits")) < TOLERANCE
    assert max_difference(output.numpy(), reference(architecture, "output")) < TOLERANCE


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_forward_intermediates_are_timms(architecture):
    model = folder_model(architecture)
    with paddle.no_grad():
        _, intermediates = model.forward_intermediates(paddle.to_tensor(REFERENCE["input"]), indices=2, norm=True,
                                                        output_fmt="NCHW", return_prefix_tokens=True)
    maps = np.stack([spatial.numpy() for spatial, _ in intermediates])  # [2 layers, B, D, h, w], as recorded
    assert max_difference(maps, reference(architecture, "intermediates_nchw")) < TOLERANCE
    if CASES[architecture]["num_prefix_tokens"]:
        prefix = np.stack([tokens.numpy() for _, tokens in intermediates])
        assert max_difference(prefix, reference(architecture, "intermediates_prefix")) < TOLERANCE


@pytest.mark.parametrize("architecture", ROPE_ARCHITECTURES)
def test_the_rotary_table_is_timms_at_the_built_and_at_other_grids(architecture):
    model = folder_model(architecture)
    case = CASES[architecture]
    for key, grid in (("rope/embed", case["grid"]), ("rope/embed_dynamic", case["dynamic_grid"]),
                      ("rope/embed_img_size", case["img_size_grid"])):
        table = model.rope(*grid)
        ours = np.concatenate([table.sin.numpy(), table.cos.numpy()], axis=-1)
        assert max_difference(ours, reference(architecture, key)) < 1e-5, key


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_another_input_size_recomputes_the_grid_as_timm(architecture):
    """timm's dynamic_img_size on a 40 x 24 input, and timm built at img_size (24, 48) with the
    folder's weights (position embedding resampled, rotary grid rebuilt): here both are the
    model with dynamic_img_size on that input."""
    model = folder_model(architecture, dynamic_img_size=True)
    assert max_difference(run(model, "dynamic_input"), reference(architecture, "dynamic_output")) < TOLERANCE
    assert max_difference(run(model, "img_size_input"), reference(architecture, "img_size_output")) < TOLERANCE


@pytest.mark.parametrize("architecture", ["vit_small_patch16_dinov3", "vit_small_patch16_dinov3_qkvb",
                                          "vit_huge_plus_patch16_dinov3"])
def test_dinov3_read_by_its_class_token_as_dinov3s_own_code_reads_it(architecture):
    model = folder_model(architecture, pool="cls")
    with paddle.no_grad():
        pooled = model.forward_head(model.forward_features(paddle.to_tensor(REFERENCE["input"])), pre_logits=True)
    assert max_difference(pooled.numpy(), reference(architecture, "token_pool/pre_logits")) < TOLERANCE


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_photos_through_the_folders_pretrained_cfg_give_timms_outputs(architecture, tmp_path):
    model = folder_model(architecture)
    paths = make_photos(str(tmp_path))
    assert list(paths)[:len(CASES[architecture]["photos"])] == CASES[architecture]["photos"]
    key = "logits" if model.num_classes else "features"
    for name in CASES[architecture]["photos"]:
        pixels = paddle.to_tensor(model.preprocess.read(paths[name])[None])
        with paddle.no_grad():
            out = model(pixels).numpy()[0]
        assert max_difference(out, reference(architecture, f"photo/{name}/{key}")) < TOLERANCE, name


@pytest.mark.parametrize("change, fragments", [
    ({"model_args.rope_type": "mrope"}, ["config.json: model_args.rope_type = 'mrope'", "RoPE types"]),
    ({"architecture": "naflexvit_base_patch16_gap"}, ["config.json: architecture naflexvit_base_patch16_gap",
                                                      "NaFlex"]),
    ({"architecture": "vit_base_patch16_sapiens2"}, ["grouped-query attention"]),
    ({"model_args.num_heads": 16}, ["config.json: model_args.", "heads 2 wide", "multiple of 4"]),
])
def test_a_folder_asking_for_what_is_not_built_is_one_error_line_naming_the_file_and_key(change, fragments, tmp_path,
                                                                                          capsys):
    """tools/predict.py on a DINOv3 folder whose config.json asks for a RoPE type with no class
    here, a NaFlex or Sapiens2 architecture, or heads too narrow for RoPE's pairs: exit 2, one line."""
    from test_failures_folders import edited
    from test_hub_folders import run_tool
    folder = edited(tmp_path, os.path.join(FIXTURES, CASES["vit_small_patch16_dinov3"]["folder"]), change)
    photo = next(iter(make_photos(str(tmp_path)).values()))
    code, _, stderr = run_tool("predict", ["--weights", folder, photo], capsys)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0]

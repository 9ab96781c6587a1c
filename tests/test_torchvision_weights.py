"""torchvision's own ViT (`torchvision.models.vit_b_16` ... `vit_h_14`) as a checkpoint family,
against the logits and the resampled position embedding torchvision computed for small models of
its own class (tests/fixtures/README.md, tests/fixtures/make/torchvision_fixtures.py).
Neither torch nor torchvision is needed, except by the one test that reads the `.pth` with torch.

The toy models are 32x32 images, 8x8 patches, D 32, depth 2, 4 heads, MLP 64, built through
`create_model(name, pretrained=...)`: the class count, the pre-logits layer, the epsilon, GELU,
q.k scale and pooling come from the file, not from the test.
"""
import json
import os
import sys
import types

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file

from paddle_vit import ViT, ViTConfig, WeightsError, create_model, load_pretrained
from paddle_vit.weights import detect_family, read_checkpoint

from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOLERANCE = 1e-4  # absolute, on logits of magnitude ~1-14
TOY = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2)
NAME = "vit_tiny_patch16_224"  # the registry's name; the toy sizes are overrides
REFERENCE = dict(np.load(os.path.join(FIXTURES, "torchvision_reference.npz")))
with open(os.path.join(FIXTURES, "torchvision_reference.json")) as _stream:
    CASES = json.load(_stream)["cases"]


def fixture(name):
    return os.path.join(FIXTURES, name)


def create(pretrained, **overrides):
    return create_model(NAME, pretrained=pretrained, **dict(TOY, **overrides)).eval()


def difference(model, case):
    with paddle.no_grad():
        logits = model(paddle.to_tensor(REFERENCE[f"{case}/input"])).numpy()
    return float(np.abs(logits - REFERENCE[f"{case}/logits"]).max())


@pytest.mark.parametrize("case", ["torchvision_vit", "torchvision_vit_prelogits"])
def test_torchvision_state_dict_matches_torchvisions_logits(case):
    model = create(fixture(CASES[case]["weights"]))
    report = model.load_report
    assert report.format == "torchvision"
    assert not (report.missing or report.reinitialized or report.ignored or report.resampled)
    assert model.config.num_classes == CASES[case]["num_classes"]
    assert model.config.representation_size == CASES[case]["representation_size"]  # heads.pre_logits + tanh
    assert (model.config.layer_norm_epsilon, model.config.gelu, model.config.qk_scale, model.config.pool) == \
        (1e-6, "exact", None, "cls")
    assert report.options["layer_norm_epsilon"][0] == 1e-6 and "torchvision" in report.options["layer_norm_epsilon"][1]
    assert model.class_names is None  # torchvision's state dicts carry none
    assert difference(model, case) < TOLERANCE


def test_torchvisions_epsilon_and_gelu_are_what_make_the_logits_match():
    """The fixture was made so that these choices show (its json records by how much): a model
    computed with Paddle's default epsilon or the tanh GELU misses torchvision's logits."""
    case = CASES["torchvision_vit"]
    assert min(case["epsilon_1e5_moves_logits_by"], case["tanh_gelu_moves_logits_by"]) > 1e-3
    for option, value, torchvisions in (("layer_norm_epsilon", 1e-5, 1e-6), ("gelu", "tanh", "exact")):
        model = create(fixture(case["weights"]), **{option: value})
        assert model.load_report.overridden[option][:2] == (value, torchvisions)
        assert difference(model, "torchvision_vit") > 10 * TOLERANCE, option


def test_a_model_contradicting_torchvisions_numerics_is_refused_naming_the_option():
    model = ViT(ViTConfig(**TOY, num_classes=10, layer_norm_epsilon=1e-5))
    with pytest.raises(WeightsError, match=r"layer_norm_epsilon=1e-06 \(torchvision's ViT"):
        load_pretrained(model, fixture("torchvision_vit.safetensors"))
    model = ViT(ViTConfig(**TOY, num_classes=10, pool="mean"))
    with pytest.raises(WeightsError, match="pool='cls'.*class token"):
        load_pretrained(model, fixture("torchvision_vit.safetensors"))


def test_torchvision_file_at_48_resamples_as_interpolate_embeddings():
    """torchvision's interpolate_embeddings (bicubic, align_corners=True) is the default for its
    files: the table and the logits of torchvision's model at 48 (224 -> 384 is the same
    arithmetic on a larger grid)."""
    case = "torchvision_vit_48"
    model = create(fixture(CASES[case]["weights"]), image_size=48)
    report = model.load_report
    assert report.resampled == [("patch_embed.position_embedding", (4, 4), (6, 6))]
    assert report.resample_method == "bicubic_align_corners" and "interpolate_embeddings" in report.resample_reason
    table, expected = model.patch_embed.position_embedding.numpy(), REFERENCE[f"{case}/pos_embedding"]
    scale = np.abs(expected).max()  # the embedding side is ~1e-4 (the fixture's epsilon check)
    assert np.abs(table - expected).max() < 1e-5 * scale
    assert difference(model, case) < TOLERANCE
    assert min(CASES[case]["bicubic_moves_logits_by"], CASES[case]["bicubic_antialias_moves_logits_by"]) > 1e-3
    other = create_model(NAME, pretrained=fixture(CASES[case]["weights"]), resample="bicubic",
                         **dict(TOY, image_size=48))
    assert np.abs(other.patch_embed.position_embedding.numpy() - expected).max() > 0.05 * scale
    assert difference(other.eval(), case) > 10 * TOLERANCE


def torchvision_state(name="torchvision_vit.safetensors"):
    return load_file(fixture(name))


def test_torchvision_mlp_names_before_0_14_load_to_the_same_logits():
    """Files saved before torchvision 0.14 name the MLP linear_1 / linear_2 (torchvision's
    MLPBlock renames them on load; the fixture generator checked that torchvision does)."""
    assert CASES["torchvision_vit"]["legacy_mlp_names_reload_max_diff"] == 0.0
    state = {name.replace(".mlp.0.", ".mlp.linear_1.").replace(".mlp.3.", ".mlp.linear_2."): array
             for name, array in torchvision_state().items()}
    assert "encoder.layers.encoder_layer_0.mlp.linear_1.weight" in state
    model = create(state)
    assert model.load_report.format == "torchvision" and not model.load_report.ignored
    assert difference(model, "torchvision_vit") < TOLERANCE
    both = dict(torchvision_state(), **{"encoder.layers.encoder_layer_1.mlp.linear_2.bias":
                                        state["encoder.layers.encoder_layer_1.mlp.linear_2.bias"]})
    with pytest.raises(WeightsError, match="both .*mlp.3.bias and .*mlp.linear_2.bias"):
        create(both)


def test_a_square_torchvision_matrix_transposed_by_mistake_changes_the_logits():
    name = "encoder.layers.encoder_layer_0.self_attention.out_proj.weight"
    state = torchvision_state()
    assert state[name].shape[0] == state[name].shape[1]
    model = create(dict(state, **{name: np.ascontiguousarray(state[name].T)}))
    assert model.load_report.format == "torchvision"
    assert difference(model, "torchvision_vit") > 100 * TOLERANCE


def test_a_torchvision_file_in_paddles_layout_or_with_a_conv_stem_is_refused_by_name():
    name = "encoder.layers.encoder_layer_1.self_attention.in_proj_weight"
    state = torchvision_state()
    with pytest.raises(WeightsError, match=r"in_proj_weight has shape \[32, 96\].*\[3 D, D\] = \[96, 32\]"):
        create(dict(state, **{name: np.ascontiguousarray(state[name].T)}))
    stem = {key: value for key, value in state.items() if not key.startswith("conv_proj.")}
    stem["conv_proj.conv_last.weight"] = np.zeros((32, 16, 1, 1), "float32")
    with pytest.raises(WeightsError, match="convolution stem.*conv_stem_configs"):
        create(stem)


def test_torchvision_pth_needs_torch_as_every_pth(monkeypatch):
    """A .pth is a pickle: it is read only by torch.load(weights_only=True), as every .pth is."""
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, installed or not
    with pytest.raises(WeightsError, match="needs PyTorch.*safetensors"):
        create(fixture("torchvision_vit.pth"))


def test_torchvision_pth_is_read_by_torch_load_with_weights_only(monkeypatch):
    """Whatever torch is installed: the .pth goes to torch.load with weights_only=True on the
    CPU (a stand-in torch records the call and gives the file's tensors)."""
    calls = []

    def load(path, **options):
        calls.append((os.path.basename(path), options))
        return torchvision_state()

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(load=load))
    model = create(fixture("torchvision_vit.pth"))
    assert calls == [("torchvision_vit.pth", {"map_location": "cpu", "weights_only": True})]
    assert model.load_report.format == "torchvision" and difference(model, "torchvision_vit") < TOLERANCE


def test_torchvision_pth_matches_its_safetensors_twin_when_torch_is_installed():
    pytest.importorskip("torch", reason="reading .pth needs PyTorch, which is optional")
    model = create(fixture("torchvision_vit.pth"))
    assert model.load_report.format == "torchvision"
    assert difference(model, "torchvision_vit") < TOLERANCE


def test_torchvision_files_are_detected_as_torchvision_and_imply_its_preprocessing():
    for name in ("torchvision_vit.safetensors", "torchvision_vit_prelogits.safetensors"):
        assert detect_family(read_checkpoint(load_file(fixture(name)))).name == "torchvision"
    checkpoint = read_checkpoint(fixture("torchvision_vit.safetensors"))
    assert detect_family(checkpoint).preprocessing(checkpoint) == {"pipeline": "torchvision"}

"""Publishing to timm and transformers: `paddle_vit.weights.save_pretrained(model, DIR, "timm")`
and ``tools/convert_weights.py --to timm`` write a timm Hub folder that timm itself loads and
computes the same numbers with; ``"huggingface"`` / ``--to huggingface`` a folder for transformers'
ViTForImageClassification.

The references are the libraries' own (tests/fixtures/make/publish_fixtures.py): each case's
folder, written by this project (tests/fixtures/publish/<case>/), read back by
``timm.create_model("local-dir:...", pretrained=True)`` (strict) or
``ViTForImageClassification.from_pretrained`` (no key missing or left over), its logits for a
fixed batch and for the photos (tests/photos.py) fed through timm's resolve_data_config +
create_transform (transformers' AutoImageProcessor, PIL backend). Writing each case again here
gives the same files, so the recorded reading applies to what is written today.
"""
import dataclasses
import json
import os
import sys

import numpy as np
import paddle
import pytest
import yaml
from safetensors.numpy import load_file

from paddle_vit import ViT, WeightsError, create_model
from paddle_vit.checkpoint import save_checkpoint
from paddle_vit.cli import convert_weights
from paddle_vit.config import load_config
from paddle_vit.weights import publish, save_pretrained, save_weights

from photos import make_photos
from repo_paths import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "fixtures", "make"))
import publish_fixtures  # noqa: E402  (numpy and the standard library at import)

FIXTURES = os.path.join(REPO, "tests", "fixtures")
RECORDED = os.path.join(FIXTURES, "publish")
REFERENCE = dict(np.load(os.path.join(FIXTURES, "publish_reference.npz")))
with open(os.path.join(FIXTURES, "publish_reference.json")) as _stream:
    TIMM = json.load(_stream)["cases"]
CASES = sorted(publish_fixtures.CASES)
TOLERANCE = 1e-4
TOY = dict(image_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=4, num_classes=3)
HF_TOY = publish_fixtures.HF_TOY
# today's families to their transformers class: (class, its image processor (PIL), the output compared)
FAMILY_CASES = {
    "hf_dinov2": ("Dinov2Model", "BitImageProcessorPil", "pooler_output"),
    "hf_dinov2_swiglu": ("Dinov2Model", "BitImageProcessorPil", "pooler_output"),
    "hf_dinov2_reg4": ("Dinov2WithRegistersModel", "BitImageProcessorPil", "pooler_output"),
    "hf_clip_projection": ("CLIPVisionModelWithProjection", "CLIPImageProcessorPil", "image_embeds"),
    "hf_clip_gelu": ("CLIPVisionModel", "CLIPImageProcessorPil", "pooler_output"),
    "hf_siglip": ("SiglipVisionModel", "SiglipImageProcessorPil", "pooler_output"),
    "hf_deit_distilled": ("DeiTForImageClassificationWithTeacher", "DeiTImageProcessorPil", "logits"),
}
PIXEL_TOLERANCE = 1e-5


def logits(model, images):
    with paddle.no_grad():
        return model.eval()(paddle.to_tensor(np.ascontiguousarray(images, dtype=np.float32))).numpy()


@pytest.fixture(scope="module")
def built():
    return {case: publish_fixtures.build_case(case) for case in CASES}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_photos(str(tmp_path_factory.mktemp("photos")))


def read_folder(folder):
    with open(os.path.join(folder, "config.json")) as stream:
        config = json.load(stream)
    return config, load_file(os.path.join(folder, "model.safetensors"))


def test_every_case_was_read_by_its_library():
    assert sorted(TIMM) == CASES
    assert TIMM["walkthrough"]["global_pool"] == "avg" and TIMM["deit_distilled"]["class"] == \
        "VisionTransformerDistilled"
    assert {TIMM[case]["processor"] for case in ("hf_vit", "hf_tanh_bit", "hf_deit_processor")} == {
        "ViTImageProcessorPil", "BitImageProcessorPil", "DeiTImageProcessorPil"}
    assert {case: (TIMM[case]["class"], TIMM[case]["processor"], TIMM[case]["output"])
            for case in FAMILY_CASES} == FAMILY_CASES


@pytest.mark.parametrize("case", CASES)
def test_writing_again_gives_the_folder_its_library_read(case, built, tmp_path):
    model, kwargs = built[case]
    folder = save_pretrained(model, tmp_path / case, **kwargs)
    config, tensors = read_folder(folder)
    recorded_config, recorded = read_folder(os.path.join(RECORDED, case))
    assert config == recorded_config
    assert sorted(tensors) == sorted(recorded)
    for name, array in tensors.items():
        assert array.dtype == recorded[name].dtype and np.array_equal(array, recorded[name]), name
    assert sorted(os.listdir(folder)) == sorted(os.listdir(os.path.join(RECORDED, case)))
    for name in ("README.md", "preprocessor_config.json"):
        if os.path.exists(os.path.join(folder, name)):
            with open(os.path.join(folder, name)) as mine, open(os.path.join(RECORDED, case, name)) as theirs:
                assert mine.read() == theirs.read()
    assert sorted(os.listdir(tmp_path)) == [case]  # no temporary folder left beside it


@pytest.mark.parametrize("case", CASES)
def test_the_published_model_computes_its_librarys_logits(case, built):
    model, _ = built[case]
    ours = logits(model, REFERENCE[f"{case}/input"])
    assert np.abs(ours - REFERENCE[f"{case}/logits"]).max() < TOLERANCE
    if not case.startswith("hf_"):  # a timm folder read by transformers' TimmWrapper too
        assert np.abs(ours - REFERENCE[f"{case}/transformers_logits"]).max() < TOLERANCE


@pytest.mark.parametrize("case", CASES)
def test_the_folder_read_back_gives_its_librarys_logits_and_preprocessing(case, photos):
    """paddle-vit reads the published folder as timm (transformers) does: the model, and the photos
    through the folder's pretrained_cfg (preprocessor_config.json) as model.preprocess to the
    library's logits."""
    model = create_model(pretrained=os.path.join(RECORDED, case)).eval()
    assert np.abs(logits(model, REFERENCE[f"{case}/input"]) - REFERENCE[f"{case}/logits"]).max() < TOLERANCE
    batch = np.stack([model.preprocess.read(photos[name]) for name in TIMM[case]["photos"]])
    if case in FAMILY_CASES:  # the family's image processor's pixels, as paddle-vit reads preprocessor_config.json
        pixels = np.stack([REFERENCE[f"{case}/photo/{name}/pixels"] for name in TIMM[case]["photos"]])
        assert np.abs(batch - pixels).max() < PIXEL_TOLERANCE
    expected = np.stack([REFERENCE[f"{case}/photo/{name}/logits"] for name in TIMM[case]["photos"]])
    assert np.abs(logits(model, batch) - expected).max() < TOLERANCE
    if case == "trained_run":
        assert model.class_names == publish_fixtures.CLASS_NAMES


def test_the_walkthrough_pool_and_the_hybrid_go_out_under_timms_names():
    config, tensors = read_folder(os.path.join(RECORDED, "walkthrough"))
    assert config["global_pool"] == "avg" and config["model_args"]["pool_include_prefix"] is True
    assert config["model_args"]["fc_norm"] is False
    _, tensors = read_folder(os.path.join(RECORDED, "hybrid_stem"))
    assert "patch_embed.backbone.conv.weight" in tensors and "cls_token" in tensors
    assert tensors["blocks.0.mlp.fc1.weight"].shape == (128, 32)  # PyTorch's [out, in]


def test_the_model_card_names_the_run():
    with open(os.path.join(RECORDED, "trained_run", "README.md")) as stream:
        card = stream.read()
    assert "best validation top-1 80.00%" in card and 'timm.create_model("local-dir:' in card


def test_the_families_go_out_under_their_transformers_names():
    """DINOv2 with registers: the class token's position row (folded into our class token) goes
    back as a zero row; CLIP's class embedding, its projection without bias; SigLIP's q | k | v
    of the MAP head as nn.MultiheadAttention's in_proj; the distilled DeiT's two classifiers."""
    model, _ = publish_fixtures.build_case("hf_dinov2_reg4")
    state = {name: value.numpy() for name, value in model.state_dict().items()}
    config, tensors = read_folder(os.path.join(RECORDED, "hf_dinov2_reg4"))
    assert config["num_register_tokens"] == 4 and config["model_type"] == "dinov2_with_registers"
    positions = tensors["embeddings.position_embeddings"]
    assert positions.shape == (1, 17, 16) and not positions[:, 0].any()
    assert np.array_equal(positions[:, 1:], state["patch_embed.position_embedding"])
    assert np.array_equal(tensors["embeddings.cls_token"], state["patch_embed.class_token"])
    config, tensors = read_folder(os.path.join(RECORDED, "hf_dinov2_swiglu"))
    assert config["use_swiglu_ffn"] is True and config["mlp_ratio"] == 1
    assert tensors["encoder.layer.0.mlp.weights_in.weight"].shape == (32, 16)
    config, tensors = read_folder(os.path.join(RECORDED, "hf_clip_projection"))
    assert config["projection_dim"] == 8 and config["hidden_act"] == "quick_gelu"
    assert tensors["visual_projection.weight"].shape == (8, 16) and "vision_model.embeddings.class_embedding" in tensors
    config, tensors = read_folder(os.path.join(RECORDED, "hf_siglip"))
    assert config["hidden_act"] == "gelu" and tensors["head.attention.in_proj_weight"].shape == (48, 16)
    config, tensors = read_folder(os.path.join(RECORDED, "hf_deit_distilled"))
    assert list(config["id2label"].values()) == publish_fixtures.CLASS_NAMES
    assert {"cls_classifier.weight", "distillation_classifier.weight"} <= set(tensors)


@pytest.mark.parametrize("name, overrides, preprocess, fragments", [
    ("vit_small_patch14_dinov2", dict(num_classes=5), None, ["Dinov2Model cannot compute",
                                                             "Dinov2ForImageClassification"]),
    ("vit_small_patch14_reg4_dinov2", dict(num_classes=0, no_embed_class=False), None,
     ["Dinov2WithRegistersModel cannot compute", "no_embed_class"]),
    ("vit_giant_patch14_dinov2", dict(num_classes=0, mlp_ratio=5.33334), None, ["Dinov2SwiGLUFFN"]),
    ("vit_base_patch16_clip_224", dict(num_classes=4), None, ["CLIPVisionModelWithProjection cannot compute",
                                                              "no bias"]),
    ("vit_base_patch16_siglip_224", dict(num_classes=0), None, ["SiglipImageProcessor", "crop"]),
    ("vit_base_patch16_siglip_224", dict(num_classes=3), None, ["SiglipVisionModel cannot compute"]),
    ("deit_small_distilled_patch16_224", dict(num_classes=3), None, ["DeiTImageProcessor", "'shorter_side'"]),
])
def test_what_a_family_class_cannot_compute_is_one_error_naming_timm(name, overrides, preprocess, fragments,
                                                                     tmp_path):
    model = create_model(name, **dict(HF_TOY, **overrides))
    if name == "vit_base_patch16_clip_224":  # a classifier head: its bias is not zero
        state = model.state_dict()
        state["head.bias"] = paddle.ones_like(state["head.bias"])
        model.set_state_dict(state)
    with pytest.raises(WeightsError) as error:
        save_pretrained(model, tmp_path / "out", format="huggingface", name=name)
    message = str(error.value)
    assert "\n" not in message and "--to timm" in message
    for fragment in fragments:
        assert fragment in message, message
    assert not os.listdir(tmp_path)


def test_the_cli_publishes_a_dinov2_folder_for_transformers(tmp_path):
    source = os.path.join(FIXTURES, "timm_modern", "vit_small_patch14_dinov2")
    out = tmp_path / "dinov2"
    assert convert_weights.main(["--weights", source, "--out", str(out), "--to", "huggingface"]) == 0
    config, tensors = read_folder(out)
    assert config["architectures"] == ["Dinov2Model"] and "encoder.layer.1.layer_scale2.lambda1" in tensors
    with open(out / "preprocessor_config.json") as stream:
        assert json.load(stream)["image_processor_type"] == "BitImageProcessor"
    assert "Dinov2Model.from_pretrained" in (out / "README.md").read_text()
    model, again = create_model(pretrained=source), create_model(pretrained=str(out))
    x = np.random.default_rng(0).standard_normal((1, 3, 42, 42)).astype("float32")
    assert np.abs(logits(again, x) - logits(model, x)).max() < 1e-6


# ---- refusals -------------------------------------------------------------------------------------

def one_error_line(code, err, *fragments):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_a_model_timm_cannot_express_is_one_error_naming_why(tmp_path):
    model = ViT(**TOY, position_embedding="sincos_2d", qk_scale=0.5)
    with pytest.raises(WeightsError, match=r"timm cannot express.*position_embedding 'sincos_2d'.*qk_scale 0.5"):
        save_pretrained(model, tmp_path / "out")
    assert not os.listdir(tmp_path)
    model = ViT(**TOY, layer_norm_epsilon=1e-12)
    with pytest.raises(WeightsError, match="layer_norm_epsilon 1e-12"):
        save_pretrained(model, tmp_path / "out")


def test_the_cli_refuses_in_one_line(tmp_path, capsys):
    source = str(tmp_path / "sincos.safetensors")
    save_weights(ViT(**TOY, position_embedding="sincos_2d"), source)
    sizes = [argument for key, value in TOY.items() for argument in ("-o", f"{key}={value}")]
    code = convert_weights.main(["--weights", source, "--model", "vit_tiny_patch16_224", *sizes, "--out",
                                 str(tmp_path / "out"), "--to", "timm"])
    one_error_line(code, capsys.readouterr().err, "timm cannot express", "sincos_2d")
    assert not os.path.exists(tmp_path / "out")
    code = convert_weights.main(["--weights", source, "--model", "vit_tiny_patch16_224", *sizes, "--out",
                                 str(tmp_path / "hf"), "--to", "huggingface"])
    one_error_line(code, capsys.readouterr().err, "ViTForImageClassification cannot compute", "sincos_2d",
                   "--to timm")
    assert not os.path.exists(tmp_path / "hf")
    code = convert_weights.main(["--weights", os.path.join(RECORDED, "walkthrough"), "--out", str(tmp_path / "hf"),
                                 "--to", "huggingface"])
    one_error_line(code, capsys.readouterr().err, "pool 'walkthrough' (it reads the class token", "--to timm")
    folder = os.path.join(RECORDED, "plain_mean")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    code = convert_weights.main(["--weights", folder, "--out", str(tmp_path / "full"), "--to", "timm"])
    one_error_line(code, capsys.readouterr().err, "not empty", "--overwrite")
    assert os.listdir(tmp_path / "full") == ["keep.txt"]
    code = convert_weights.main(["--weights", folder, "--out", str(tmp_path / "model.safetensors"), "--to", "timm"])
    one_error_line(code, capsys.readouterr().err, "writes a folder", f"--out {tmp_path / 'model'}")
    assert not (tmp_path / "model.safetensors").exists()


def test_the_cli_publishes_a_folder_and_overwrites_only_when_asked(tmp_path, capsys):
    folder = os.path.join(RECORDED, "trained_run")
    out = tmp_path / "out"
    out.mkdir()  # an empty folder is fine
    assert convert_weights.main(["--weights", folder, "--out", str(out), "--to", "timm"]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert {name: os.stat(out / name).st_mode & 0o777 for name in os.listdir(out)} == {
        name: 0o666 & ~umask for name in ("config.json", "model.safetensors", "README.md")}  # safetensors' 0600 too
    config, tensors = read_folder(out)
    recorded_config, recorded = read_folder(folder)
    assert config["architecture"] == "vit_tiny_patch16_224" and config["label_names"] == recorded_config["label_names"]
    assert config["pretrained_cfg"] == recorded_config["pretrained_cfg"]
    assert all(np.array_equal(tensors[name], recorded[name]) for name in recorded)
    assert convert_weights.main(["--weights", folder, "--out", str(out), "--to", "timm", "--overwrite"]) == 0
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch, built):
    model, kwargs = built["plain_mean"]

    def fail(path, card):  # after model.safetensors and config.json were written
        assert os.path.isfile(os.path.join(os.path.dirname(path), "config.json"))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(publish, "_write_card", fail)
    with pytest.raises(WeightsError, match="No space left on device"):
        save_pretrained(model, tmp_path / "new", **kwargs)
    assert os.listdir(tmp_path) == []
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "keep.txt").write_text("mine")
    with pytest.raises(WeightsError):
        save_pretrained(model, tmp_path / "old", overwrite=True, **kwargs)
    assert os.listdir(tmp_path) == ["old"] and os.listdir(tmp_path / "old") == ["keep.txt"]

    def interrupted(path, card):
        raise KeyboardInterrupt

    monkeypatch.setattr(publish, "_write_card", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_pretrained(model, tmp_path / "new", **kwargs)
    assert os.listdir(tmp_path) == ["old"]


def test_a_training_run_checkpoint_goes_out_with_its_recipe_classes_and_best_top1(tmp_path, capsys):
    """A run's .pdckpt: the recipe names the model and its preprocessing, the checkpoint its class
    names, metrics.jsonl the best validation top-1 for the model card."""
    model, _ = publish_fixtures.build_case("trained_run")
    run = tmp_path / "runs" / "run-001"
    (run / "checkpoints").mkdir(parents=True)
    recipe = load_config(data={"model": {"name": "vit_tiny_patch16_224", **TOY, "num_classes": 5},
                               "data": {"eval_crop_pct": 1.0, "interpolation": "bilinear", "dataset": "digits"},
                               "train": {"epochs": 2}})
    (run / "config.yaml").write_text(yaml.safe_dump(recipe.to_dict()))
    (run / "metrics.jsonl").write_text('{"epoch": 1, "val_top1": 0.4}\n{"epoch": 2, "val_top1": 0.625}\n')
    save_checkpoint({"model": model.state_dict(), "model_config": dataclasses.asdict(model.config),
                     "config": recipe.to_dict(), "class_names": publish_fixtures.CLASS_NAMES},
                    str(run / "checkpoints" / "last.pdckpt"))
    out = tmp_path / "published"
    capsys.readouterr()
    assert convert_weights.main(["--weights", str(run / "checkpoints" / "last.pdckpt"), "--out", str(out),
                                 "--to", "timm"]) == 0
    # the recipe's preprocessing is not quite timm's: one "warning:" line, not a log record in Paddle's format
    warnings = capsys.readouterr().err.splitlines()
    assert warnings and all(line.startswith("warning: preprocessing: ") for line in warnings), warnings
    config, _ = read_folder(out)
    assert config["label_names"] == publish_fixtures.CLASS_NAMES
    assert config["pretrained_cfg"]["interpolation"] == "bilinear" and config["pretrained_cfg"]["crop_mode"] == "squash"
    card = (out / "README.md").read_text()
    assert "best validation top-1 62.50%" in card and "2 epochs" in card
    again = create_model(pretrained=str(out))
    x = REFERENCE["trained_run/input"]
    assert np.abs(logits(again, x) - logits(model, x)).max() < 1e-6


def test_a_map_head_beside_prefix_tokens_reads_the_patch_tokens_as_timms(tmp_path):
    """timm's MAP head reads the patch tokens only unless pool_include_prefix (timm 1.0.31's
    VisionTransformer.pool); so does this ViT's: such a model goes out without the flag and comes
    back the same, and a folder asking for the prefix tokens in the pool is read as asking for them."""
    model = create_model("vit_base_patch16_siglip_224", **dict(TOY, class_token=True, register_tokens=2))
    folder = save_pretrained(model, tmp_path / "map", name="vit_base_patch16_siglip_224")
    config, _ = read_folder(folder)
    assert config["global_pool"] == "map" and "pool_include_prefix" not in config["model_args"]
    again = create_model(pretrained=folder)
    x = REFERENCE["plain_mean/input"]
    assert again.config.pool == "map" and np.abs(logits(again, x) - logits(model, x)).max() < 1e-6
    config["model_args"]["pool_include_prefix"] = True
    with open(os.path.join(folder, "config.json"), "w") as stream:
        json.dump(config, stream)
    prefix_too = create_model(pretrained=folder)
    assert prefix_too.config.pool == "map" and prefix_too.config.pool_include_prefix
    assert np.abs(logits(prefix_too, x) - logits(model, x)).max() > 1e-5  # the class token and registers weigh in


@pytest.mark.parametrize("name, overrides", [
    ("vit_base_patch16_224", dict(final_norm=False)),  # model_args.final_norm = False
    ("vit_base_patch16_224", dict(norm="rmsnorm")),  # model_args.norm_layer = 'rmsnorm'
    ("vit_base_patch16_siglip_224", dict(class_token=True, pool_include_prefix=True)),  # map over every token
    ("vit_base_patch16_gap_224", dict(pool_include_prefix=True)),  # avg over every token, then fc_norm
    ("vit_base_patch16_224", dict(attention_norm=True, mlp_norm=True)),  # BEiT-3's block under another name
    ("aimv2_large_patch14_224", dict(patch_size=8)),
    ("beit3_base_patch16_224", dict(patch_size=8)),
    ("vit_base_patch16_radio_v3", dict(patch_size=8, num_classes=3)),
])
def test_what_the_timm_writer_writes_the_folder_reader_reads_back_to_the_same_outputs(tmp_path, name, overrides):
    """save_pretrained's model_args (final_norm, norm_layer, pool_include_prefix, ...) and the AIMv2,
    BEiT-3 and C-RADIO architectures: create_model(pretrained=FOLDER), no name, builds the same model."""
    paddle.seed(3)
    model = create_model(name, **{**TOY, **overrides}).eval()
    with paddle.no_grad():
        for parameter in model.parameters():  # off the initial values: unit norms and zero biases hide mistakes
            parameter.set_value(parameter + paddle.randn(parameter.shape) * 0.1)
    folder = save_pretrained(model, tmp_path / "out", name=name)
    again = create_model(pretrained=folder).eval()
    differing = {field: (getattr(model.config, field), getattr(again.config, field))
                 for field in model.config.field_names()
                 if getattr(model.config, field) != getattr(again.config, field) and field != "fused_attention"}
    assert not differing
    x = REFERENCE["plain_mean/input"]
    assert np.abs(logits(again, x) - logits(model, x)).max() < 1e-6


@pytest.mark.parametrize("weights, name, backbone_layers", [("timm_hybrid_stage", "vit_base_r50_s16_224", [1]),
                                                            ("timm_hybrid_stem", "vit_tiny_r_s16_p8_224", [])])
def test_a_hybrids_tensors_go_out_under_the_names_and_layout_timm_saved_them_with(weights, name, backbone_layers):
    """The hybrids' ResNet-v2 stages: the file timm itself wrote (tests/fixtures/timm_hybrid_*),
    read here and written back by the timm writer, is the same file, name for name, value for
    value (a full R26/R50 folder is too large for a fixture; its names are these)."""
    from paddle_vit.weights.publish_timm import timm_tensors
    path = os.path.join(FIXTURES, f"{weights}.safetensors")
    model = create_model(name, pretrained=path, embed_dim=32, depth=2, num_heads=4, image_size=32, patch_size=2,
                         mlp_ratio=4, backbone_layers=backbone_layers)
    original, written = load_file(path), timm_tensors(model, model.config)
    assert sorted(written) == sorted(original)
    for key, array in original.items():
        np.testing.assert_array_equal(written[key], array, err_msg=key)

"""Today's ViTs (DeiT III, distilled DeiT, DINOv2 with and without registers, CLIP, SigLIP, timm's
average-pooled ViTs): every name timm 1.0.31 registers in these families is built here with timm's
parameter count and architecture, against what timm itself recorded
(tests/fixtures/timm_modern_registry.json, tests/fixtures/make/timm_modern_fixtures.py)."""
import json
import os
import shutil

import numpy as np
import paddle
import pytest

from paddle_vit import ConfigError, ViT, create_model, list_models
from paddle_vit.models import get_model_config
from paddle_vit.models.registry import NOT_BUILT as REFUSED
from paddle_vit.preprocess.timm import timm_eval_config

from photos import make_photos
from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
with open(os.path.join(FIXTURES, "timm_modern_registry.json")) as _stream:
    TIMM = json.load(_stream)["models"]
# timm names of these families that are not a plain VisionTransformer of Blocks (differential
# attention "d", parallel blocks "p"): the library's list of names refused by key
NOT_BUILT = set(REFUSED) & set(TIMM)
BUILT = sorted(name for name, facts in TIMM.items() if name not in NOT_BUILT)
# one of each family in the fast loop; every name in the full suite
FAST = {"deit3_small_patch16_224", "deit_tiny_distilled_patch16_224", "vit_small_patch14_reg4_dinov2",
        "vit_base_patch16_clip_quickgelu_224", "vit_base_patch16_siglip_224", "vit_medium_patch16_gap_256",
        "vit_so150m2_patch16_reg1_gap_256", "vit_so400m_patch14_siglip_384"}
GELUS = {("GELU", "none"): "exact", ("GELUTanh", None): "tanh", ("GELU", "tanh"): "tanh", ("QuickGELU", None): "quick",
         ("SiLU", None): "swiglu"}


def lazy_model(name):
    with paddle.LazyGuard():  # shapes without initialising a billion numbers
        return ViT(get_model_config(name))


def test_every_timm_name_of_the_families_is_registered_or_named_as_not_built():
    assert len(TIMM) >= 100
    assert NOT_BUILT == {"vit_dwee_patch16_reg1_gap_256", "vit_dlittle_patch16_reg1_gap_256",
                         "vit_dpwee_patch16_reg1_gap_256", "vit_pwee_patch16_reg1_gap_256"}
    assert [name for name in BUILT if name not in list_models()] == []


@pytest.mark.parametrize("name", [name if name in FAST else pytest.param(name, marks=pytest.mark.slow)
                                  for name in BUILT])
def test_parameter_count_and_architecture_match_timm(name):
    facts, model = TIMM[name], lazy_model(name)
    config = model.config
    assert sum(int(np.prod(p.shape)) for p in model.parameters()) == facts["param_count"]
    assert [config.image_size] * 2 == facts["img_size"] and [config.patch_size] * 2 == facts["patch_size"]
    assert (config.embed_dim, config.depth, config.num_heads, config.num_classes) == (
        facts["embed_dim"], facts["depth"], facts["num_heads"], facts["num_classes"])
    assert config.class_token == facts["has_class_token"] and config.register_tokens == facts["reg_tokens"]
    assert config.num_prefix_tokens == facts["num_prefix_tokens"] and config.no_embed_class == facts["no_embed_class"]
    assert list(model.patch_embed.position_embedding.shape) == facts["pos_embed"]
    assert config.pre_norm == facts["norm_pre_is_layernorm"] and config.qkv_bias == facts["qkv_bias"]
    assert config.layer_norm_epsilon == facts["norm1"]["eps"]
    assert (config.layer_scale is not None) == facts["layer_scale"]
    if facts["layer_scale"]:
        assert config.layer_scale == pytest.approx(facts["layer_scale_init"])
    activation = GELUS[(facts["act"]["type"], facts["act"].get("approximate"))]
    assert (config.mlp if activation == "swiglu" else config.gelu) == activation
    pools = {"token": "cls", "avg": "mean", "map": "map"}
    assert config.pool == pools[facts["global_pool"]]
    assert config.uses_fc_norm == (facts["fc_norm"]["type"] == "LayerNorm")
    assert config.distilled == facts["dist_token"]


def test_distilled_model_averages_its_two_heads_and_returns_both_in_distilled_training():
    paddle.seed(0)
    model = create_model("deit_tiny_distilled_patch16_224", image_size=32, depth=1, num_classes=3)
    images = paddle.randn([2, 3, 32, 32])
    model.eval()
    tokens = model.forward_features(images)
    expected = (model.head(tokens[:, 0]) + model.head_dist(tokens[:, 1])) / 2
    np.testing.assert_allclose(model(images).numpy(), expected.numpy(), atol=1e-6)
    model.train()
    assert model(images).shape == [2, 3]  # as timm: the mean unless distilled training is on
    model.set_distilled_training(True)
    logits, distillation_logits = model(images)
    assert logits.shape == distillation_logits.shape == [2, 3]


def test_prefix_tokens_and_no_embed_class_lay_out_the_sequence_as_timm():
    model = create_model("vit_small_patch14_reg4_dinov2", image_size=28, depth=1)
    embedding = model.patch_embed
    assert embedding.num_prefix_tokens == 5 and embedding.num_embedded_prefix == 0
    assert embedding.position_embedding.shape == [1, 4, 384]  # the 2 x 2 patches only
    tokens = embedding(paddle.zeros([1, 3, 28, 28]))
    assert tokens.shape == [1, 9, 384]
    # a black image: each patch token is the conv bias plus its position; the prefix tokens as learned
    np.testing.assert_allclose(tokens[0, 0].numpy(), embedding.class_token[0, 0].numpy())
    np.testing.assert_allclose(tokens[0, 1:5].numpy(), embedding.register_tokens[0].numpy())
    patches = embedding.patch_embedding.bias.numpy() + embedding.position_embedding[0].numpy()
    np.testing.assert_allclose(tokens[0, 5:].numpy(), patches, atol=1e-6)


@pytest.mark.parametrize("overrides, message", [
    (dict(class_token=False), "pool 'cls' reads the class token"),
    (dict(distilled=True, pool="mean"), "distilled"),
    (dict(register_tokens=-1), "register_tokens must be an integer >= 0"),
    (dict(layer_scale=float("nan")), "layer_scale must be null"),
    (dict(mlp="geglu"), "model.mlp must be one of standard, swiglu"),
    (dict(register_tokens=4, position_embedding="sincos_2d"), "built for the class token alone"),
    (dict(fc_norm="yes"), "fc_norm must be null"),
])
def test_bad_options_of_todays_vits_are_one_config_error_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        create_model("vit_tiny_patch16_224", image_size=32, depth=1, **overrides)


# ---- timm Hub folders of each family, against timm's own outputs ------------------------------------
with open(os.path.join(FIXTURES, "timm_modern_reference.json")) as _stream:
    FOLDER_CASES = {name: case for name, case in json.load(_stream)["cases"].items() if not name.startswith("_")}
FOLDER_REFERENCE = np.load(os.path.join(FIXTURES, "timm_modern_reference.npz"))
TOLERANCE = 1e-4


def reference(architecture, key):
    return FOLDER_REFERENCE[f"{architecture}/{key}"]


def folder_model(architecture, **overrides):
    return create_model(pretrained=os.path.join(FIXTURES, FOLDER_CASES[architecture]["folder"]), **overrides).eval()


def max_difference(ours, theirs):
    return float(np.abs(np.asarray(ours, "float64") - np.asarray(theirs, "float64")).max())


@pytest.mark.parametrize("architecture", sorted(FOLDER_CASES))
def test_a_timm_folder_of_each_family_computes_timms_outputs(architecture):
    """create_model(pretrained=FOLDER) with no name: the folder's architecture and model_args
    build the model; logits, features, the pooled embedding and the intermediates are timm's."""
    model = folder_model(architecture)
    assert model.load_report.format == "timm" and not model.load_report.missing
    images = paddle.to_tensor(reference(architecture, "input"))
    with paddle.no_grad():
        features = model.forward_features(images)
        assert max_difference(model(images).numpy(), reference(architecture, "logits")) < TOLERANCE
        assert max_difference(features.numpy(), reference(architecture, "features")) < TOLERANCE
        pooled = model.forward_head(features, pre_logits=True)
        assert max_difference(pooled.numpy(), reference(architecture, "pre_logits")) < TOLERANCE
        maps = model.forward_intermediates(images, indices=2, norm=True, return_prefix_tokens=True,
                                           intermediates_only=True)
    # timm's lists stacked: [layers, B, D, h, w] and [layers, B, prefix tokens, D]
    assert max_difference(np.stack([patches.numpy() for patches, _ in maps]),
                          reference(architecture, "intermediates_nchw")) < TOLERANCE
    prefixes = np.stack([prefix.numpy() for _, prefix in maps])
    assert prefixes.shape[2] == FOLDER_CASES[architecture]["num_prefix_tokens"]
    if prefixes.shape[2]:
        assert max_difference(prefixes, reference(architecture, "intermediates_prefix")) < TOLERANCE


def test_the_distilled_folder_gives_each_head_as_timm():
    model = folder_model("deit_small_distilled_patch16_224")
    with paddle.no_grad():
        tokens = model.forward_features(paddle.to_tensor(reference("deit_small_distilled_patch16_224", "input")))
        head, head_dist = model.head(tokens[:, 0]), model.head_dist(tokens[:, 1])
    assert max_difference(head.numpy(), reference("deit_small_distilled_patch16_224", "head")) < TOLERANCE
    assert max_difference(head_dist.numpy(), reference("deit_small_distilled_patch16_224", "head_dist")) < TOLERANCE


@pytest.mark.parametrize("architecture", sorted(FOLDER_CASES))
def test_a_timm_folder_at_another_input_size_resamples_as_timm(architecture):
    """dynamic_img_size=True: the position embedding resampled in the forward pass as timm's
    (bicubic with antialias), the prefix rows (or none, with no_embed_class) kept."""
    model = folder_model(architecture, dynamic_img_size=True)
    with paddle.no_grad():
        logits = model(paddle.to_tensor(reference(architecture, "dynamic_input")))
    assert max_difference(logits.numpy(), reference(architecture, "dynamic_logits")) < TOLERANCE


@pytest.mark.parametrize("architecture", sorted(FOLDER_CASES))
def test_photos_through_the_folders_pretrained_cfg_give_timms_outputs(architecture, tmp_path):
    """Each folder's pretrained_cfg (CLIP's mean/std, SigLIP's 0.5, DINOv2's crop 1.0, ...) is
    the pipeline the model carries; image files through it give what timm's transform gave."""
    model = folder_model(architecture)
    assert model.preprocess.mean == pytest.approx(FOLDER_CASES[architecture]["data_config"]["mean"])
    paths = make_photos(str(tmp_path))
    assert list(paths) == FOLDER_CASES[architecture]["photos"]
    key = "logits" if model.num_classes else "features"
    for name, path in paths.items():
        pixels = paddle.to_tensor(model.preprocess.read(path)[None])
        with paddle.no_grad():
            out = model(pixels).numpy()[0]
        assert max_difference(out, reference(architecture, f"photo/{name}/{key}")) < TOLERANCE, name


# ---- OpenAI CLIP / OpenCLIP image towers, against open_clip's own outputs ---------------------------
with open(os.path.join(FIXTURES, "hf_modern_reference.json")) as _stream:
    OPENCLIP_CASES = {name: case for name, case in json.load(_stream)["cases"].items() if name.startswith("openclip_")}
OPENCLIP_REFERENCE = np.load(os.path.join(FIXTURES, "hf_modern_reference.npz"))
TOWER = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4)  # the small towers' sizes


def openclip_tower(case, source=None):
    name = "vit_base_patch16_clip_quickgelu_224" if OPENCLIP_CASES[case]["quick_gelu"] else "vit_base_patch16_clip_224"
    source = source if source is not None else os.path.join(FIXTURES, OPENCLIP_CASES[case]["file"])
    return create_model(name, pretrained=source, **TOWER).eval()


@pytest.mark.parametrize("case", sorted(OPENCLIP_CASES))
def test_an_openclip_tower_embeds_as_open_clip_with_its_projection_as_head(case):
    model = openclip_tower(case)
    assert model.load_report.format == "openclip" and model.config.pre_norm
    assert model.config.layer_norm_epsilon == 1e-5 and model.num_classes == 16  # the joint space's width
    assert model.head_is_projection  # predict and exports print it as an embedding
    with paddle.no_grad():
        embeds = model(paddle.to_tensor(OPENCLIP_REFERENCE[f"{case}/input"])).numpy()
    assert max_difference(embeds, OPENCLIP_REFERENCE[f"{case}/image_embeds"]) < TOLERANCE
    assert model.preprocess.mean == pytest.approx([0.48145466, 0.4578275, 0.40821073])


def test_a_whole_clip_state_dict_loads_its_image_tower_and_skips_the_text_tower():
    from safetensors.numpy import load_file
    arrays = load_file(os.path.join(FIXTURES, OPENCLIP_CASES["openclip_quickgelu"]["file"]))
    text = {"token_embedding.weight": np.zeros([64, 32], "float32"), "logit_scale": np.zeros([], "float32"),
            "transformer.resblocks.0.ln_1.weight": np.ones([32], "float32"),
            "text_projection": np.zeros([32, 16], "float32")}
    model = openclip_tower("openclip_quickgelu", {**arrays, **text})
    assert sorted(model.load_report.ignored) == sorted(text)
    alone = openclip_tower("openclip_quickgelu", {name[len("visual."):]: array for name, array in arrays.items()})
    images = paddle.to_tensor(OPENCLIP_REFERENCE["openclip_quickgelu/input"])
    with paddle.no_grad():
        assert max_difference(alone(images).numpy(), OPENCLIP_REFERENCE["openclip_quickgelu/image_embeds"]) < TOLERANCE


# ---- the default preprocessing of each name -----------------------------------------------------------
@pytest.mark.parametrize("name", BUILT)
def test_each_names_default_eval_transform_is_timms_pretrained_cfg(name):
    expected = TIMM[name]["pretrained_cfg"]
    ours = timm_eval_config(name)
    assert ours["interpolation"] == expected["interpolation"] and ours["crop_mode"] == expected["crop_mode"]
    assert ours["crop_pct"] == expected["crop_pct"]
    assert ours["mean"] == pytest.approx(expected["mean"]) and ours["std"] == pytest.approx(expected["std"])
    assert [3, get_model_config(name).image_size, get_model_config(name).image_size] == expected["input_size"]


def test_a_bare_file_under_a_name_of_todays_vits_is_evaluated_with_the_names_pipeline(tmp_path):
    """timm's model.safetensors alone (no config.json beside it): the name's default pretrained_cfg."""
    folder = os.path.join(FIXTURES, FOLDER_CASES["vit_base_patch16_siglip_224"]["folder"])
    shutil.copy(os.path.join(folder, "model.safetensors"), tmp_path / "siglip.safetensors")
    model = create_model("vit_base_patch16_siglip_224", pretrained=str(tmp_path / "siglip.safetensors"), **TOWER)
    preprocess = model.preprocess
    assert preprocess.mean == [0.5, 0.5, 0.5] and preprocess.eval_crop_pct == 0.9
    assert "timm's default pretrained_cfg of vit_base_patch16_siglip_224" in preprocess.origin


@pytest.mark.parametrize("architecture", ["vit_base_patch16_siglip_224", "vit_base_patch16_clip_quickgelu_224"])
def test_predict_on_a_folder_gives_the_embedding_or_the_probabilities_timm_gives(architecture, tmp_path, capsys):
    """tools/predict.py --weights FOLDER photos --json: a model with no head (SigLIP) prints its
    embedding, one with a head its probabilities; both as timm computes them from the files."""
    from test_hub_folders import run_tool
    paths = make_photos(str(tmp_path))
    folder = os.path.join(FIXTURES, FOLDER_CASES[architecture]["folder"])
    code, lines, _ = run_tool("predict", ["--weights", folder, "--json", "--topk", "16", *paths.values()], capsys)
    assert code == 0 and len(lines) == len(paths)
    for name, line in zip(paths, lines):
        result = json.loads(line)
        if "embedding" in result:
            ours = np.array(result["embedding"])
            assert max_difference(ours, reference(architecture, f"photo/{name}/features")) < TOLERANCE
        else:
            ours = np.zeros(16)
            for item in result["predictions"]:
                ours[item["index"]] = item["probability"]
            assert max_difference(ours, reference(architecture, f"photo/{name}/probabilities")) < TOLERANCE


# ---- using them: fine-tuning with layer decay, few-shot on their features -------------------------
def test_the_dinov2_recipe_fine_tunes_a_timm_folder_with_layer_decay(tmp_path):
    """configs/vit_small_patch14_dinov2_finetune_imagefolder.yaml's keys on a small scale: the
    recorded DINOv2-with-registers folder (42 px, no head) fine-tuned at 28 px on synthetic data:
    the position embedding resampled, a zero head added, the loss falls, the blocks' learning
    rates decayed below the head's."""
    from paddle_vit.config import load_config
    from paddle_vit.engine.trainer import Trainer
    folder = os.path.join(FIXTURES, FOLDER_CASES["vit_small_patch14_reg4_dinov2"]["folder"])
    recipe = load_config(os.path.join(REPO, "configs", "vit_small_patch14_dinov2_finetune_imagefolder.yaml"), [
        "model.name=vit_small_patch14_reg4_dinov2", f"model.pretrained={folder}", "model.image_size=28",
        "data.dataset=synthetic", "data.synthetic_train_size=64", "data.synthetic_val_size=16",
        "data.synthetic_classes=3", "data.num_workers=0", "data.randaugment_num_ops=0", "train.epochs=3",
        "train.batch_size=16", "train.device=cpu", f"train.output_dir={tmp_path / 'run'}", "train.vdl=false",
        "optimizer.lr=0.003", "schedule.warmup_epochs=0"])
    trainer = Trainer(recipe)
    vit = trainer.vit
    assert vit.config.register_tokens == 4 and vit.config.layer_scale is not None and vit.num_classes == 3
    assert vit.load_report.resampled and not vit.load_report.missing
    rates = {name: parameter.optimize_attr["learning_rate"] for name, parameter in vit.named_parameters()}
    assert rates["head.weight"] == 1.0 and rates["encoder.layers.1.ls1.gamma"] == pytest.approx(0.75 ** 1)
    assert rates["patch_embed.register_tokens"] == pytest.approx(0.75 ** 3)
    trainer.fit()
    with open(tmp_path / "run" / "metrics.jsonl") as stream:
        losses = [json.loads(line)["train_loss"] for line in stream]
    assert len(losses) == 3 and losses[-1] < losses[0]


@pytest.mark.parametrize("architecture", ["vit_base_patch16_siglip_224", "vit_small_patch14_reg4_dinov2",
                                          "deit_small_distilled_patch16_224"])
def test_few_shot_evaluation_reads_each_familys_embedding(architecture):
    """The few-shot features are the pooled embedding timm's forward_head(pre_logits=True)
    gives: SigLIP's attention pool, DINOv2's normed class token, distilled DeiT's two tokens' mean."""
    from paddle_vit.fewshot import representation
    model = folder_model(architecture)
    with paddle.no_grad():
        features = representation(model, paddle.to_tensor(reference(architecture, "input"))).numpy()
    assert max_difference(features, reference(architecture, "pre_logits")) < TOLERANCE


def test_an_image_size_the_patch_does_not_divide_drops_the_remainder_as_timm():
    """vit_so400m_patch14_siglip_384: 384 px at patch 14 is 27 patches, the last 6 pixels left
    out by the convolution (timm's PatchEmbed); other models still refuse such a size."""
    config = get_model_config("vit_so400m_patch14_siglip_384", depth=1, embed_dim=32, num_heads=4)
    assert config.drop_remainder and config.token_grid() == (27, 27)
    model = ViT(config).eval()
    images = paddle.randn([1, 3, 384, 384])
    with paddle.no_grad():
        cropped = images.clone()
        cropped[:, :, 378:, :] = 0.0
        cropped[:, :, :, 378:] = 0.0
        assert max_difference(model(images).numpy(), model(cropped).numpy()) == 0.0  # the remainder unseen
    with pytest.raises(ConfigError, match="378 .* is not divisible by patch_size 14|not divisible"):
        create_model("vit_base_patch16_224", image_size=378, patch_size=16)


@pytest.mark.parametrize("case", sorted(OPENCLIP_CASES))
def test_photos_through_open_clips_own_transform_give_its_embeddings(case, tmp_path):
    """The tower's pipeline is open_clip's image_transform: resize and crop, then RGB (an RGBA
    photo resized with its alpha, as PIL resamples it, before the alpha is dropped)."""
    model = openclip_tower(case)
    assert "OpenCLIP's image_transform" in model.preprocess.origin
    for name, path in make_photos(str(tmp_path)).items():
        pixels = model.preprocess.read(path)
        recorded = OPENCLIP_REFERENCE[f"photo/{case}/{name}/pixel_values"][0]
        assert max_difference(pixels, recorded) < 1e-6, name
        with paddle.no_grad():
            embeds = model(paddle.to_tensor(pixels[None])).numpy()
        assert max_difference(embeds, OPENCLIP_REFERENCE[f"photo/{case}/{name}/image_embeds"]) < TOLERANCE, name


@pytest.mark.parametrize("model_args, message", [
    ({"init_values": "abc"}, r"model_args\.init_values = 'abc': model\.layer_scale must be null"),
    ({"class_token": "no"}, r"model_args\.class_token = 'no': model\.class_token must be true or false"),
    ({"reg_tokens": -2}, r"model_args\.reg_tokens = -2: reg_tokens must be a count >= 0"),
])
def test_a_damaged_model_args_value_names_the_file_and_the_key(tmp_path, model_args, message):
    from paddle_vit import WeightsError
    folder = tmp_path / "folder"
    shutil.copytree(os.path.join(FIXTURES, FOLDER_CASES["vit_small_patch14_reg4_dinov2"]["folder"]), folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_args"].update(model_args)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match=f"{folder}/config.json: {message}") as caught:
        create_model(pretrained=str(folder))
    assert "\n" not in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["vit_small_patch14_reg4_dinov2", "vit_base_patch16_siglip_224",
                                          "deit_small_distilled_patch16_224", "vit_giant_patch14_dinov2"])
def test_the_cpu_fast_paths_and_a_traced_graph_compute_timms_outputs_too(architecture):
    """What the tools run (the CPU fast paths) and what an export traces (paddle.jit.to_static
    with the traceable variants) give timm's outputs for today's families as for the paper's."""
    from paddle_vit import variants
    images = paddle.to_tensor(reference(architecture, "input"))
    expected = reference(architecture, "logits")
    model = variants.use_cpu_fast_paths(folder_model(architecture))
    with paddle.no_grad():
        assert max_difference(model(images).numpy(), expected) < TOLERANCE
        traced = paddle.jit.to_static(variants.use_traceable_variants(folder_model(architecture)), full_graph=True)
        assert max_difference(traced(images).numpy(), expected) < TOLERANCE

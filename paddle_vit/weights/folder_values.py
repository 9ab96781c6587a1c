"""Every value a checkpoint folder brings, checked once when the folder is read.

Checkpoint folders come from strangers: a timm Hub folder's ``config.json`` (its top level,
``pretrained_cfg`` and ``model_args``), a Hugging Face folder's ``config.json`` and
``preprocessor_config.json``. Before anything is computed with them, each value is checked for
type, shape, range and known value, and a bad one is ONE error naming the file and the key
(`check_folder_values`, called by source.py where the config.json is read). Then, once the
weights are read, what the config says is compared with what the tensors are
(`check_against_weights`, called by the loader): a class count, label names or an image size
that contradicts the weights is an error naming both.

Two things are warnings, one line each, said once: the folder is read once per command
(`source.resolve_weights`), which logs them:
- a value the source library itself replaces by a default (timm's `resolve_data_config` takes
  ``pretrained_cfg.get(key) or default``): the default is applied, as timm does;
- keys this project does not use that are not known metadata (timm's `PretrainedCfg` fields,
  transformers' `PretrainedConfig` and image processor keys): named, ``<file>: not used: a, b``.

``model_args`` and ``global_pool`` of a timm folder, and the sizes, epsilon and GELU of a Hugging
Face one, are checked where they are turned into model options (folders.py `timm_options`,
`hf_options`), which runs for every folder loaded.
"""
import math

from ..preprocess import preprocess_for_checkpoint
from ..preprocess.constants import MAX_IMAGE_SIDE
from ..preprocess.timm import timm_fallbacks
from ..errors import WeightsError

# ---- what is known ------------------------------------------------------------------------------

# timm's PretrainedCfg fields (timm/models/_pretrained.py): what a pretrained_cfg may hold; an
# older timm wrote them at the top level of config.json
TIMM_PRETRAINED_CFG_FIELDS = frozenset((
    "url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source", "architecture", "tag", "custom_load",
    "input_size", "test_input_size", "min_input_size", "fixed_input_size", "interpolation", "crop_pct",
    "test_crop_pct", "crop_mode", "mean", "std", "num_classes", "label_offset", "label_names", "label_descriptions",
    "pool_size", "test_pool_size", "first_conv", "classifier", "license", "description", "origin_url", "paper_name",
    "paper_ids", "notes"))
# what timm's save_config_for_hf writes at the top level besides pretrained_cfg's old keys
TIMM_TOP_LEVEL = frozenset(("architecture", "num_classes", "num_features", "global_pool", "label_names",
                            "label_descriptions", "model_args", "pretrained_cfg"))
# transformers' PretrainedConfig keys (4.x and 5.x) every config.json may hold
HF_GENERIC_KEYS = frozenset((
    "_name_or_path", "_commit_hash", "_attn_implementation_autoset", "transformers_version", "model_type",
    "architectures", "auto_map", "dtype", "torch_dtype", "use_bfloat16", "return_dict", "output_hidden_states",
    "output_attentions", "torchscript", "tf_legacy_loss", "pruned_heads", "tie_word_embeddings",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "cross_attention_hidden_size",
    "add_cross_attention", "tie_encoder_decoder", "max_length", "min_length", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "finetuning_task", "id2label", "label2id", "num_labels", "tokenizer_class", "prefix",
    "bos_token_id", "pad_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id",
    "task_specific_params", "problem_type", "use_cache", "gradient_checkpointing"))
# the keys of the config classes of the model types read (ViTConfig, ViTMAEConfig, DeiTConfig,
# Dinov2Config, Dinov2WithRegistersConfig, DINOv3ViTConfig, CLIP(Vision)Config, Siglip(Vision)Config)
HF_MODEL_KEYS = frozenset((
    "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout", "dropout", "initializer_range",
    "initializer_factor", "layer_norm_eps", "image_size", "patch_size", "num_channels", "qkv_bias", "encoder_stride",
    "pooler_output_size", "pooler_act", "decoder_hidden_size", "decoder_intermediate_size",
    "decoder_num_attention_heads", "decoder_num_hidden_layers", "mask_ratio", "norm_pix_loss", "apply_layernorm",
    "drop_path_rate", "layerscale_value", "mlp_ratio", "out_features", "out_indices", "reshape_hidden_states",
    "stage_names", "use_mask_token", "use_swiglu_ffn", "num_register_tokens", "projection_dim",
    "logit_scale_init_value", "text_config", "vision_config", "text_config_dict", "vision_config_dict",
    "vision_use_head", "rope_theta", "query_bias", "key_bias", "value_bias", "proj_bias", "mlp_bias",
    "use_gated_mlp", "pos_embed_shift", "pos_embed_jitter", "pos_embed_rescale"))
# an image processor's keys (transformers' image_processing_*.py) and its file's metadata
HF_PROCESSOR_KEYS = frozenset((
    "image_processor_type", "feature_extractor_type", "processor_class", "auto_map", "do_resize", "size",
    "resample", "do_center_crop", "crop_size", "do_rescale", "rescale_factor", "do_normalize", "image_mean",
    "image_std", "do_convert_rgb", "default_to_square"))
# the Hugging Face config.json values that are probabilities (training only, but still numbers)
HF_PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout", "dropout",
                    "drop_path_rate")


# ---- small checks -------------------------------------------------------------------------------

def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_count(values, key, where, minimum=0, prefix=""):
    """`values[key]`, an integer >= `minimum` when present."""
    value = values.get(key)
    if key in values and (not _is_integer(value) or value < minimum):
        raise WeightsError(f"{where}: {prefix}{key} must be an integer >= {minimum}, got {value!r}")
    return value


def check_probability(values, key, where, prefix=""):
    value = values.get(key)
    if key in values and not (_is_number(value) and 0 <= value <= 1):
        raise WeightsError(f"{where}: {prefix}{key} must be a number in [0, 1], got {value!r}")


def check_flag(values, key, where, prefix=""):
    value = values.get(key)
    if key in values and not isinstance(value, bool):
        raise WeightsError(f"{where}: {prefix}{key} must be true or false, got {value!r}")


def check_side(values, key, where, prefix=""):
    """An image or patch size (an integer, or a square [n, n]) between 1 and MAX_IMAGE_SIDE."""
    if key not in values:
        return None
    value = values[key]
    side = value[0] if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1] else value
    if not _is_integer(side) or not 1 <= side <= MAX_IMAGE_SIDE:
        raise WeightsError(f"{where}: {prefix}{key} must be a square size of 1 to {MAX_IMAGE_SIDE} pixels, "
                           f"got {value!r}")
    return side


def label_count(labels, where, key):
    """How many classes a label list ([name, ...]) or map ({index: name}) names, checked to hold
    strings under integer indices; None when absent."""
    if labels is None:
        return None
    if isinstance(labels, (list, tuple)):
        if not all(isinstance(name, str) for name in labels):
            raise WeightsError(f"{where}: {key} must hold class names (strings), got {list(labels)[:5]!r}")
        return len(labels)
    if isinstance(labels, dict):
        try:
            indices = sorted(int(index) for index in labels)
        except (TypeError, ValueError):
            raise WeightsError(f"{where}: {key} must map class indices (integers) to names, got keys "
                               f"{list(labels)[:5]!r}") from None
        if indices and indices[0] < 0:
            raise WeightsError(f"{where}: {key} has a negative class index {indices[0]}")
        return len(indices)
    raise WeightsError(f"{where}: {key} must be a list of class names or a map {{index: name}}, got {labels!r}")


def unused_keys(values, known, prefix=""):
    """The keys of `values` outside `known`, with `prefix`."""
    return [f"{prefix}{key}" for key in values if key not in known]


# ---- timm ---------------------------------------------------------------------------------------

def check_timm_config(path, values):
    """A timm Hub config.json's values; returns its warning lines (fallbacks, unused keys)."""
    architecture = values.get("architecture")
    if not isinstance(architecture, str) or not architecture:
        raise WeightsError(f"{path}: architecture must be a timm model name, got {architecture!r}")
    check_count(values, "num_classes", path)
    check_count(values, "num_features", path, minimum=1)
    label_count(values.get("label_names"), path, "label_names")
    descriptions = values.get("label_descriptions")
    if descriptions is not None and not isinstance(descriptions, dict):
        raise WeightsError(f"{path}: label_descriptions must map class names to descriptions, got {descriptions!r}")
    model_args = values.get("model_args")
    if model_args is not None and not isinstance(model_args, dict):
        raise WeightsError(f"{path}: model_args must be a JSON object, got {type(model_args).__name__}")
    warnings = []
    cfg = values.get("pretrained_cfg")
    if "pretrained_cfg" in values:
        if not isinstance(cfg, dict):
            raise WeightsError(f"{path}: pretrained_cfg must be a JSON object, got {type(cfg).__name__}")
        warnings.extend(check_pretrained_cfg(path, cfg))
    unused = unused_keys(values, TIMM_TOP_LEVEL | TIMM_PRETRAINED_CFG_FIELDS)
    unused += unused_keys(cfg or {}, TIMM_PRETRAINED_CFG_FIELDS, "pretrained_cfg.")
    if unused:
        warnings.append(f"{path}: not used: {', '.join(unused)}")
    return warnings


def check_pretrained_cfg(path, cfg):
    """The pretrained_cfg's class count and flags, and its preprocessing as timm resolves it
    (every value checked by `preprocess_for_checkpoint`, the resize bounded); returns a warning
    for each value timm replaces by its default."""
    check_count(cfg, "num_classes", path, prefix="pretrained_cfg.")
    label_count(cfg.get("label_names"), path, "pretrained_cfg.label_names")
    for key in ("fixed_input_size", "custom_load"):
        check_flag(cfg, key, path, prefix="pretrained_cfg.")
    preprocess_for_checkpoint({"pipeline": "timm", "config": cfg, "source": path}, None)
    return [f"{path}: pretrained_cfg.{key} {value!r} is timm's default {_shown(default)} (timm's "
            f"resolve_data_config takes the default for a false value)"
            for key, value, default in timm_fallbacks(cfg)]


def _shown(value):
    return repr(list(value) if isinstance(value, tuple) else value)


# ---- Hugging Face -------------------------------------------------------------------------------

def check_hf_config(path, values):
    """A Hugging Face config.json's values beyond what `hf_options` checks (the sizes read
    there, epsilon, GELU): image and patch sizes, the MLP width, probabilities, the labels;
    returns its warning lines (unused keys)."""
    towers = [("", values)]
    if isinstance(values.get("vision_config"), dict):
        towers.append(("vision_config.", values["vision_config"]))
    for prefix, tower in towers:
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "num_channels"):
            check_count(tower, key, path, minimum=1, prefix=prefix)
        for key in ("image_size", "patch_size"):
            check_side(tower, key, path, prefix)
        for key in HF_PROBABILITIES:
            check_probability(tower, key, path, prefix)
        for key in ("qkv_bias", "use_swiglu_ffn", "vision_use_head"):
            check_flag(tower, key, path, prefix)
    check_hf_labels(path, values)
    unused = unused_keys(values, HF_GENERIC_KEYS | HF_MODEL_KEYS)
    if isinstance(values.get("vision_config"), dict):
        unused += unused_keys(values["vision_config"], HF_GENERIC_KEYS | HF_MODEL_KEYS, "vision_config.")
    return [f"{path}: not used: {', '.join(unused)}"] if unused else []


def check_hf_labels(path, values):
    """num_labels, id2label and label2id: of the right types, and the same count."""
    counts = {}
    if "num_labels" in values:
        counts["num_labels"] = check_count(values, "num_labels", path)
    if values.get("id2label") is not None:
        if not isinstance(values["id2label"], dict):
            raise WeightsError(f"{path}: id2label must map class indices to names, got {values['id2label']!r}")
        counts["id2label"] = label_count(values["id2label"], path, "id2label")
    label2id = values.get("label2id")
    if label2id is not None:
        if not isinstance(label2id, dict) or not all(_is_integer(index) or (isinstance(index, str) and
                                                                            index.lstrip("-").isdigit())
                                                     for index in label2id.values()):
            raise WeightsError(f"{path}: label2id must map class names to indices, got {label2id!r}")
        counts["label2id"] = len(label2id)
    if len(set(counts.values())) > 1:
        said = ", ".join(f"{key} {count}" for key, count in counts.items())
        raise WeightsError(f"{path}: the class counts contradict each other ({said})")


def check_hf_processor(path, values):
    """A preprocessor_config.json's `values` (read from `path`), each as the image processor reads
    it (the resize bounded), by building its preprocessing; returns its warning lines (unused keys)."""
    preprocess_for_checkpoint({"pipeline": "huggingface", "config": values, "source": path}, None)
    unused = unused_keys(values, HF_PROCESSOR_KEYS)
    return [f"{path}: not used: {', '.join(unused)}"] if unused else []


# ---- a folder as a whole -----------------------------------------------------------------------

def check_folder_values(config):
    """Check every value of a `FolderConfig` (its config.json, and a Hugging Face folder's
    preprocessor_config.json); raise on the first bad one, naming the file and the key. Returns
    the warning lines for the caller to give once."""
    if config.kind == "timm":
        warnings = check_timm_config(config.path, config.values)
    else:
        warnings = check_hf_config(config.path, config.values)
    if config.processor is not None:
        warnings.extend(check_hf_processor(config.processor_path, config.processor))
    return warnings


# ---- against the weights ------------------------------------------------------------------------

def check_against_weights(kind, path, values, converted, description, head_is_projection):
    """What a folder's config.json says against what its weights are: the class counts and
    label names against the head's rows, the image size against the position embedding's
    length. A contradiction is a WeightsError naming both: timm's own loader refuses such a
    folder (a head of another size), transformers' too (ignore_mismatched_sizes=False)."""
    tensors = converted.tensors
    head = converted.checkpoint_name("head.bias")
    if kind == "timm":
        rows = int(tensors["head.bias"].shape[0]) if "head.bias" in tensors else 0
        weights_say = (f"{head} in {description} has {rows} rows" if rows else
                       f"{description} has no classification head (num_classes 0)")
        cfg = values.get("pretrained_cfg") if isinstance(values.get("pretrained_cfg"), dict) else {}
        model_args = values.get("model_args") if isinstance(values.get("model_args"), dict) else {}
        stated = [("num_classes", values.get("num_classes")), ("pretrained_cfg.num_classes", cfg.get("num_classes")),
                  ("model_args.num_classes", model_args.get("num_classes"))]
        for key, count in stated:
            if count is not None and count != rows:
                raise WeightsError(f"{path}: {key} {count} contradicts the weights: {weights_say}")
        for key, labels in (("label_names", values.get("label_names")),
                            ("pretrained_cfg.label_names", cfg.get("label_names"))):
            _check_labels(path, key, labels, rows, weights_say)
        sizes = {"image_size": model_args.get("img_size")} if "img_size" in model_args else {}
        _check_position_embedding(path, "model_args.img_size", sizes.get("image_size"), converted, description)
        return
    if "head.bias" in tensors and not head_is_projection:  # a classifier: its labels are its rows
        rows = int(tensors["head.bias"].shape[0])
        weights_say = f"{head} in {description} has {rows} rows"
        for key in ("num_labels", "id2label"):
            count = values.get(key) if key == "num_labels" else (
                len(values[key]) if isinstance(values.get(key), dict) else None)
            if count is not None and count != rows:
                raise WeightsError(f"{path}: {key} ({count} classes) contradicts the weights: {weights_say}")
    tower, prefix = (values["vision_config"], "vision_config.") if isinstance(values.get("vision_config"), dict) \
        else (values, "")
    _check_position_embedding(path, f"{prefix}image_size", tower.get("image_size"), converted, description)


def _check_labels(path, key, labels, rows, weights_say):
    if labels is None:
        return
    if isinstance(labels, dict):
        indices = [int(index) for index in labels]
        if indices and max(indices) >= rows:
            raise WeightsError(f"{path}: {key} names class {max(indices)}, but {weights_say}")
    elif len(labels) != rows:
        raise WeightsError(f"{path}: {key} holds {len(labels)} names but {weights_say}")


def _check_position_embedding(path, key, image_size, converted, description):
    """The image size a config states against the position embedding's length: the patch grid
    (image size // the patch projection's kernel) squared, plus at most a row for each prefix
    token the weights hold (class, distillation, register tokens; timm's no_embed_class has none)."""
    tensors = converted.tensors
    embedding = tensors.get("patch_embed.position_embedding")
    patches = tensors.get("patch_embed.patch_embedding.weight")
    # the patches are cut from the ResNet's features (the paper's ResNet-v2, timm's ResNet-D)
    hybrid = "patch_embed.backbone.stem.conv.weight" in tensors or "patch_embed.backbone.conv1.0.weight" in tensors
    if (image_size is None or embedding is None or patches is None or hybrid or embedding.ndim != 3
            or patches.ndim != 4):
        return
    side = image_size[0] if isinstance(image_size, (list, tuple)) else image_size
    patch = int(patches.shape[-1])
    grid = side // patch
    prefix = sum(1 for token in ("patch_embed.class_token", "patch_embed.distillation_token") if token in tensors)
    registers = tensors.get("patch_embed.register_tokens")
    prefix += int(registers.shape[1]) if registers is not None and registers.ndim == 3 else 0
    if not 0 <= embedding.shape[1] - grid * grid <= prefix:
        name = converted.checkpoint_name("patch_embed.position_embedding")
        raise WeightsError(f"{path}: {key} {image_size!r} ({grid} x {grid} patches of {patch} pixels) contradicts "
                           f"the weights: {name} in {description} holds {embedding.shape[1]} positions")

"""The model section of a recipe: which ViT to build, from which weights, what is frozen."""
import dataclasses
from typing import List, Optional

from ..checks import check_settings, one_of, setting
from ..errors import ConfigError
from ..models import ViTConfig, get_model_config  # the registry is the authority on architectures
from ..weights import RESAMPLE_METHODS

FREEZE_CHOICES = ("backbone",)


@dataclasses.dataclass
class ModelConfig:
    """Which ViT to build: a registered `name`, with any `ViTConfig` field overridden here
    (None keeps the registered value; `num_classes: null` takes the data set's class count).
    Its fields after the first four are `ViTConfig`'s, in its order, written out here so that a
    reader sees every key; tests/test_config.py keeps the two lists equal.

    pretrained: weights to start from: any file `load_pretrained` reads, or a Hugging Face
        save_pretrained folder. The model is built with the options the checkpoint implies (a
        pre-logits layer, Hugging Face's config.json, the JAX code's tanh GELU, ...); keys set
        here win, and the data set decides the class count. The position embedding is resampled
        and the head re-initialised as needed (fine-tuning).
    pretrained_resample: how that position embedding is resampled to another grid
        (bicubic_antialias, bicubic, bilinear, bilinear_align_corners, bicubic_align_corners);
        null: as the checkpoint's own code does (docs/pretrained.md).
    recompute: activation recompute in training: true (every encoder layer), k (every k-th) or
        false/0; the same numbers with less memory and more time (docs/scaling.md).
    freeze: null trains every parameter; "backbone" trains the classifier head alone (a linear
        probe of the frozen representation, the paper's Section 4.1): everything before the
        head, the pre-logits layer and the pooling norm included, keeps its weights, runs in
        eval mode (no dropout, no drop-path) and has no gradients and no optimizer state; the
        head starts from zero (paper Section 3.2).
    Every other key: the `ViTConfig` field of that name (paddle_vit/models/config.py says what each is).
    """
    name: str = "vit_walkthrough"
    pretrained: Optional[str] = None
    pretrained_resample: Optional[str] = setting(None, one_of(tuple(RESAMPLE_METHODS)))
    freeze: Optional[str] = setting(None, one_of(FREEZE_CHOICES))
    # ViTConfig's fields: None keeps the registered model's value, which ViTConfig.validate checks
    image_size: Optional[int] = None
    patch_size: Optional[int] = None
    in_channels: Optional[int] = None
    num_classes: Optional[int] = None
    embed_dim: Optional[int] = None
    depth: Optional[int] = None
    num_heads: Optional[int] = None
    mlp_ratio: Optional[float] = None
    qkv_bias: Optional[bool] = None
    qk_scale: Optional[float] = None
    layer_norm_epsilon: Optional[float] = None
    gelu: Optional[str] = None
    dropout: Optional[float] = None
    attention_dropout: Optional[float] = None
    drop_path: Optional[float] = None
    pool: Optional[str] = None
    representation_size: Optional[int] = None
    position_embedding: Optional[str] = None
    fused_attention: Optional[bool] = None
    init: Optional[str] = None
    backbone_layers: Optional[List[int]] = None
    backbone: Optional[str] = None
    backbone_width: Optional[int] = None
    backbone_style: Optional[str] = None
    dynamic_img_size: Optional[bool] = None
    dynamic_img_pad: Optional[bool] = None
    pos_embed_resample: Optional[str] = None
    class_token: Optional[bool] = None
    register_tokens: Optional[int] = None
    no_embed_class: Optional[bool] = None
    pre_norm: Optional[bool] = None
    layer_scale: Optional[float] = None
    mlp: Optional[str] = None
    fc_norm: Optional[bool] = None
    distilled: Optional[bool] = None
    drop_remainder: Optional[bool] = None
    recompute: Optional[int] = setting(None, true_is=1)  # a recipe's `recompute: true` is every layer
    rope: Optional[str] = None
    rope_temperature: Optional[float] = None
    rope_grid_offset: Optional[float] = None
    rope_grid_indexing: Optional[str] = None
    rope_rotate_half: Optional[bool] = None
    rope_ref_grid: Optional[List[int]] = None
    qkv: Optional[str] = None
    attention_norm: Optional[bool] = None
    mlp_norm: Optional[bool] = None
    mlp_align_to: Optional[int] = None
    attn_pool_heads: Optional[int] = None
    attn_pool_mlp_ratio: Optional[float] = None
    norm: Optional[str] = None
    final_norm: Optional[bool] = None
    pool_include_prefix: Optional[bool] = None
    proj_bias: Optional[bool] = None
    mlp_bias: Optional[bool] = None
    patch_norm: Optional[bool] = None

    def vit_overrides(self):
        """The ViTConfig fields this section sets, as keyword arguments."""
        vit_fields = ViTConfig.field_names()
        return {name: value for name, value in dataclasses.asdict(self).items()
                if name in vit_fields and value is not None}

    def vit_config(self):
        """The `ViTConfig` this section builds, checked; a class count left to the data stands
        at 10 here (the data set decides it when the run is built)."""
        try:
            return get_model_config(self.name, **self.vit_overrides()).replace(
                num_classes=self.num_classes if self.num_classes is not None else 10).validate()
        except ConfigError as error:
            message = str(error)
            raise ConfigError(message if message.startswith("model") else f"model: {message}") from None

    def validate(self):
        """Raise ConfigError, one line naming the key, for a model that cannot be built or a key
        out of its range."""
        vit = self.vit_config()
        check_settings(self, "model")
        if self.freeze is not None and vit.num_classes == 0:
            raise ConfigError("model.freeze: backbone trains the classifier head alone, and model.num_classes is 0 "
                              "(no head): set model.num_classes: null to follow the data")
        return self

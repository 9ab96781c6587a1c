"""The ViT's configuration: every architectural choice in one object passed down to the modules,
checked once before anything is built (`ViTConfig.validate`), and what it costs to run
(`ViTConfig.count_macs`)."""
import dataclasses
import math
from typing import List, Optional

from ..errors import ConfigError, check_choice, close_matches
from .block_parts import QKV_LAYOUTS, swiglu_hidden_dim
from .encoder import GELUS, LAYER_NORM_EPSILON, MLPS
from .norms import NORMS
from .patch_embed import POSITION_EMBEDDINGS, grid_size
from .resize import RESIZE_METHODS
from .rope import GRID_INDEXINGS, ROPE_KINDS, check_rope_head_dim
from .resnet import STAGE_CHANNELS, STYLES, backbone_channels, backbone_feature_size, backbone_macs
from .resnet_d import resnet_d_macs

POOLS = ("cls", "mean", "walkthrough", "map", "first_patch")
# the position embeddings that are rotary alone (no vector added to the tokens), by their RoPE kind
ROPE_POSITION_EMBEDDINGS = {"rope_axial": "axial", "rope_mixed": "mixed"}
INITS = ("timm", "jax")
BACKBONES = ("resnet_v2", "resnet_d")  # a hybrid's ResNet: the paper's (resnet.py), timm's ResNet-D (resnet_d.py)


@dataclasses.dataclass
class ViTConfig:
    """Every architectural choice of a ViT, in one object passed down to the modules.

    Attributes:
        image_size: input side in pixels; must be a multiple of patch_size.
        patch_size: side P of the square patches (paper: 14, 16 or 32).
        in_channels: image channels.
        num_classes: size of the classification head; 0 leaves the head out.
        embed_dim: token width D ("Hidden size D", paper Table 1).
        depth: number of encoder layers ("Layers"); 0 leaves the Transformer out, which with a
            hybrid's backbone and pool="mean" is the paper's third family, the ResNet alone
            (global average pooling, LayerNorm and the head on its feature map).
        num_heads: attention heads ("Heads").
        mlp_ratio: MLP hidden width / D ("MLP size" = 4 D).
        qkv_bias: bias in the q/k/v projection.
        qk_scale: the factor of q k^T before the softmax; None is head_dim^-0.5 (paper Eq. 5).
            PaddleClas's ViT_small_patch16_224 uses embed_dim^-0.5.
        layer_norm_epsilon: epsilon of every LayerNorm: 1e-6 in ViT (timm, JAX); Hugging Face's
            configs say 1e-12, PaddleClas's small model and PLSC's huge one 1e-5.
        gelu: "exact" (erf; timm, Hugging Face "gelu", PaddleClas), "tanh" (the approximation
            flax's nn.gelu computes, which the original JAX checkpoints and SigLIP were trained
            with) or "quick" (x * sigmoid(1.702 x), OpenAI CLIP's QuickGELU).
        dropout: dropout after the embeddings, in the MLP and after the attention projection.
        attention_dropout: dropout on the attention weights.
        drop_path: stochastic depth rate of the last layer (linearly rising from 0).
        pool: "cls" reads the class token (the paper); "mean" averages the patch tokens and
            normalises after pooling (timm's global_pool="avg" with fc_norm); "walkthrough"
            averages every token, class token included, with AdaptiveAvgPool1D; "map" is
            SigLIP's attention pool over the patch tokens (timm's global_pool="map" without
            pool_include_prefix, models/pooling.py); "first_patch"
            reads the first patch token, as PaddleClas's CLIP_vit_base_patch16_224 classifier
            does (it drops the class token after the blocks, then reads token 0).
        representation_size: width of the pre-logits layer (Linear + tanh) of the paper's
            pre-training head, or None for none.
        position_embedding: "learned", "learned_2d", "sincos_2d" or "none" (Appendix D.4), or
            "rope_axial" / "rope_mixed": no vector added to the tokens, a rotary embedding of that
            kind inside attention instead (rope below; RoPE-ViT's rope / rope_mixed).
        fused_attention: the fast attention path (Paddle's fused scaled_dot_product_attention;
            on a CPU the tools run a packed equivalent, paddle_vit.variants); False runs the
            walkthrough's explicit path. Attention maps always come from the explicit path.
        init: "timm" (truncated normal 0.02) or "jax" (xavier uniform, zero head).
        backbone_layers: None for the plain ViT; for a hybrid (paper Section 3.1), the units per
            stage of its ResNet-v2 (resnet.py): [3, 4, 9] (R50, stride 16), [2, 2, 2, 2] (R26,
            stride 32), [3, 4, 6, 3] (the L/32 hybrid's R50), [] (the stem alone, stride 4).
            patch_size then cuts the feature map (1 in the paper's hybrids).
        backbone: which ResNet: "resnet_v2", the paper's (resnet.py), or "resnet_d", timm's
            ResNet-D of its vit_*_resnet26d / resnet50d hybrids (resnet_d.py: deep stem,
            BatchNorm, average-pool shortcuts; backbone_width 1, backbone_style not read).
        backbone_width: the ResNet's width factor.
        backbone_style: "timm" or "jax": whose weight standardisation and GroupNorm epsilon
            the ResNet-v2 computes with (they differ; a checkpoint implies its own).
        dynamic_img_size: accept inputs of any H x W the patch divides (a hybrid: that its
            feature map's patch divides), the position embedding resampled to the input's grid in
            the forward pass, as timm's dynamic_img_size does (models/resize.py). False (the
            default) accepts `image_size` only. Position embedding "learned_2d" is not resampled.
        dynamic_img_pad: with dynamic_img_size, pad an input (a hybrid: its feature map) on the
            right and bottom with zeros to a multiple of the patch, as timm's dynamic_img_pad.
        pos_embed_resample: how dynamic_img_size resamples the position embedding: None is
            timm's bicubic with antialias; else a method of paddle_vit/weights/resample.py
            ("bicubic" is transformers' interpolate_pos_encoding; a Hugging Face checkpoint
            implies it).
        class_token: prepend the learned class token (the paper); False for SigLIP and timm's
            `*_gap_*` models (timm's class_token).
        register_tokens: learned tokens after the class token that get no position embedding
            and are dropped by every pooling (DINOv2 with registers: 4; timm's reg_tokens).
        no_embed_class: the position embedding covers the patches only, added before the prefix
            tokens are prepended (DeiT III, DINOv2 with registers; timm's no_embed_class).
        pre_norm: a LayerNorm before the first encoder layer (CLIP's ln_pre; timm's pre_norm);
            the patch Conv2D then has no bias, as in CLIP and timm.
        layer_scale: None (the paper) or the initial value of a learned per-channel factor on
            each residual branch (DeiT III 1e-6, DINOv2 1e-5; timm's init_values).
        mlp: "standard" (Linear, GELU, Linear), "swiglu" (DINOv2 giant's gated MLP, SiLU),
            "swiglu_packed" (EVA-02 tiny and small's) or "swiglu_split" (EVA-02 base/large, DINOv3 H+).
        fc_norm: None: a LayerNorm after pooling exactly for pool "mean" (then no final encoder
            norm); True or False says so for any pool (timm's fc_norm; its `*_gap_*` models
            average after the final norm: pool "mean", fc_norm False).
        distilled: DeiT's distillation token after the class token, with its own head; the
            logits are the mean of the two heads (in training, with `set_distilled_training`,
            both are returned for the distillation loss; timm's VisionTransformerDistilled).
        drop_remainder: accept an image_size the patch does not divide, the patch Conv2D leaving
            the last image_size % patch_size rows and columns out, as timm's PatchEmbed does
            (vit_so400m_patch14_siglip_384: 27 x 27 patches of 384 px); False refuses such a size.
        recompute: activation recompute in training: 0 keeps every encoder layer's activations
            for the backward pass; k > 0 keeps only the input of every k-th layer (0, k, 2k, ...)
            and computes that layer again in the backward pass (Paddle's recompute). The numbers
            are the same; memory falls and time rises. It changes how the model runs, not what
            it is: a run may be resumed with another value.
        rope: None (the paper), or a rotary position embedding inside every attention, beside
            any position embedding added to the tokens (models/rope.py): "axial" (EVA-02, PE,
            RoPE-ViT, timm's rope GAP models), "mixed" (RoPE-ViT's learned frequencies) or
            "dinov3". position_embedding "rope_axial" / "rope_mixed" implies it.
        rope_temperature: the frequency base; None is the kind's (axial 10000, mixed 10, dinov3 100).
        rope_grid_offset: added to the patch coordinates (PE: 1).
        rope_grid_indexing: "ij" (rows first: EVA-02, DINOv3) or "xy" (columns first: PE, RoPE-ViT).
        rope_rotate_half: pair channel i with i + d/2 (DINOv3) rather than 2i with 2i+1.
        rope_ref_grid: [rows, cols] the axial coordinates are rescaled to (EVA-02's ref_feat_shape):
            at another grid the coordinates span the reference grid's range; None: patch indices.
        qkv: the q/k/v projection (models/block_parts.py): "fused" (the walkthrough's one Linear),
            "fused_qv_bias" (one Linear, biases for q and v only: EVA-02, DINOv3 _qkvb) or
            "separate" (three Linears, k without bias: EVA-02 CLIP).
        attention_norm: a norm (`norm`'s kind) over the heads' output before the projection (EVA-02
            CLIP's scale_attn_inner; BEiT-3, timm's scale_attn_norm).
        mlp_norm: a norm (`norm`'s kind) over the MLP's hidden width before its last Linear: with mlp
            "swiglu_split" EVA-02's scale_mlp, with "standard" after the GELU (BEiT-3, timm's
            scale_mlp_norm).
        mlp_align_to: with mlp "swiglu_split", its hidden width rounded up to a multiple of this
            (DINOv3 H+: 8); 0 leaves int(embed_dim * mlp_ratio).
        attn_pool_heads, attn_pool_mlp_ratio: pool "map"'s heads and MLP ratio; None: the
            encoder's (SigLIP); the Perception Encoder's pool has 8 heads whatever its width.
        norm: "layernorm" (the paper) or "rmsnorm" (timm's norm_layer="rmsnorm": x * rsqrt(mean(x^2)
            + eps) * weight, no mean subtracted, no bias; models/norms.py): every norm of the model
            but the MAP head's (norm1, norm2, the final norm, norm_pre, fc_norm), with epsilon
            layer_norm_epsilon.
        final_norm: False leaves the norm after the last encoder layer out (timm's final_norm=False:
            vit_intern300m_patch14_448; the Perception Encoder's spatial and language towers); the tokens then leave the encoder as the last layer wrote them.
        pool_include_prefix: pool "mean" or "map" over every token, the class and register tokens
            included, not the patch tokens alone (timm's pool_include_prefix: test_vit3's MAP head; the
            Perception Encoder's attention pool, timm's Eva).
        proj_bias: a bias in the attention's output projection (False: AIMv2, timm's proj_bias).
        mlp_bias: biases in the MLP's Linears; False needs mlp "swiglu_split" (AIMv2's SwiGLU;
            timm's Block gives its MLP the bias proj_bias says).
        patch_norm: a norm (`norm`'s kind) on the patch tokens right after the patch Conv2D, before
            the prefix tokens and the position embedding (AIMv2, timm's embed_norm_layer).
    """
    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    qk_scale: Optional[float] = None
    layer_norm_epsilon: float = LAYER_NORM_EPSILON
    gelu: str = "exact"
    dropout: float = 0.0
    attention_dropout: float = 0.0
    drop_path: float = 0.0
    pool: str = "cls"
    representation_size: Optional[int] = None
    position_embedding: str = "learned"
    fused_attention: bool = True
    init: str = "timm"
    backbone_layers: Optional[List[int]] = None
    backbone: str = "resnet_v2"
    backbone_width: int = 1
    backbone_style: str = "timm"
    dynamic_img_size: bool = False
    dynamic_img_pad: bool = False
    pos_embed_resample: Optional[str] = None
    class_token: bool = True
    register_tokens: int = 0
    no_embed_class: bool = False
    pre_norm: bool = False
    layer_scale: Optional[float] = None
    mlp: str = "standard"
    fc_norm: Optional[bool] = None
    distilled: bool = False
    drop_remainder: bool = False
    recompute: int = 0
    rope: Optional[str] = None
    rope_temperature: Optional[float] = None
    rope_grid_offset: float = 0.0
    rope_grid_indexing: str = "ij"
    rope_rotate_half: bool = False
    rope_ref_grid: Optional[List[int]] = None
    qkv: str = "fused"
    attention_norm: bool = False
    mlp_norm: bool = False
    mlp_align_to: int = 0
    attn_pool_heads: Optional[int] = None
    attn_pool_mlp_ratio: Optional[float] = None
    norm: str = "layernorm"
    final_norm: bool = True
    pool_include_prefix: bool = False
    proj_bias: bool = True
    mlp_bias: bool = True
    patch_norm: bool = False

    RUN_ONLY_FIELDS = ("recompute",)  # how the model runs, not what it computes

    @classmethod
    def field_names(cls):
        return [field.name for field in dataclasses.fields(cls)]

    def replace(self, **overrides):
        """A copy with `overrides` applied; an unknown name is a ConfigError naming close ones."""
        for name in overrides:
            if name not in self.field_names():
                raise ConfigError(f"unknown model argument {name!r}{close_matches(name, self.field_names())}")
        return dataclasses.replace(self, **overrides)

    def validate(self):
        """Raise ConfigError for a model that cannot be built."""
        for name in ("image_size", "patch_size", "in_channels", "embed_dim", "num_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.depth, int) or isinstance(self.depth, bool) or self.depth < 0:
            raise ConfigError(f"model.depth must be an integer >= 0 (0: no Transformer layer), got {self.depth!r}")
        if not isinstance(self.recompute, int) or isinstance(self.recompute, bool) or self.recompute < 0:
            raise ConfigError(f"model.recompute must be true, false or k >= 0 (every k-th encoder layer), "
                              f"got {self.recompute!r}")
        if not isinstance(self.num_classes, int) or self.num_classes < 0:
            raise ConfigError(f"model.num_classes must be an integer >= 0, got {self.num_classes!r}")
        for name in ("dropout", "attention_dropout", "drop_path"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {value!r}")
        if self.mlp_ratio <= 0:
            raise ConfigError(f"model.mlp_ratio must be > 0, got {self.mlp_ratio!r}")
        if not _positive_finite(self.layer_norm_epsilon) or self.layer_norm_epsilon > 1e-3:
            raise ConfigError(f"model.layer_norm_epsilon must be a finite number > 0 and <= 1e-3 (Paddle's "
                              f"LayerNorm takes no more; ViT: 1e-6), got {self.layer_norm_epsilon!r}")
        if self.qk_scale is not None and not _positive_finite(self.qk_scale):
            raise ConfigError(f"model.qk_scale must be a finite number > 0, or null for head_dim^-0.5, "
                              f"got {self.qk_scale!r}")
        check_choice("model.gelu", self.gelu, GELUS)
        check_choice("model.pool", self.pool, POOLS)
        check_choice("model.init", self.init, INITS)
        check_choice("model.position_embedding", self.position_embedding,
                     POSITION_EMBEDDINGS + tuple(ROPE_POSITION_EMBEDDINGS))
        if self.representation_size is not None and self.representation_size <= 0:
            raise ConfigError(f"model.representation_size must be a positive integer or null, "
                              f"got {self.representation_size!r}")
        if self.embed_dim % self.num_heads != 0:
            raise ConfigError(f"model.embed_dim {self.embed_dim} is not divisible by model.num_heads "
                              f"{self.num_heads}: choose num_heads among the divisors of {self.embed_dim}")
        check_choice("model.backbone_style", self.backbone_style, tuple(STYLES))
        check_choice("model.backbone", self.backbone, BACKBONES)
        if self.is_hybrid:
            self._validate_backbone()
        self._validate_dynamic_size()
        self._validate_tokens()
        self._validate_block_parts()
        self._validate_attention_pool()
        self._validate_rope()
        self.token_grid()
        return self

    @property
    def rope_kind(self):
        """The rotary embedding's kind ("axial", "mixed", "dinov3"), or None for none."""
        return self.rope or ROPE_POSITION_EMBEDDINGS.get(self.position_embedding)

    @property
    def absolute_position_embedding(self):
        """The kind of position embedding added to the tokens: RoPE's own kinds add none."""
        return "none" if self.position_embedding in ROPE_POSITION_EMBEDDINGS else self.position_embedding

    def _validate_block_parts(self):
        check_choice("model.qkv", self.qkv, QKV_LAYOUTS)
        if self.qkv == "fused_qv_bias" and not self.qkv_bias:
            raise ConfigError("model.qkv 'fused_qv_bias' has biases for q and v: it needs model.qkv_bias: true "
                              "(without biases the walkthrough's 'fused' computes the same)")
        for name in ("attention_norm", "mlp_norm", "proj_bias", "mlp_bias", "patch_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"model.{name} must be true or false, got {getattr(self, name)!r}")
        align = self.mlp_align_to
        if not isinstance(align, int) or isinstance(align, bool) or align < 0:
            raise ConfigError(f"model.mlp_align_to must be an integer >= 0 (0: int(embed_dim * mlp_ratio)), "
                              f"got {align!r}")
        if align and self.mlp != "swiglu_split":
            raise ConfigError("model.mlp_align_to rounds the width of the gated MLP with separate gate and "
                              "value Linears: it needs model.mlp: swiglu_split")
        if self.mlp_norm and self.mlp not in ("standard", "swiglu_split"):
            raise ConfigError(f"model.mlp_norm is built for model.mlp 'standard' (BEiT-3) and 'swiglu_split' "
                              f"(EVA-02), not {self.mlp!r}")
        if not self.mlp_bias and self.mlp != "swiglu_split":
            raise ConfigError(f"model.mlp_bias: false is built for model.mlp 'swiglu_split' (AIMv2), not "
                              f"{self.mlp!r}")

    def _validate_attention_pool(self):
        heads = self.attn_pool_heads
        if heads is not None and (isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0
                                  or self.embed_dim % heads):
            raise ConfigError(f"model.attn_pool_heads must be null (the encoder's) or a positive divisor of "
                              f"embed_dim {self.embed_dim}, got {heads!r}")
        if self.attn_pool_mlp_ratio is not None and not _positive_finite(self.attn_pool_mlp_ratio):
            raise ConfigError(f"model.attn_pool_mlp_ratio must be null (the encoder's) or a number > 0, "
                              f"got {self.attn_pool_mlp_ratio!r}")
        if not isinstance(self.final_norm, bool):
            raise ConfigError(f"model.final_norm must be true or false, got {self.final_norm!r}")

    def _validate_rope(self):
        if self.rope is not None:
            check_choice("model.rope", self.rope, ROPE_KINDS)
            implied = ROPE_POSITION_EMBEDDINGS.get(self.position_embedding)
            if implied is not None and implied != self.rope:
                raise ConfigError(f"model.position_embedding {self.position_embedding!r} is rotary of kind "
                                  f"{implied!r}, but model.rope says {self.rope!r}: set one of them")
        check_choice("model.rope_grid_indexing", self.rope_grid_indexing, GRID_INDEXINGS)
        if self.rope_temperature is not None and not _positive_finite(self.rope_temperature):
            raise ConfigError(f"model.rope_temperature must be a finite number > 0, or null for the kind's own, "
                              f"got {self.rope_temperature!r}")
        if (isinstance(self.rope_grid_offset, bool) or not isinstance(self.rope_grid_offset, (int, float))
                or not math.isfinite(self.rope_grid_offset)):
            raise ConfigError(f"model.rope_grid_offset must be a finite number, got {self.rope_grid_offset!r}")
        if not isinstance(self.rope_rotate_half, bool):
            raise ConfigError(f"model.rope_rotate_half must be true or false, got {self.rope_rotate_half!r}")
        ref = self.rope_ref_grid
        if ref is not None and (not isinstance(ref, (list, tuple)) or len(ref) != 2 or not all(
                isinstance(side, int) and not isinstance(side, bool) and side > 0 for side in ref)):
            raise ConfigError(f"model.rope_ref_grid must be null or [rows, cols] of the grid the rotary "
                              f"coordinates are scaled to (EVA-02: [16, 16]), got {ref!r}")
        kind = self.rope_kind
        if kind is None:
            return
        check_rope_head_dim(kind, self.embed_dim, self.num_heads, self.rope_rotate_half)
        if self.is_hybrid:
            raise ConfigError("model.rope is built for patches cut from the image, not a hybrid's ResNet feature map")
        if ref is not None and kind != "axial":
            raise ConfigError(f"model.rope_ref_grid rescales the axial RoPE's coordinates; RoPE {kind!r} has none")

    def _validate_tokens(self):
        for name in ("class_token", "no_embed_class", "pre_norm", "distilled", "drop_remainder", "final_norm",
                     "pool_include_prefix"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"model.{name} must be true or false, got {getattr(self, name)!r}")
        if self.fc_norm is not None and not isinstance(self.fc_norm, bool):
            raise ConfigError(f"model.fc_norm must be null (as the pool says), true or false, got {self.fc_norm!r}")
        tokens = self.register_tokens
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise ConfigError(f"model.register_tokens must be an integer >= 0, got {tokens!r}")
        if self.layer_scale is not None and (isinstance(self.layer_scale, bool) or not isinstance(
                self.layer_scale, (int, float)) or not math.isfinite(self.layer_scale)):
            raise ConfigError(f"model.layer_scale must be null (no layer scale) or a finite number, the initial "
                              f"factor (DeiT III 1e-6, DINOv2 1e-5), got {self.layer_scale!r}")
        check_choice("model.mlp", self.mlp, MLPS)
        check_choice("model.norm", self.norm, NORMS)
        if self.pool_include_prefix and self.pool not in ("mean", "map"):
            raise ConfigError(f"model.pool_include_prefix pools every token by 'mean' or 'map'; model.pool "
                              f"{self.pool!r} reads its own tokens: set pool_include_prefix: false")
        if self.norm != "layernorm" and self.pool == "map":
            raise ConfigError("model.norm 'rmsnorm' with pool 'map' is not built: the MAP head's norm is a LayerNorm")
        if self.pool == "cls" and not self.class_token:
            raise ConfigError("model.pool 'cls' reads the class token, which model.class_token: false leaves out: "
                              "pool by 'mean' or 'map'")
        if self.distilled and (not self.class_token or self.pool != "cls" or self.representation_size
                               or self.fc_norm):
            raise ConfigError("model.distilled reads the class and distillation tokens with a head each: it needs "
                              "model.class_token: true, pool 'cls', no representation_size and no fc_norm")
        default_prefix = self.class_token and not (self.distilled or tokens or self.no_embed_class)
        if self.position_embedding in ("learned_2d", "sincos_2d") and not default_prefix:
            raise ConfigError(f"model.position_embedding {self.position_embedding!r} is built for the class token "
                              f"alone: no distillation or register tokens, no no_embed_class")

    @property
    def num_prefix_tokens(self):
        """Tokens before the patches: class, distillation and register tokens."""
        return int(self.class_token) + int(self.distilled) + self.register_tokens

    @property
    def uses_fc_norm(self):
        """Whether a LayerNorm follows the pooling (and the encoder then has no final norm)."""
        return self.pool == "mean" if self.fc_norm is None else self.fc_norm

    def _validate_backbone(self):
        layers = self.backbone_layers
        if (not isinstance(layers, (list, tuple)) or len(layers) > len(STAGE_CHANNELS)
                or not all(isinstance(depth, int) and not isinstance(depth, bool) and depth > 0 for depth in layers)):
            raise ConfigError(f"model.backbone_layers must be null (no ResNet) or a list of at most "
                              f"{len(STAGE_CHANNELS)} positive unit counts such as [3, 4, 9], got {layers!r}")
        if not isinstance(self.backbone_width, int) or isinstance(self.backbone_width, bool) or self.backbone_width < 1:
            raise ConfigError(f"model.backbone_width must be a positive integer, got {self.backbone_width!r}")
        if self.backbone == "resnet_d" and self.backbone_width != 1:
            raise ConfigError(f"model.backbone_width {self.backbone_width} is built for backbone 'resnet_v2'; "
                              f"timm's ResNet-D has width 1")

    def _validate_dynamic_size(self):
        for name in ("dynamic_img_size", "dynamic_img_pad"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"model.{name} must be true or false, got {getattr(self, name)!r}")
        if self.dynamic_img_pad and not self.dynamic_img_size:
            raise ConfigError("model.dynamic_img_pad pads inputs of other sizes, which only a model with "
                              "model.dynamic_img_size: true takes: set both")
        if self.dynamic_img_size and self.position_embedding == "learned_2d":
            raise ConfigError("model.dynamic_img_size resamples position embeddings 'learned', 'sincos_2d' or "
                              "'none', not 'learned_2d'")
        if self.pos_embed_resample is not None and self.pos_embed_resample not in RESIZE_METHODS:
            raise ConfigError(f"model.pos_embed_resample must be null (timm's bicubic_antialias) or one of "
                              f"{', '.join(RESIZE_METHODS)}, got {self.pos_embed_resample!r}")

    @property
    def is_hybrid(self):
        return self.backbone_layers is not None

    def feature_size(self):
        """(rows, cols) the patch Conv2D reads: the image, or a hybrid's ResNet feature map."""
        if self.is_hybrid:
            return backbone_feature_size(self.backbone_layers, self.image_size)
        return (self.image_size, self.image_size)

    def token_grid(self):
        """(rows, cols) of patch tokens; an image or feature map the patch does not divide is an error."""
        if not self.is_hybrid:
            return grid_size(self.image_size, self.patch_size, self.drop_remainder)
        rows, cols = self.feature_size()
        if rows % self.patch_size or cols % self.patch_size:
            raise ConfigError(f"model.image_size {self.image_size} gives the ResNet's {rows}x{cols} feature map, "
                              f"which patch_size {self.patch_size} does not divide: choose an image size whose "
                              f"feature map (image / {4 * 2 ** max(len(self.backbone_layers) - 1, 0)}) it divides")
        return rows // self.patch_size, cols // self.patch_size

    @property
    def num_patches(self):
        rows, cols = self.token_grid()
        return rows * cols

    @property
    def patch_channels(self):
        """Channels of what the patch Conv2D reads: the image's, or the ResNet's output."""
        return backbone_channels(self.backbone_layers, self.backbone_width) if self.is_hybrid else self.in_channels

    def count_macs(self):
        """Multiply-accumulates of one forward pass of one image, counted analytically."""
        tokens = self.num_patches + self.num_prefix_tokens
        width, hidden = self.embed_dim, int(self.embed_dim * self.mlp_ratio)
        mlp = width * hidden + (hidden // 2 if self.mlp == "swiglu" else hidden) * width  # per token
        if self.mlp in ("swiglu_packed", "swiglu_split"):  # gate and value Linears, then one back
            mlp = 3 * width * swiglu_hidden_dim(width, self.mlp_ratio, self.mlp_align_to)
        patch_embed = self.num_patches * width * self.patch_channels * self.patch_size ** 2
        if self.is_hybrid and self.backbone == "resnet_d":
            patch_embed += resnet_d_macs(self.backbone_layers, self.in_channels, self.image_size)
        elif self.is_hybrid:
            patch_embed += backbone_macs(self.backbone_layers, self.backbone_width, self.in_channels, self.image_size)
        per_layer = (tokens * width * 3 * width  # qkv
                     + 2 * tokens * tokens * width  # q k^T and attention @ v
                     + tokens * width * width  # proj
                     + tokens * mlp)  # mlp
        head_in = self.representation_size or width
        head = (width * self.representation_size if self.representation_size else 0) + head_in * self.num_classes
        if self.distilled:
            head *= 2
        if self.pool == "map":  # one query: q, k and v of every token, proj, the MLP
            pool_hidden = int(width * (self.attn_pool_mlp_ratio or self.mlp_ratio))
            head += 2 * width * width + 2 * tokens * width * width + 2 * tokens * width + 2 * width * pool_hidden
        return patch_embed + self.depth * per_layer + head


def _positive_finite(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)

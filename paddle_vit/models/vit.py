"""The Vision Transformer: patch embedding, encoder, pooling and classification head."""
import dataclasses
import math

import paddle
import paddle.nn as nn

from ..errors import ConfigError
from .config import ViTConfig
from .encoder import Encoder
from .features import forward_intermediates, prune_intermediate_layers
from .norms import norm_layer
from .patch_embed import PatchEmbedding
from .block_parts import QVBiasLinear
from .pooling import AttentionPool
from .resnet import ResNetV2, StdConv2D
from .resnet_d import ResNetD
from .rope import build_rope
from .token_embed import HybridEmbedding, TokenEmbedding, is_walkthrough_embedding


def build_embedding(config):
    """The patch embedding `config` asks for: the walkthrough's `PatchEmbedding` (the paper's ViTs),
    else `TokenEmbedding` with the options of later ViTs, `HybridEmbedding` after a ResNet."""
    if config.is_hybrid and config.backbone == "resnet_d":  # timm's vit_*_resnet26d / resnet50d
        return HybridEmbedding(config, ResNetD(config.backbone_layers, config.in_channels))
    if config.is_hybrid:
        backbone = ResNetV2(config.backbone_layers, config.backbone_width, config.in_channels, config.backbone_style)
        return HybridEmbedding(config, backbone)
    if is_walkthrough_embedding(config):
        return PatchEmbedding(config.image_size, config.patch_size, config.in_channels, config.embed_dim,
                              config.dropout)
    return TokenEmbedding(config)


class PreLogits(nn.Layer):
    """The paper's pre-training head hidden layer: Linear + tanh, [B, D] -> [B, R]."""

    def __init__(self, embed_dim, representation_size):
        super().__init__()
        self.fc = nn.Linear(embed_dim, representation_size)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x))


class ViT(nn.Layer):
    """Vision Transformer, [B, C, H, W] images -> [B, num_classes] logits.

    Build it from a `ViTConfig` or from its fields as keyword arguments:
    ``ViT(ViTConfig(depth=6))``, ``ViT(depth=6)``, or by name with ``paddle_vit.create_model``.
    """

    def __init__(self, config=None, **overrides):
        super().__init__()
        config = (config or ViTConfig()).replace(**overrides).validate()
        self.config = config
        self.class_names = None  # set from a checkpoint that records them (create_model(pretrained=...))
        self.head_is_projection = False  # CLIP's proj as the head: an embedding, not class scores
        self.num_classes = config.num_classes
        self.embed_dim = config.embed_dim
        self.patch_embed = build_embedding(config)
        self.rope = build_rope(config)  # None: the paper's ViT, no rotary position embedding
        self.encoder = Encoder(config, final_norm=config.final_norm and not config.uses_fc_norm)
        if config.pool == "walkthrough":
            self.avgpool = nn.AdaptiveAvgPool1D(1)
        elif config.pool == "map":
            self.attn_pool = AttentionPool(config.embed_dim, config.attn_pool_heads or config.num_heads,
                                           config.attn_pool_mlp_ratio or config.mlp_ratio, config.gelu,
                                           config.layer_norm_epsilon)
        self.fc_norm = (norm_layer(config.norm, config.embed_dim, config.layer_norm_epsilon) if config.uses_fc_norm
                        else nn.Identity())
        if config.representation_size:
            self.pre_logits = PreLogits(config.embed_dim, config.representation_size)
        self.num_features = config.representation_size or config.embed_dim
        self.head = self._head(config.num_classes)
        if config.distilled:  # DeiT: the distillation token's own head
            self.head_dist = self._head(config.num_classes)
        self.distilled_training = False  # set_distilled_training: both heads' logits in training
        self.init_weights(config.init)

    # ---- the forward pass -------------------------------------------------------------------
    def forward_features(self, x, return_attention=False):
        """[B, C, H, W] -> tokens [B, 1 + N, D] after the encoder (and, with the per-layer
        attention weights [B, H, 1 + N, 1 + N], when `return_attention`)."""
        self.check_input_size(x)
        rope = self.rope_for(x)  # RoPE ViTs: the rotary table of the input's patch grid
        x = self.patch_embed(x)  # [B, 1 + N, D]
        return self.encoder(x, return_attention=return_attention, rope=rope)

    def rope_for(self, x):
        """The rotary position embedding of input `x` [B, C, H, W]'s patch grid (models/rope.py),
        or None for a model without one."""
        if self.rope is None:
            return None
        if self.config.dynamic_img_size:
            rows, cols = self.patch_embed.token_grid_for(x.shape[2], x.shape[3])
        else:  # the built grid (also while a graph is traced, where the input's size is unknown)
            rows, cols = self.config.token_grid()
        return self.rope(rows, cols)

    def check_input_size(self, x):
        """A model built without dynamic_img_size takes its image_size alone: another size is a
        ConfigError saying what to do (the walkthrough's embedding would fail at its add)."""
        height, width = x.shape[2], x.shape[3]
        size = self.config.image_size
        if self.config.dynamic_img_size or height <= 0 or width <= 0:  # -1 while tracing to_static
            return
        if (height, width) != (size, size):
            raise ConfigError(
                f"input is {height}x{width} but the model was built for {size}x{size}: "
                f"resize the images, or build the model with image_size={height} and load the weights "
                f"with paddle_vit.load_pretrained, which resamples the position embedding")

    def pool_tokens(self, x):
        """[B, 1 + N, D] -> [B, D] as `config.pool` says, then `fc_norm` (an Identity unless
        `config.uses_fc_norm`)."""
        pool = self.config.pool
        # the patch tokens, or with pool_include_prefix every token (timm's pool_include_prefix)
        first = 0 if self.config.pool_include_prefix else self.patch_embed.num_prefix_tokens
        if pool == "cls":
            x = x[:, 0]  # the class token (paper Eq. 4)
        elif pool == "mean":
            x = self.average_tokens(x[:, first:])
        elif pool == "map":  # a learned query attends over the patch tokens (SigLIP), as timm's
            x = self.attn_pool(x[:, first:])
        elif pool == "first_patch":
            x = x[:, self.patch_embed.num_prefix_tokens]  # PaddleClas's CLIP base/16 classifier
        else:
            x = x.transpose([0, 2, 1])  # walkthrough: [B, 1 + N, D] -> [B, D, 1 + N]
            x = self.avgpool(x)  # [B, D, 1]
            x = x.flatten(1)  # [B, D]
        return self.fc_norm(x)

    def average_tokens(self, x):
        return x.mean(axis=1)  # [B, N, D] -> [B, D]

    def forward_head(self, x, pre_logits=False):
        """Tokens [B, 1 + N, D] -> logits [B, num_classes], or the pooled features
        [B, num_features] (after the pre-logits layer, if any) when `pre_logits`."""
        if self.config.distilled:
            return self.distilled_head(x, pre_logits)
        x = self.pool_tokens(x)  # [B, D]
        if self.config.representation_size:
            x = self.pre_logits(x)  # [B, R]
        return x if pre_logits else self.head(x)

    def distilled_head(self, x, pre_logits=False):
        """DeiT: the class token through `head`, the distillation token through `head_dist`,
        [B, T + N, D] -> the mean of the two, [B, num_classes] (the features' mean with
        `pre_logits`); in training after `set_distilled_training(True)`, the pair."""
        class_features, distillation_features = x[:, 0], x[:, 1]  # [B, D] each
        if pre_logits:
            return (class_features + distillation_features) / 2
        logits, distillation_logits = self.head(class_features), self.head_dist(distillation_features)
        if self.distilled_training and self.training:
            return logits, distillation_logits
        return (logits + distillation_logits) / 2

    def set_distilled_training(self, enable=True):
        """A distilled model returns both heads' logits in training (for DeiT's loss), as timm's."""
        self.distilled_training = enable

    def forward(self, x):
        x = self.forward_features(x)  # [B, 1 + N, D]
        return self.forward_head(x)  # [B, num_classes]

    # ---- features for dense tasks (timm's API) ------------------------------------------------
    def forward_intermediates(self, x, indices=None, norm=False, output_fmt="NCHW", intermediates_only=False,
                              return_prefix_tokens=False, stop_early=False, output_dict=False):
        """The tokens after chosen encoder layers, for a segmentation or detection head, as timm's
        `VisionTransformer.forward_intermediates` computes them (models/features.py).

        indices: None = every layer; an int n = the last n; a list = those layers (negative
            counting from the end).
        norm: put each through the final LayerNorm. output_fmt: "NCHW" = [B, D, h, w] maps,
            "NLC" = [B, h w, D] patch tokens. return_prefix_tokens: each entry a pair (patch
            features, prefix tokens [B, T, D]: the class token and any other).
        Returns (final normed tokens [B, 1 + N, D], the list), or the list alone with
        `intermediates_only`, or with `output_dict` a dict as timm's.
        """
        return forward_intermediates(self, x, indices, norm, output_fmt, intermediates_only, return_prefix_tokens,
                                     stop_early, output_dict)

    def prune_intermediate_layers(self, indices=1, prune_norm=False, prune_head=True):
        """Drop the encoder layers after the last of `indices` (as in forward_intermediates), the
        final norm with `prune_norm`, the head (fc_norm, pre-logits, classifier) with `prune_head`,
        as timm's does; returns the absolute indices kept."""
        return prune_intermediate_layers(self, indices, prune_norm, prune_head)

    @paddle.no_grad()
    def get_attention_maps(self, x):
        """The attention weights of every layer, a list of depth x [B, H, 1 + N, 1 + N], computed
        with the explicit kernel whatever `fused_attention` says."""
        return self.forward_features(x, return_attention=True)[1]

    # ---- fine-tuning helpers -----------------------------------------------------------------
    def reset_classifier(self, num_classes):
        """Replace the head by a zero-initialised one with `num_classes` outputs (paper Section
        3.2: "a zero-initialized D x K feedforward layer"); 0 removes the head."""
        self.num_classes = num_classes
        self.config = dataclasses.replace(self.config, num_classes=num_classes)
        self.head = self._zero_head(num_classes)
        if self.config.distilled:
            self.head_dist = self._zero_head(num_classes)

    def _head(self, num_classes):
        return nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def _zero_head(self, num_classes):
        head = self._head(num_classes)
        if isinstance(head, nn.Linear):
            nn.initializer.Constant(0.0)(head.weight)
            nn.initializer.Constant(0.0)(head.bias)
        return head

    def no_weight_decay_parameters(self):
        """The parameters AdamW should not decay: biases, LayerNorm weights, the class token and
        position embeddings. Returned as parameters, not names: the names Paddle's optimizer
        gives `apply_decay_param_fun` are not `named_parameters()`'s (docs/design.md)."""
        embedding_parameters = [parameter for name, parameter in
                                self.patch_embed.named_parameters(include_sublayers=False)]
        if self.rope is not None:  # mixed RoPE's frequencies, as timm's no_weight_decay
            embedding_parameters += list(self.rope.parameters())
        vectors = [parameter for parameter in self.parameters() if parameter.ndim <= 1]
        return embedding_parameters + vectors

    # ---- initialisation ----------------------------------------------------------------------
    def init_weights(self, scheme="timm"):
        """Initialise as timm does ("timm") or as the original JAX code does ("jax")."""
        zeros = nn.initializer.Constant(0.0)
        ones = nn.initializer.Constant(1.0)
        for name, layer in self.named_sublayers():
            if isinstance(layer, nn.Linear):
                if scheme == "jax":
                    nn.initializer.XavierUniform()(layer.weight)
                else:
                    nn.initializer.TruncatedNormal(std=0.02)(layer.weight)
                if layer.bias is not None:
                    if scheme == "jax" and name.endswith(("mlp.fc1", "mlp.fc2")):
                        nn.initializer.Normal(std=1e-6)(layer.bias)
                    else:
                        zeros(layer.bias)
            elif isinstance(layer, QVBiasLinear):  # a Linear with q and v biases: as timm's Eva
                nn.initializer.TruncatedNormal(std=0.02)(layer.weight)
                zeros(layer.q_bias)
                zeros(layer.v_bias)
            elif isinstance(layer, nn.LayerNorm):
                ones(layer.weight)
                zeros(layer.bias)
            elif isinstance(layer, nn.Conv2D) and not isinstance(layer, StdConv2D):  # the backbone's: below
                fan_in = layer.weight.shape[1] * layer.weight.shape[2] * layer.weight.shape[3]
                bound = 1.0 / math.sqrt(fan_in)
                if scheme == "jax":  # lecun normal: truncated normal with variance 1 / fan_in
                    nn.initializer.TruncatedNormal(std=math.sqrt(1.0 / fan_in) / 0.87962566103423978)(layer.weight)
                else:  # PyTorch's Conv2d default, which timm keeps for the patch embedding
                    nn.initializer.Uniform(-bound, bound)(layer.weight)
                if layer.bias is not None:  # CLIP's has none
                    (zeros if scheme == "jax" else nn.initializer.Uniform(-bound, bound))(layer.bias)
        tokens = dict(self.patch_embed.named_parameters(include_sublayers=False))  # those the config asked for
        if scheme == "jax":
            if "class_token" in tokens:
                zeros(tokens["class_token"])
            if isinstance(self.head, nn.Linear):
                zeros(self.head.weight)
                zeros(self.head.bias)
        else:  # as timm: the class and register tokens near zero, the distillation token like the positions
            for name in ("class_token", "register_tokens"):
                if name in tokens:
                    nn.initializer.Normal(std=1e-6)(tokens[name])
            if "distillation_token" in tokens:
                nn.initializer.TruncatedNormal(std=0.02)(tokens["distillation_token"])
        if self.config.is_hybrid:
            self.patch_embed.backbone.init_weights()

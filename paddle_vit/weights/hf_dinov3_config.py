"""What the config.json of a transformers DINOv3 folder (model_type ``dinov3_vit``, `DINOv3ViTModel`)
says about how the model computes, as `ViTConfig` fields (folders.py `hf_options` reads the sizes;
hf_dinov3.py reads the tensors). Whatever this ViT does not compute is refused in one line naming
config.json and the key.

transformers computes DINOv3 one way whatever its config says beside these keys: no position
embedding added, DINOv3's RoPE (patch centres in [-1, 1], rows first, rotate-half pairs, base
``rope_theta``) on q and k of the patch tokens, the class token then ``num_register_tokens``
registers before the patches, layer scale on both branches, the final LayerNorm over every token
and ``pooler_output`` its class token. It takes any input size and floors the grid: the patch
Conv2D leaves the last H % 16 rows and W % 16 columns out (``dynamic_img_size`` with
``drop_remainder`` here). ``pos_embed_shift``, ``pos_embed_jitter`` and ``pos_embed_rescale`` move
the RoPE coordinates in training only.
"""
import math

from ..errors import WeightsError
from .family import Implied

# DINOv3ViTConfig's defaults (transformers 5): what a config.json that leaves a key out computes
DINOV3_DEFAULTS = {"hidden_size": 384, "num_attention_heads": 6, "intermediate_size": 1536, "layer_norm_eps": 1e-5,
                   "hidden_act": "gelu", "rope_theta": 100.0, "num_register_tokens": 0, "layerscale_value": 1.0,
                   "use_gated_mlp": False, "query_bias": True, "key_bias": False, "value_bias": True,
                   "proj_bias": True, "mlp_bias": True}
# the activation each MLP computes here: the plain MLP's exact GELU, the gated MLP's SiLU (SwiGLU)
DINOV3_ACTIVATIONS = {False: "gelu", True: "silu"}


def _flag(tower, key):
    value, reason = tower.setting(key)
    if not isinstance(value, bool):
        raise WeightsError(f"{tower.where(key)} must be true or false, got {value!r}")
    return value, reason


def _number(tower, key, check, wanted):
    value, reason = tower.setting(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not check(value):
        raise WeightsError(f"{tower.where(key)} must be {wanted}, got {value!r}")
    return float(value), reason


def dinov3_options(tower):
    """{ViTConfig field: Implied} of a DINOv3 `HFTower` (config.json's values, DINOv3ViTConfig's
    defaults for the keys it leaves out): the computation beside the sizes."""
    because = f"{tower.path}: model_type 'dinov3_vit' (DINOv3ViTModel)"
    for key, needs in (("proj_bias", "an attention output projection without bias"),
                       ("mlp_bias", "MLP Linears without bias")):
        value, _ = _flag(tower, key)
        if not value:
            raise WeightsError(f"{tower.where(key)} false asks for {needs}, which this ViT does not build")
    key_bias, _ = _flag(tower, "key_bias")
    if key_bias:
        raise WeightsError(f"{tower.where('key_bias')} true asks for a bias on k (rotated with k by DINOv3's RoPE), "
                           f"which this ViT's separate q/k/v projections do not have")
    query_bias, query_reason = _flag(tower, "query_bias")
    value_bias, _ = _flag(tower, "value_bias")
    if query_bias != value_bias:
        raise WeightsError(f"{tower.where('query_bias')} {str(query_bias).lower()} with value_bias "
                           f"{str(value_bias).lower()}: this ViT has biases on both q and v or on neither")
    gated, gated_reason = _flag(tower, "use_gated_mlp")
    activation, activation_reason = tower.setting("hidden_act")
    if activation != DINOV3_ACTIVATIONS[gated]:
        kind = "gated MLP (use_gated_mlp true)" if gated else "plain MLP (use_gated_mlp false)"
        raise WeightsError(f"{tower.where('hidden_act')} {activation!r} with the {kind}: this ViT computes "
                           f"{DINOV3_ACTIVATIONS[gated]!r} there")
    epsilon, epsilon_reason = _number(tower, "layer_norm_eps", lambda value: 0 < value <= 1e-3,
                                      "a LayerNorm epsilon > 0 and <= 1e-3 (Paddle's limit)")
    theta, theta_reason = _number(tower, "rope_theta", lambda value: value > 0, "a number > 0 (the RoPE base)")
    scale, scale_reason = _number(tower, "layerscale_value", lambda value: True, "a number")
    registers, registers_reason = tower.setting("num_register_tokens")
    if isinstance(registers, bool) or not isinstance(registers, int) or registers < 0:
        raise WeightsError(f"{tower.where('num_register_tokens')} must be an integer >= 0, got {registers!r}")
    if "hidden_size" in tower.values or "num_attention_heads" in tower.values:
        width, _ = tower.setting("hidden_size")
        heads, _ = tower.setting("num_attention_heads")
        if isinstance(width, int) and isinstance(heads, int) and heads > 0 and (width % heads or
                                                                                  (width // heads) % 4):
            raise WeightsError(f"{tower.where('num_attention_heads')} {heads} gives heads of {width} / {heads} "
                               f"channels; DINOv3's RoPE turns a quarter of a head's channels per grid axis: "
                               f"hidden_size / num_attention_heads must be a whole multiple of 4")
    options = {
        "layer_norm_epsilon": Implied(epsilon, epsilon_reason),
        "gelu": Implied("exact", activation_reason),
        "mlp": Implied("swiglu_split" if gated else "standard", gated_reason),
        "mlp_align_to": Implied(0, f"{gated_reason}: the MLP is intermediate_size wide"),
        "mlp_norm": Implied(False, because),
        "qkv": Implied("separate", f"{because}: q_proj, k_proj and v_proj, k without bias"),
        "qkv_bias": Implied(query_bias, query_reason),
        "attention_norm": Implied(False, because),
        "layer_scale": Implied(scale, f"{scale_reason}: layer_scale1/2.lambda1 in every layer"),
        "register_tokens": Implied(registers, registers_reason),
        "rope": Implied("dinov3", f"{because}: DINOv3's RoPE on q and k of the patch tokens"),
        "rope_temperature": Implied(theta, theta_reason),
        "rope_rotate_half": Implied(True, f"{because}: rotate_half pairs channel i with i + d/2"),
        "rope_grid_indexing": Implied("ij", f"{because}: the coordinates are (row, column)"),
        "rope_grid_offset": Implied(0.0, f"{because}: patch centres in [-1, 1]"),
        "rope_ref_grid": Implied(None, because),
        "position_embedding": Implied("none", f"{because}: no position embedding added to the tokens"),
        "dynamic_img_size": Implied(True, f"{because}: any input size, the RoPE grid recomputed"),
        "drop_remainder": Implied(True, f"{because}: the patch Conv2D floors the grid (H // 16, W // 16)"),
        "pool": Implied("cls", f"{because}: pooler_output is the class token after the final LayerNorm"),
        "fc_norm": Implied(False, because),
        "final_norm": Implied(True, because),
        "pos_embed_resample": Implied(None, f"{because}: no position embedding to resample"),
    }
    return options

"""The ``model_args`` of a timm Hub folder of the RoPE generation (timm's `Eva` class), as the
`ViTConfig` fields they fix (folders.py reads the rest, the arguments `Eva` shares with
`VisionTransformer`). An argument asking for what this ViT does not build is refused by key."""
from ..errors import WeightsError
from .family import Implied

# Eva arguments that map onto a ViTConfig field one to one
EVA_ARGUMENTS = {"num_reg_tokens": "register_tokens", "use_fc_norm": "fc_norm",
                 "rope_temperature": "rope_temperature", "rope_grid_offset": "rope_grid_offset",
                 "rope_grid_indexing": "rope_grid_indexing", "rope_rotate_half": "rope_rotate_half",
                 "scale_attn_inner": "attention_norm", "use_pre_transformer_norm": "pre_norm",
                 "use_post_transformer_norm": "final_norm", "attn_pool_num_heads": "attn_pool_heads",
                 "attn_pool_mlp_ratio": "attn_pool_mlp_ratio", "swiglu_align_to": "mlp_align_to"}
ROPE_TYPES = {"cat": "axial", "mixed": "mixed", "dinov3": "dinov3"}
# Eva arguments this ViT computes at one value only
EVA_FIXED = {"use_post_norm": (False, "post-norm blocks"), "qk_norm": (False, "q/k normalisation"),
             "num_kv_heads": (None, "grouped-query attention"), "attn_only_layer_scale": (False, "layer scale on "
                                                                                          "the attention alone"),
             "gated_attn": (False, "gated attention"), "rope_mrope_section": (None, "multimodal RoPE"),
             "head_init_scale": (None, None), "rope_shift_coords": (None, None), "rope_jitter_coords": (None, None),
             "rope_rescale_coords": (None, None)}
EVA_KEYS = set(EVA_ARGUMENTS) | set(EVA_FIXED) | {"use_abs_pos_emb", "use_rot_pos_emb", "rope_type", "ref_feat_shape",
                                                  "qkv_fused", "attn_type", "swiglu_mlp", "scale_mlp"}


def eva_options(model_args, registered, path):
    """{ViTConfig field: Implied} of the Eva arguments among `model_args`; `registered` is the
    architecture's registered ViTConfig (what the folder's own arguments change)."""
    options = {}

    def where(key):
        return f"{path}: model_args.{key} = {model_args[key]!r}"

    for key, field in EVA_ARGUMENTS.items():
        if key in model_args:
            options[field] = Implied(model_args[key], where(key))
    for key, (accepted, needs) in EVA_FIXED.items():
        if key in model_args and model_args[key] != accepted and needs is not None:
            raise WeightsError(f"{where(key)} asks for {needs}, which this ViT does not build")
    if "use_abs_pos_emb" in model_args:
        options["position_embedding"] = Implied("learned" if model_args["use_abs_pos_emb"] else "none",
                                                where("use_abs_pos_emb"))
    if "rope_type" in model_args and model_args["rope_type"] not in ROPE_TYPES:
        raise WeightsError(f"{where('rope_type')}: this ViT builds the RoPE types {', '.join(ROPE_TYPES)}")
    rope = ROPE_TYPES.get(model_args.get("rope_type"), registered.rope or "axial")
    if "use_rot_pos_emb" in model_args or "rope_type" in model_args:
        on = model_args.get("use_rot_pos_emb", registered.rope is not None)
        options["rope"] = Implied(rope if on else None, where("use_rot_pos_emb" if "use_rot_pos_emb" in model_args
                                                               else "rope_type"))
    if "ref_feat_shape" in model_args:
        shape = model_args["ref_feat_shape"]
        options["rope_ref_grid"] = Implied(None if shape is None else ([shape, shape] if isinstance(shape, int)
                                                                        else list(shape)), where("ref_feat_shape"))
    if "attn_type" in model_args:
        if model_args["attn_type"] not in ("eva", "rope"):
            raise WeightsError(f"{where('attn_type')}: this ViT builds timm's 'eva' and 'rope' attention")
        if model_args["attn_type"] == "rope":  # timm's AttentionRope: one Linear with a bias for all three
            options["qkv"] = Implied("fused", where("attn_type"))
    if model_args.get("qkv_fused") is False:
        options["qkv"] = Implied("separate", where("qkv_fused"))
    if "swiglu_mlp" in model_args or "scale_mlp" in model_args:
        swiglu = model_args.get("swiglu_mlp", registered.mlp != "standard")
        norm = model_args.get("scale_mlp", registered.mlp_norm)
        key = "swiglu_mlp" if "swiglu_mlp" in model_args else "scale_mlp"
        if norm and not swiglu:
            raise WeightsError(f"{where('scale_mlp')}: a norm inside the plain MLP, which this ViT does not build")
        split = norm or model_args.get("swiglu_align_to", registered.mlp_align_to)
        options["mlp"] = Implied("standard" if not swiglu else "swiglu_split" if split else "swiglu_packed", where(key))
        options["mlp_norm"] = Implied(bool(norm), where(key))
    return options

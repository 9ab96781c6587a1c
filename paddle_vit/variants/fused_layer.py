"""The encoder layer as one compiled op (kernels/encoder_layer.cc), in eager float32 on a CPU: in
training one op forward and one backward; in evaluation (eval mode, no gradient recorded) one
op that keeps nothing and adds each product's bias in the pass that reads its output.

Why: with the layer of modules, eager Paddle runs about 40 ops a layer and a step, each started
from Python holding its GIL; two threads stepping halves of a batch (batch_threads.py) handed
the GIL to and fro between them about a thousand times a step and waited for it each time
(docs/benchmarks.md, "The training step against timm"). The compiled layer makes the same
products (Paddle's matmul and addmm, called from C++), the same compiled softmax, GELU and
LayerNorm backward kernels; it keeps the attention weights and the GELU's output for the backward
pass and computes the LayerNorms' outputs again there. Python starts one op a layer forward,
Paddle's autograd one backward.

Used only where it is proved to compute what the layer of modules computes (`computes_the_modules`):
- every sublayer, at any depth, is at a name of SUBLAYER_CLASSES and of exactly one of the
  classes named there (the walkthrough's module or its CPU variant: a subclass may compute
  something else), with no forward hook (the op would not call it); a module swapped in or
  added, under any name, makes it step aside;
- every field of the model's `ViTConfig` is in CONFIG_FIELDS, at a value the compiled layer
  computes: a field of the layer it computes (the exact GELU only, q/k/v with bias, ...), one at
  its off value (dropout, attention dropout, layer scale), or one that does not concern an
  encoder layer; a field the table does not name makes it step aside (and fails
  tests/test_fused_layer.py, which tries a value of every field against the layer of modules);
- the modules' own settings as the op reads them: no dropout, the exact GELU, LayerNorms with
  weight and bias of one epsilon, the Linear layers' biases, and a layer as wide as the kernels'
  (KERNEL_MIN_WIDTH).
and in training (gradients recorded; frozen parameters get none, as there), eager float32 on a
CPU without autocast, the compiled kernels built, on a Paddle release they were written for
(paddle_versions.py). Drop path is computed: its per-sample factors
are drawn here as the module draws them and handed to the op.

The inference op under the same proof, in eval mode with no gradient recorded (a saliency map's
backward pass keeps the modules), where the dropouts pass their input through at any rate (Paddle's
default mode, upscale_in_train; downscale_in_infer scales it) and drop path does nothing. Why:
the modules' eager evaluation starts some 40 ops a layer from Python, adds each bias inside its
product (`addmm`, 10% slower than the product alone at these shapes) and runs the attention's
head split, softmax and GELU as passes of their own over memory; a model's evaluation with the op
ran 1.08x (ViT-S/16, B/16) to 1.16x (Ti/16) the modules with their compiled softmax and GELU
(docs/benchmarks.md, "Eager evaluation on an AMX Xeon"). Everywhere else it is the layer of
modules (with their own CPU variants).
"""
import dataclasses
import threading

import paddle
import paddle.nn as nn

from ..models.attention import Attention
from ..models.config import ViTConfig
from ..models.encoder import DropPath, EncoderLayer, Mlp
from .compiled import kernel_library, kernel_threads
from .cpu import (GELU_KERNEL_MIN_WIDTH, KERNEL_MIN_WIDTH, AddmmLinear, FastCpuAttention, FastCpuGELU, FastCpuLayerNorm,
                  eager_cpu_float32, records_gradient)
from ..paddle_versions import COMPILED_KERNELS, applies
from .slice_random import SeededDropout, SeededDropPath

LAYER_NORMS = (nn.LayerNorm, FastCpuLayerNorm)
LINEARS = (nn.Linear, AddmmLinear)
DROPOUTS = (nn.Dropout, SeededDropout)
# every sublayer of a layer the compiled layer computes, by its name in `named_sublayers()`: the
# classes it may have (exact: a subclass may compute something else)
SUBLAYER_CLASSES = {
    "norm1": LAYER_NORMS,
    "attn": (Attention, FastCpuAttention),
    "attn.qkv": LINEARS,
    "attn.proj": LINEARS,
    "attn.dropout": DROPOUTS,
    "attn.attention_dropout": DROPOUTS,
    "attn.softmax": (nn.Softmax,),  # unused by the fused path; the explicit one's softmax over keys
    "ls1": (nn.Identity,),  # layer scale off
    "drop_path": (DropPath, SeededDropPath),
    "norm2": LAYER_NORMS,
    "mlp": (Mlp,),
    "mlp.fc1": LINEARS,
    "mlp.act": (nn.GELU, FastCpuGELU),
    "mlp.fc2": LINEARS,
    "mlp.dropout": DROPOUTS,
    "ls2": (nn.Identity,),
}

COMPUTED = "computed by the compiled layer"
OFF = "must be at its off value"
NOT_A_LAYER_FIELD = "does not concern an encoder layer"


@dataclasses.dataclass(frozen=True)
class FieldRole:
    role: str  # COMPUTED, OFF or NOT_A_LAYER_FIELD
    values: tuple = None  # the values the compiled layer computes; None: any


# every ViTConfig field and what the compiled layer does with it; a field not named here makes it
# step aside
CONFIG_FIELDS = {
    "embed_dim": FieldRole(COMPUTED),  # from KERNEL_MIN_WIDTH: the modules' widths are checked
    "num_heads": FieldRole(COMPUTED),
    "mlp_ratio": FieldRole(COMPUTED),  # an MLP from GELU_KERNEL_MIN_WIDTH wide
    "qkv_bias": FieldRole(COMPUTED, (True,)),
    "qk_scale": FieldRole(COMPUTED),
    "layer_norm_epsilon": FieldRole(COMPUTED),
    "gelu": FieldRole(COMPUTED, ("exact",)),
    "mlp": FieldRole(COMPUTED, ("standard",)),
    "norm": FieldRole(COMPUTED, ("layernorm",)),
    "drop_path": FieldRole(COMPUTED),  # the coins drawn by the layer's DropPath, as the modules draw them
    "fused_attention": FieldRole(COMPUTED),  # Attention's two paths compute the same numbers
    "dropout": FieldRole(OFF, (0.0,)),
    "attention_dropout": FieldRole(OFF, (0.0,)),
    "layer_scale": FieldRole(OFF, (None,)),
    "rope": FieldRole(OFF, (None,)),  # RoPE turns q and k, which the op does not
    "position_embedding": FieldRole(COMPUTED, ("learned", "learned_2d", "sincos_2d", "none")),  # not rope_*
    "qkv": FieldRole(COMPUTED, ("fused",)),
    "attention_norm": FieldRole(OFF, (False,)),
    "mlp_norm": FieldRole(OFF, (False,)),
    "mlp_align_to": FieldRole(OFF, (0,)),
    "proj_bias": FieldRole(OFF, (True,)),
    "mlp_bias": FieldRole(OFF, (True,)),
    **{name: FieldRole(NOT_A_LAYER_FIELD) for name in (  # read only with a rope, which is off
        "rope_temperature", "rope_grid_offset", "rope_grid_indexing", "rope_rotate_half", "rope_ref_grid")},
    "recompute": FieldRole(NOT_A_LAYER_FIELD),  # the Encoder runs the layer again in the backward pass
    "depth": FieldRole(NOT_A_LAYER_FIELD),
    "init": FieldRole(NOT_A_LAYER_FIELD),  # the parameters' first values, which the op reads as they are
    **{name: FieldRole(NOT_A_LAYER_FIELD) for name in (
        "image_size", "patch_size", "in_channels", "num_classes", "pool", "representation_size",
        "backbone_layers", "backbone", "backbone_width", "backbone_style", "dynamic_img_size",
        "dynamic_img_pad", "pos_embed_resample", "class_token", "register_tokens", "no_embed_class", "pre_norm",
        "fc_norm", "distilled", "drop_remainder", "attn_pool_heads", "attn_pool_mlp_ratio", "final_norm",
        "pool_include_prefix", "patch_norm")},  # the embedding, the head, the encoder's ends
}
# the fields at their OFF value in training that evaluation computes at any value: the modules'
# dropouts pass their input through in eval mode (settings_computed checks each module's mode)
EVALUATION_IGNORES = ("dropout", "attention_dropout")

# Paddle 3.3 records how a custom op's forward outputs feed its backward op in a map of the whole
# process, written at the op's first call that records a gradient (eager_api_run_custom_op's
# ConstructFwdAndBwdMap), with the GIL released and no lock. Two batch threads (batch_threads.py)
# making that first call together corrupted the map and looped in it for good (a ViT-B/16
# benchmark, 2026-12-05: both threads in the op after 20 minutes of a 3-second step). So one
# thread at a time makes the first call; once one has returned, every call only reads the map.
# The training op is the one op here with a backward op of its own, the one entry it writes.
_FIRST_TRAINING_CALL = threading.Lock()
_GRAPH_ENTRY = {"written": False}

CHECKED_FIELDS = tuple((name, role.values) for name, role in CONFIG_FIELDS.items() if role.values is not None)
FIELD_NAMES = tuple(ViTConfig.field_names())


class FusedCpuEncoderLayer(EncoderLayer):
    """`EncoderLayer` whose training step, in eager float32 on a CPU, is one compiled op forward and
    one backward, and whose evaluation one compiled op (kernels/encoder_layer.cc); otherwise the
    layer of modules."""

    variant_of = EncoderLayer

    def forward(self, x, return_attention=False, rope=None):
        if return_attention or rope is not None:
            return super().forward(x, return_attention=return_attention, rope=rope)
        library = self._library_for(x)
        if library is not None:
            return self._training_op(library, x)
        library = self._inference_library_for(x)
        if library is not None:
            return self._inference_op(library, x)
        return super().forward(x)

    def _training_op(self, library, x):
        attention, mlp = self.attn, self.mlp
        keep_attention, keep_mlp = self._drop_path_factors(x), self._drop_path_factors(x)  # drawn in the modules' order
        arguments = (x, self.norm1.weight, self.norm1.bias, attention.qkv.weight, attention.qkv.bias,
                     attention.proj.weight, attention.proj.bias, self.norm2.weight, self.norm2.bias, mlp.fc1.weight,
                     mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias, keep_attention, keep_mlp, attention.num_heads,
                     float(attention.scales), float(self.norm1._epsilon), kernel_threads())
        if _GRAPH_ENTRY["written"]:
            out, *_kept_for_backward = library.paddle_vit_encoder_layer(*arguments)
        else:
            with _FIRST_TRAINING_CALL:  # Paddle writes the op's graph entry, unguarded: one thread at a time
                out, *_kept_for_backward = library.paddle_vit_encoder_layer(*arguments)
                _GRAPH_ENTRY["written"] = True
        return out  # [B, N, D]

    def _inference_op(self, library, x):
        attention, mlp = self.attn, self.mlp
        return library.paddle_vit_encoder_layer_inference(
            x, self.norm1.weight, self.norm1.bias, attention.qkv.weight, attention.qkv.bias, attention.proj.weight,
            attention.proj.bias, self.norm2.weight, self.norm2.bias, mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight,
            mlp.fc2.bias, attention.num_heads, float(attention.scales), float(self.norm1._epsilon),
            kernel_threads())  # [B, N, D]

    def _drop_path_factors(self, x):
        """[B]: what this layer's drop path multiplies each sample's branch by (0 or 1 / keep
        probability; ones without drop path), its coins drawn as the module draws them on a branch."""
        ones = paddle.ones([x.shape[0], 1, 1], dtype=x.dtype)  # [B, 1, 1], a branch's mask shape
        return self.drop_path(ones).reshape([x.shape[0]])

    def _library_for(self, x):
        """The compiled kernels where the training op computes what this layer does, else None;
        with no gradient recorded the layer of modules keeps nothing for a backward pass either."""
        if not (self.training and records_gradient(x, *self.parameters())):
            return None
        return self._kernels_if_computed(x, evaluation=False)

    def _inference_library_for(self, x):
        """The compiled kernels where the inference op computes what this layer does in evaluation
        (no gradient recorded), else None."""
        if self.training or records_gradient(x, *self.parameters()):
            return None
        return self._kernels_if_computed(x, evaluation=True)

    def _kernels_if_computed(self, x, evaluation):
        """The compiled kernels where an op computes this layer's modules on `x` [B, N, D], else None."""
        if not (x.ndim == 3 and eager_cpu_float32(x) and applies(COMPILED_KERNELS)
                and computes_the_modules(self, evaluation)):
            return None
        if paddle.amp.is_autocast_enabled():  # the layer of modules casts its products; an op would not
            return None
        return kernel_library()


def computes_the_modules(layer, evaluation=False):
    """Whether the compiled layer computes what `layer`'s modules compute: its sublayers, its
    config and its modules' settings are all ones it knows (the module docstring). In
    `evaluation` (the layer in eval mode) a dropout that passes its input through there is
    computed at any rate."""
    modules = known_sublayers(layer)
    return (modules is not None and config_computed(layer.__dict__.get("config"), evaluation)
            and settings_computed(modules, evaluation))


def known_sublayers(layer):
    """{name: sublayer} of `layer` when every sublayer, at any depth, is at a name of
    SUBLAYER_CLASSES, of one of its classes and without a forward hook, and every name there is
    filled; else None."""
    modules = {}
    for name, sublayer in layer.named_sublayers():
        classes = SUBLAYER_CLASSES.get(name)
        if classes is None or type(sublayer) not in classes:
            return None
        if sublayer._forward_pre_hooks or sublayer._forward_post_hooks:
            return None
        modules[name] = sublayer
    return modules if len(modules) == len(SUBLAYER_CLASSES) else None


def config_computed(config, evaluation=False):
    """A `ViTConfig` whose every field CONFIG_FIELDS names, each at a value the compiled layer
    computes (in `evaluation` the dropout rates at any value: settings_computed checks the modules)."""
    if type(config) is not ViTConfig:
        return False
    if not all(name in CONFIG_FIELDS for name in FIELD_NAMES):
        return False
    return all(getattr(config, name) in values for name, values in CHECKED_FIELDS
               if not (evaluation and name in EVALUATION_IGNORES))


def settings_computed(modules, evaluation=False):
    """The known modules' settings ({name: sublayer}) as the op reads them: they may differ from
    the config's after a change of the built model (a dropout rate set on a module)."""
    attention, norm1, norm2 = modules["attn"], modules["norm1"], modules["norm2"]
    fc1, fc2, width = modules["mlp.fc1"], modules["mlp.fc2"], attention.all_head_dim
    dropouts = [modules[name] for name in ("attn.dropout", "attn.attention_dropout", "mlp.dropout")]
    if evaluation:  # the fused attention drops nothing in eval mode; each module as its mode says
        dropouts_off = all(dropout.p == 0.0 or dropout.mode == "upscale_in_train" for dropout in dropouts)
    else:
        dropouts_off = attention.attention_dropout_rate == 0.0 and all(dropout.p == 0.0 for dropout in dropouts)
    return (not modules["mlp.act"]._approximate and fc1.weight.shape[1] >= GELU_KERNEL_MIN_WIDTH
            and dropouts_off and width >= KERNEL_MIN_WIDTH
            and modules["attn.qkv"].bias is not None and modules["attn.proj"].bias is not None
            and fc1.bias is not None and fc2.bias is not None
            and _layer_norm_with_parameters(norm1, width) and _layer_norm_with_parameters(norm2, width)
            and norm1._epsilon == norm2._epsilon)


def _layer_norm_with_parameters(norm, width):
    """A LayerNorm over the last axis of `width` with its weight and bias."""
    return list(norm._normalized_shape) == [width] and norm.weight is not None and norm.bias is not None

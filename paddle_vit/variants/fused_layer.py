"""The encoder layer of training as one compiled op each way (kernels/encoder_layer.cc), in
eager float32 on a CPU.

Why: with the layer of modules, eager Paddle runs about 40 ops a layer and a step, each started
from Python holding its GIL; two threads stepping halves of a batch (batch_threads.py) handed
the GIL to and fro between them about a thousand times a step and waited for it each time
(docs/benchmarks.md, "The training step against timm"). The compiled layer makes the same
products (Paddle's matmul and addmm, called from C++), the same compiled softmax, GELU and
LayerNorm backward kernels; it keeps the attention weights and the GELU's output for the backward
pass and computes the LayerNorms' outputs again there. Python starts one op a layer forward,
Paddle's autograd one backward.

Used only where it computes what the layer of modules computes: training (gradients recorded;
frozen parameters get none, as there), eager float32 on a CPU, the compiled kernels
built, no dropout, attention dropout or layer scale (drop path is: its per-sample factors are drawn
here as the module draws them and handed to the op), the exact GELU, LayerNorms with
weight and bias, q/k/v with bias, and a layer as wide as the kernels' (KERNEL_MIN_WIDTH).
Everywhere else, and in evaluation, it is the layer of modules (with their own CPU variants).
"""
import paddle
import paddle.nn as nn

from ..models.encoder import EncoderLayer, Mlp
from .compiled import kernel_library, kernel_threads
from .cpu import GELU_KERNEL_MIN_WIDTH, KERNEL_MIN_WIDTH, eager_cpu_float32, records_gradient


class FusedCpuEncoderLayer(EncoderLayer):
    """`EncoderLayer` whose training step, in eager float32 on a CPU, is one compiled op forward and
    one backward (kernels/encoder_layer.cc); otherwise the layer of modules."""

    variant_of = EncoderLayer

    def forward(self, x, return_attention=False):
        library = None if return_attention else self._library_for(x)
        if library is None:
            return super().forward(x, return_attention=return_attention)
        attention, mlp = self.attn, self.mlp
        keep_attention, keep_mlp = self._drop_path_factors(x), self._drop_path_factors(x)  # drawn in the modules' order
        out, *_kept_for_backward = library.paddle_vit_encoder_layer(
            x, self.norm1.weight, self.norm1.bias, attention.qkv.weight, attention.qkv.bias, attention.proj.weight,
            attention.proj.bias, self.norm2.weight, self.norm2.bias, mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight,
            mlp.fc2.bias, keep_attention, keep_mlp, attention.num_heads, float(attention.scales),
            float(self.norm1._epsilon), kernel_threads())
        return out  # [B, N, D]

    def _drop_path_factors(self, x):
        """[B]: what this layer's drop path multiplies each sample's branch by (0 or 1 / keep
        probability; ones without drop path), its coins drawn as the module draws them on a branch."""
        ones = paddle.ones([x.shape[0], 1, 1], dtype=x.dtype)  # [B, 1, 1], a branch's mask shape
        return self.drop_path(ones).reshape([x.shape[0]])

    def _library_for(self, x):
        """The compiled kernels where the compiled layer computes what this layer does, else None."""
        if not (self.training and x.ndim == 3 and eager_cpu_float32(x) and self._plain()):
            return None
        if paddle.amp.is_autocast_enabled():  # the layer of modules casts its products; this one would not
            return None
        if not records_gradient(x, *self.parameters()):
            return None  # nothing to differentiate: the layer of modules keeps nothing for a backward pass
        return kernel_library()

    def _plain(self):
        """The walkthrough's layer with nothing the compiled one leaves out."""
        attention, mlp = self.attn, self.mlp
        width = attention.all_head_dim
        return all((
            isinstance(mlp, Mlp) and isinstance(mlp.act, nn.GELU) and not mlp.act._approximate,
            mlp.fc1.weight.shape[1] >= GELU_KERNEL_MIN_WIDTH,
            isinstance(self.ls1, nn.Identity) and isinstance(self.ls2, nn.Identity),
            attention.attention_dropout_rate == 0.0 and attention.dropout.p == 0.0 and mlp.dropout.p == 0.0,
            attention.qkv.bias is not None and attention.proj.bias is not None and width >= KERNEL_MIN_WIDTH,
            mlp.fc1.bias is not None and mlp.fc2.bias is not None,
            _layer_norm_with_parameters(self.norm1, width) and _layer_norm_with_parameters(self.norm2, width),
            self.norm1._epsilon == self.norm2._epsilon,
        ))


def _layer_norm_with_parameters(norm, width):
    """A LayerNorm over the last axis of `width` with its weight and bias."""
    return (isinstance(norm, nn.LayerNorm) and list(norm._normalized_shape) == [width]
            and norm.weight is not None and norm.bias is not None)

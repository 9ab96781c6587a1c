"""Counting hooks for paddle.flops, which counts each layer from its output: a convolution as
output size x kernel volume (its bias left out), a Linear as weight rows x output size, the
attention products q k^T and attention @ v (functional calls) from the explicit path's Softmax
output [B, H, N, N] (2 N^2 d per head), and layers without multiply-accumulates as none."""


def count_conv(layer, inputs, output):
    layer.total_ops += int(output.numel() * int(layer.weight[0].numel()))


def count_linear(layer, inputs, output):
    layer.total_ops += int(layer.weight.shape[0] * output.numel())


def count_attention_products(head_dim):
    def count(layer, inputs, output):
        layer.total_ops += int(2 * output.numel() * head_dim)
    return count


def no_macs(layer, inputs, output):
    layer.total_ops += 0

"""Small ViTs the model tests share (tests only)."""
import paddle

from paddle_vit import ViT

# the options other codes compute with (Hugging Face's epsilon, JAX's tanh GELU, PaddleClas's
# scale, no qkv bias), each changing the logits of `perturbed_tiny_vit` measurably
OTHER_CODES_OPTIONS = dict(layer_norm_epsilon=1e-3, gelu="tanh", qk_scale=0.9, qkv_bias=False)


def tiny_vit(**overrides):
    """32 x 32 input, 8 x 8 patches, 32 wide, 2 layers of 4 heads, 5 classes."""
    arguments = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=5)
    arguments.update(overrides)
    return ViT(**arguments)


def perturbed_tiny_vit(**overrides):
    """A tiny ViT whose LayerNorms and position embedding are off their initial values, so
    that the epsilon and every other option changes the logits measurably; in eval mode."""
    paddle.seed(3)
    model = tiny_vit(**overrides)
    with paddle.no_grad():
        for parameter in model.parameters():
            parameter.set_value(parameter + paddle.randn(parameter.shape) * 0.3)
    return model.eval()

"""vit_jax's eval preprocessing: its ``input_pipeline.py`` (mode "test")."""
from .spec import Preprocess


def from_input_pipeline(config, image_size, where):
    """vit_jax's input_pipeline: tf.image.resize to S x S (bilinear, half-pixel, no antialias),
    then (x - 127.5) / 127.5 in float32 (the checkpoint carries no config: `config` is unused)."""
    size = int(image_size) if image_size is not None else 224
    return Preprocess(size, 1.0, [127.5] * 3, [127.5] * 3, "bilinear", resize_mode="both_sides",
                      resize_size=size, backend="tf", rescale="float32_multiply", rescale_factor=1.0,
                      rgb="convert_shift16", exif_transpose=False,
                      origin=f"vit_jax input_pipeline ({where})")

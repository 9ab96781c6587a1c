"""vit_jax's eval preprocessing on each image (run by preprocess_fixtures.py with TensorFlow).

    python preprocess_tf_ref.py OUT.npz '[["name", "path"], ...]'

As google-research/vision_transformer's input_pipeline.py for mode "test": the image decoded as
tensorflow_datasets' Image feature does (tf.io.decode_image(channels=3)), then
``tf.image.resize(im, [224, 224])`` (bilinear, half-pixel centres, no antialias) and
``(im - 127.5) / 127.5``. "vit_jax@pil_decode" decodes with PIL (convert("RGB")) instead.
"""
import json
import sys

import numpy as np


def main(out_path, listing):
    import tensorflow as tf
    from PIL import Image

    def pipeline(image):
        image = tf.image.resize(image, [224, 224])
        return tf.transpose((image - 127.5) / 127.5, [2, 0, 1]).numpy()

    results = {"version/tensorflow": np.array(tf.__version__), "version/numpy": np.array(np.__version__)}
    for name, path in listing:
        for case, load in (("vit_jax", lambda p: tf.io.decode_image(tf.io.read_file(p), channels=3,
                                                                     expand_animations=False)),
                           ("vit_jax@pil_decode", lambda p: tf.constant(np.asarray(Image.open(p).convert("RGB"))))):
            try:
                results[f"{case}/{name}"] = np.ascontiguousarray(pipeline(load(path)), dtype=np.float32)
            except Exception as error:  # recorded: TensorFlow refuses this image
                results[f"{case}/{name}"] = np.array(f"{type(error).__name__}: {error}".splitlines()[0])
    np.savez(out_path, **results)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))

"""Record independent reference outputs for tests/test_weights.py and tests/test_families.py.

Each family's reference runs in an environment of its own (none of them is a dependency of
paddle-vit; tests/fixtures/README.md says how each was made):

    /work/refvenv/bin/python            tools/make_reference_fixtures.py timm         # torch + timm
    /work/refvenv/bin/python            tools/make_reference_fixtures.py huggingface  # torch + transformers
    /work/refvenv-jax/bin/python        tools/make_reference_fixtures.py jax --vit-jax DIR  # jax + flax, vit_jax code
    /work/refvenv-paddleclas/bin/python tools/make_reference_fixtures.py paddleclas   # paddleclas + plsc
    /work/refvenv-paddleclas/bin/python tools/make_reference_fixtures.py paddleclas_foundation  # its foundation ViTs
    /work/torchvenv/bin/python          tools/make_reference_fixtures.py torchvision  # torch + torchvision
    /work/torchvenv/bin/python          tools/make_reference_fixtures.py preprocess \
        --paddleclas-python PY --paddleclas-path DIR --tf-python PY  # each library's eval preprocessing
    /work/torchvenv/bin/python          tools/make_reference_fixtures.py features     # timm's intermediates, any size
    /work/torchvenv/bin/python          tools/make_reference_fixtures.py timm_hub     # torch + timm: a Hub folder
    /work/torchvenv/bin/python          tools/make_reference_fixtures.py layer_decay  # timm's layer-decay scales
    /work/refvenv-jax/bin/python        tools/make_reference_fixtures.py fewshot --big-vision DIR  # big_vision few-shot
    /work/refvenv/bin/python            tools/make_reference_fixtures.py hf_modern    # transformers + open_clip: DINOv2, CLIP, SigLIP, DeiT, MAE
    /work/refvenv/bin/python            tools/make_reference_fixtures.py timm_modern  # timm's DeiT-III/DINOv2/CLIP/SigLIP/GAP
    /work/venv/bin/python               tools/make_reference_fixtures.py publish      # (a) paddle-vit writes timm Hub folders
    /work/refvenv/bin/python            tools/make_reference_fixtures.py publish      # (b) timm loads them, records its logits

Each builds small models with that code base's own classes and random, perturbed weights,
saves them in that code base's own file format, and records that code's logits (and, where it
resamples position embeddings, its resampled table and logits) in
``tests/fixtures/<family>_reference.npz`` with the configurations in ``<family>_reference.json``.
"""
import argparse
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
MODULES = {"timm": "timm_fixtures", "huggingface": "hf_fixtures", "jax": "jax_fixtures",
           "paddleclas": "paddleclas_fixtures", "torchvision": "torchvision_fixtures",
           "preprocess": "preprocess_fixtures", "features": "features_fixtures",
           "timm_hub": "timm_hub_fixtures", "layer_decay": "layer_decay_fixtures",
           "fewshot": "fewshot_fixtures", "timm_modern": "timm_modern_fixtures",
           "hf_modern": "hf_modern_fixtures", "paddleclas_foundation": "paddleclas_foundation_fixtures",
           "publish": "publish_fixtures"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(MODULES))
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "tests", "fixtures"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vit-jax", metavar="DIR",
                        help="a checkout of google-research/vision_transformer (for the jax family)")
    parser.add_argument("--paddleclas-python", metavar="PY",
                        help="(preprocess) an interpreter with paddle and OpenCV that runs PaddleClas's operators")
    parser.add_argument("--paddleclas-path", metavar="DIR",
                        help="(preprocess) PYTHONPATH for it: where `pip install --no-deps --target DIR "
                             "paddleclas opencv-python-headless` put them")
    parser.add_argument("--tf-python", metavar="PY", help="(preprocess) an interpreter with TensorFlow")
    parser.add_argument("--big-vision", metavar="DIR",
                        help="(fewshot) a source tree of google-research/big_vision")
    parser.add_argument("--big-vision-commit", metavar="SHA",
                        help="(fewshot) its commit, recorded when DIR is an export with no .git")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(HERE, "reference_fixtures"))
    os.makedirs(args.out, exist_ok=True)
    return importlib.import_module(MODULES[args.family]).make(args)


if __name__ == "__main__":
    sys.exit(main())

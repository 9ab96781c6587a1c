"""Helpers shared by the reference-fixture makers (numpy and the standard library only)."""
import json
import os
import sys

import numpy as np


def write_reference(out, family, references, cases, versions):
    """<family>_reference.npz (arrays) and <family>_reference.json (cases and versions)."""
    np.savez(os.path.join(out, f"{family}_reference.npz"), **references)
    versions = dict(versions, numpy=np.__version__, python=sys.version.split()[0])
    with open(os.path.join(out, f"{family}_reference.json"), "w") as handle:
        json.dump(dict(versions=versions, cases=cases), handle, indent=1, sort_keys=True)
        handle.write("\n")


def perturbed(array, rng, scale=0.1):
    """`array` plus Gaussian noise, so that no tensor sits at a trivial value (LayerNorm scale
    1, bias 0, a zero class token or head): a converter that drops or misplaces any tensor
    changes the logits."""
    return (array + rng.standard_normal(array.shape) * scale).astype(array.dtype)


def max_diff(a, b):
    return float(np.abs(np.asarray(a, "float64") - np.asarray(b, "float64")).max())


def folder_size(path):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)

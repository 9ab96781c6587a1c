"""big_vision's few-shot linear accuracy, recorded for tests/test_fewshot.py (run with jax).

    git --git-dir <big_vision clone>/.git archive HEAD big_vision | tar -x -C /tmp/big_vision_src
    /work/refvenv-jax/bin/python tools/make_reference_fixtures.py fewshot --big-vision /tmp/big_vision_src

The numbers come from big_vision's own code (google-research/big_vision,
big_vision/evaluators/fewshot_lsr.py): `Evaluator.compute_fewshot_metrics` (the per-class draw
from `np.random.default_rng(seed)`, the shots), `_precompute_cache` (whitening, bias feature,
{-1, 1} targets, the eigendecomposition of x^T x or x x^T) and `_eig_fewshot_acc_fn` (the ridge
solve and the accuracy), in JAX's default float32 on the CPU.

Importing that module imports big_vision's data pipeline (TensorFlow, tensorflow_datasets) and
big_vision.utils (flax, optax, ml_collections, ...), none of which the few-shot arithmetic uses.
So the module file is executed as source with those imports stubbed: `big_vision.utils` is a
stub module holding big_vision's own `jit_cpu` and `put_cpu`, taken out of big_vision/utils.py
with `ast` and executed beside `jax`; `big_vision.datasets.core`, `big_vision.input_pipeline`
and `big_vision.pp.builder` are empty modules (only the evaluator's TFDS loading, not used here,
reads them). `compute_fewshot_metrics` is called on an `Evaluator` made without `__init__`,
whose representation cache already holds the feature set, so it goes straight to the draw.

Writes ``fewshot_reference.npz`` (per case: train/test features and labels, and the accuracies
[len(shots), len(seeds)]) and ``fewshot_reference.json`` (the cases: shots, seeds, l2_reg,
num_classes, what each exercises; the big_vision commit and versions).
"""
import ast
import os
import subprocess
import sys
import types

import jax
import numpy as np

from common import write_reference

FEWSHOT_FILE = os.path.join("big_vision", "evaluators", "fewshot_lsr.py")
UTILS_FILE = os.path.join("big_vision", "utils.py")
SHOTS = (1, 2, 5)
SEEDS = (0, 1, 2)

# case -> what it exercises; the features are made by `feature_set`
CASES = {
    "more_points": dict(num_classes=4, train_per_class=30, test_per_class=25, dim=3, l2_reg=1024.0,
                        about="more points than dimensions at every shot: the (x^T x + l2)^-1 x^T y form"),
    "fewer_points": dict(num_classes=4, train_per_class=30, test_per_class=25, dim=48, l2_reg=1024.0,
                         about="fewer points than dimensions at every shot: the x^T (x x^T + l2)^-1 y form"),
    "mixed_small_l2": dict(num_classes=5, train_per_class=12, test_per_class=20, dim=8, l2_reg=1.0,
                           about="1 shot below the dimension (5 < 9), 2 and 5 above; a weak ridge"),
    "scales": dict(num_classes=3, train_per_class=20, test_per_class=30, dim=6, l2_reg=1024.0,
                   scales=[1e-3, 1.0, 1e3, 1e4, 0.1, 10.0], offset=50.0,
                   about="features of very different scales (1e-3 .. 1e4) and far from zero"),
    "short_class": dict(num_classes=3, train_per_class=10, test_per_class=20, dim=5, l2_reg=16.0,
                        short_class=(1, 2),
                        about="class 1 has 2 training images: 5 shots take both, as big_vision does"),
}


def feature_set(case, rng):
    """Gaussian clusters (float32) around centres shared by the train and test draws."""
    k, dim = case["num_classes"], case["dim"]
    centres = rng.normal(size=(k, dim)) * 2.0

    def draw(per_class):
        labels = np.repeat(np.arange(k), per_class)
        x = centres[labels] + 2.0 * rng.normal(size=(len(labels), dim))
        x = x * np.asarray(case.get("scales", 1.0)) + case.get("offset", 0.0)
        return x.astype(np.float32), labels.astype(np.int64)

    train_x, train_y = draw(case["train_per_class"])
    if "short_class" in case:
        short, keep = case["short_class"]
        rows = np.where(train_y == short)[0]
        kept = np.ones(len(train_y), bool)
        kept[rows[keep:]] = False
        train_x, train_y = train_x[kept], train_y[kept]
    test_x, test_y = draw(case["test_per_class"])
    return train_x, train_y, test_x, test_y


def functions_from(path, names):
    """The top-level functions `names` of the Python file `path`, executed with jax in scope."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    body = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    missing = set(names) - {node.name for node in body}
    if missing:
        raise SystemExit(f"{path} has no {sorted(missing)}")
    namespace = {"jax": jax, "np": np}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)
    return {name: namespace[name] for name in names}


def load_fewshot_module(checkout):
    """big_vision's fewshot_lsr module, executed with its heavy imports stubbed (module docstring)."""
    utils = types.ModuleType("big_vision.utils")
    for name, function in functions_from(os.path.join(checkout, UTILS_FILE), ["jit_cpu", "put_cpu"]).items():
        setattr(utils, name, function)
    stubs = {"big_vision": types.ModuleType("big_vision"), "big_vision.utils": utils}
    for name in ("big_vision.datasets", "big_vision.datasets.core", "big_vision.input_pipeline",
                 "big_vision.pp", "big_vision.pp.builder"):
        stubs[name] = types.ModuleType(name)
    stubs["big_vision"].utils = utils
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        module = types.ModuleType("big_vision.evaluators.fewshot_lsr")
        path = os.path.join(checkout, FEWSHOT_FILE)
        with open(path) as handle:
            exec(compile(handle.read(), path, "exec"), module.__dict__)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module


def big_vision_accuracies(module, train_x, train_y, test_x, test_y, num_classes, l2_reg):
    """[len(SHOTS), len(SEEDS)] accuracies from big_vision's compute_fewshot_metrics."""
    evaluator = module.Evaluator.__new__(module.Evaluator)  # no TFDS, no mesh: only what the method reads
    evaluator.shots, evaluator.l2_reg = list(SHOTS), l2_reg
    evaluator._repr = {"case": (train_x, train_y, test_x, test_y, num_classes)}
    table = np.zeros((len(SHOTS), len(SEEDS)))
    for column, seed in enumerate(SEEDS):
        result = evaluator.compute_fewshot_metrics(None, seed, "case", None, None)
        for row, k in enumerate(SHOTS):
            table[row, column] = float(result[k])
    return table


def commit_of(checkout):
    try:
        return subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def make(args):
    if not args.big_vision or not os.path.isfile(os.path.join(args.big_vision, FEWSHOT_FILE)):
        raise SystemExit(f"--big-vision must be a big_vision source tree holding {FEWSHOT_FILE}")
    module = load_fewshot_module(args.big_vision)
    rng = np.random.default_rng(args.seed)
    references, cases = {}, {}
    for name, case in CASES.items():
        train_x, train_y, test_x, test_y = feature_set(case, rng)
        table = big_vision_accuracies(module, train_x, train_y, test_x, test_y, case["num_classes"],
                                      case["l2_reg"])
        references.update({f"{name}/train_features": train_x, f"{name}/train_labels": train_y,
                           f"{name}/test_features": test_x, f"{name}/test_labels": test_y,
                           f"{name}/accuracy": table})
        cases[name] = dict(shots=list(SHOTS), seeds=list(SEEDS), l2_reg=case["l2_reg"],
                           num_classes=case["num_classes"], num_train=int(len(train_y)),
                           num_test=int(len(test_y)), feature_dim=case["dim"], about=case["about"],
                           accuracy=table.tolist())
        print(name, table.round(3).tolist())
    versions = dict(jax=jax.__version__, big_vision_commit=args.big_vision_commit or commit_of(args.big_vision),
                    big_vision_dtype=str(jax.numpy.zeros(1).dtype))
    write_reference(args.out, "fewshot", references, cases, versions)
    return 0

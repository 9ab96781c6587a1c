"""Few-shot linear evaluation of a frozen representation, as the paper measures it.

The paper (Section 4.1, "Metrics") reads its data-size and scaling studies off "few-shot linear
accuracy", "obtained by solving a regularized least-squares regression problem that maps the
(frozen) representation of a subset of training images to {-1, 1}^K target vectors". The numbers
here are computed as the authors' group computes them (big_vision's evaluators/fewshot_lsr.py):

- for each seed, one `np.random.default_rng(seed)` permutes the training indices of each class
  in turn (class 0, 1, ...); for `k` shots each class gives the first `k` of its permutation (a
  class with fewer images gives what it has), so the 5-shot set of a seed contains its 1-shot set;
- the chosen features are whitened by their own mean and standard deviation (+1e-5), a constant
  feature of 100 is appended (a bias the ridge penalty barely touches), the labels become one-hot
  vectors in {-1, 1};
- the ridge regression is solved in closed form: (X^T X + l2 I)^-1 X^T Y when there are at least
  as many points as dimensions, else X^T (X X^T + l2 I)^-1 Y (the same solution, smaller system);
- test features are whitened with the training statistics; the prediction is the arg-max class.

The solve is in float64 (big_vision's runs in JAX's default float32; tests/test_fewshot.py holds
the two to within one test image on its recorded outputs).

    features, labels = extract_features(model, train_loader)
    test_features, test_labels = extract_features(model, val_loader)
    fewshot_accuracy(features, labels, test_features, test_labels, shots=(1, 5))
    # {1: [acc seed 0, acc seed 1, acc seed 2], 5: [...]}
"""
import contextlib
import logging
import numbers

import numpy as np
import paddle

from .errors import ConfigError

BIAS_FEATURE = 100.0  # the appended constant: large, so its weight is almost unregularised
STD_EPSILON = 1e-5


# ---- the regression ------------------------------------------------------------------------
def _checked_features(name, features):
    """`features` as a float64 [N, F] array, or a ConfigError naming `name`."""
    array = np.asarray(features)
    if array.ndim != 2:
        raise ConfigError(f"{name} must be a 2-D array [num_images, feature_dim], got shape {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ConfigError(f"{name} must hold numbers, got dtype {array.dtype}")
    array = array.astype(np.float64)
    if len(array) == 0:
        raise ConfigError(f"{name} is empty: few-shot evaluation needs at least one image")
    if not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0]
        raise ConfigError(f"{name} has a non-finite value (nan or inf) at row {bad[0]}, column {bad[1]}")
    return array


def _checked_labels(name, labels, num_rows, features_name):
    """`labels` as an int64 [N] array, or a ConfigError naming `name`."""
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D array of class indices, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ConfigError(f"{name} must be integer class indices, got dtype {array.dtype}")
    if len(array) != num_rows:
        raise ConfigError(f"{name} has {len(array)} labels but {features_name} has {num_rows} rows")
    if (array < 0).any():
        raise ConfigError(f"{name} has a negative class index {int(array.min())}")
    return array.astype(np.int64)


def _checked_shots(shots):
    if isinstance(shots, numbers.Integral) and not isinstance(shots, bool):
        shots = (shots,)
    return _distinct_integers(shots, "shots", "a list of positive integers", "positive", smallest=1)


def _checked_seeds(seeds):
    if isinstance(seeds, numbers.Integral):
        raise ConfigError(f"seeds must be a list of integer seeds such as range({seeds}), got the integer {seeds}")
    return _distinct_integers(seeds, "seeds", "a list of integer seeds", "non-negative", smallest=0)


def _distinct_integers(values, name, expected, kind, smallest):
    """`values` as a tuple of distinct ints >= `smallest`, or one ConfigError naming `name`."""
    try:
        values = tuple(values)
    except TypeError:
        raise ConfigError(f"{name} must be {expected}, got {values!r}") from None
    if not values or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < smallest for v in values):
        raise ConfigError(f"{name} must be a non-empty list of {kind} integers, got {list(values)!r}")
    values = tuple(int(v) for v in values)
    if len(set(values)) != len(values):
        raise ConfigError(f"{name} must not repeat a value, got {list(values)!r}")
    return values


def _checked_l2_reg(l2_reg):
    if isinstance(l2_reg, bool) or not isinstance(l2_reg, numbers.Real) or not np.isfinite(l2_reg) or l2_reg < 0:
        raise ConfigError(f"l2_reg must be a finite number >= 0, got {l2_reg!r}")
    return float(l2_reg)


def whitening(features):
    """The mean [1, F] and standard deviation + 1e-5 [1, F] that whiten `features` [N, F]."""
    return features.mean(axis=0, keepdims=True), features.std(axis=0, keepdims=True) + STD_EPSILON


def whiten_with_bias(features, mean, std):
    """[N, F] -> [N, F + 1]: whitened by (mean, std), the constant bias feature appended."""
    whitened = (features - mean) / std
    return np.pad(whitened, ((0, 0), (0, 1)), constant_values=BIAS_FEATURE)


def ridge_weights(x, targets, l2_reg):
    """The ridge solution W [D, C] minimising |x W - targets|^2 + l2_reg |W|^2 for x [N, D]."""
    num_points, dim = x.shape
    try:
        if num_points >= dim:  # (x^T x + l2 I)^-1 x^T y: a D x D system
            return np.linalg.solve(x.T @ x + l2_reg * np.eye(dim), x.T @ targets)
        # x^T (x x^T + l2 I)^-1 y: the same solution from an N x N system
        return x.T @ np.linalg.solve(x @ x.T + l2_reg * np.eye(num_points), targets)
    except np.linalg.LinAlgError:
        raise ConfigError(f"l2_reg={l2_reg} leaves the least-squares system singular "
                          f"({num_points} points, {dim} dimensions with the bias); use l2_reg > 0") from None


def linear_accuracy(train_x, train_y, test_x, test_y, num_classes, l2_reg):
    """Accuracy on (test_x, test_y) of the ridge regression fitted on (train_x, train_y)."""
    mean, std = whitening(train_x)
    x = whiten_with_bias(train_x, mean, std)  # [n, F + 1]
    targets = 2.0 * np.eye(num_classes)[train_y] - 1.0  # one-hot in {-1, 1}: [n, K]
    weights = ridge_weights(x, targets, l2_reg)  # [F + 1, K]
    predictions = np.argmax(whiten_with_bias(test_x, mean, std) @ weights, axis=1)  # [M]
    return float(np.mean(predictions == test_y))


def fewshot_indices(train_labels, num_classes, seed):
    """Each class's training indices, permuted by one `np.random.default_rng(seed)` drawn in class
    order (class c's k-shot set is the first k of its entry)."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(np.where(train_labels == c)[0]) for c in range(num_classes)]


def fewshot_accuracy(train_features, train_labels, test_features, test_labels, shots=(1, 5, 10, 25),
                     l2_reg=1024.0, seeds=(0, 1, 2), *, num_classes=None):
    """Few-shot linear accuracy of frozen features, as big_vision computes it (module docstring).

    train_features [N, F], train_labels [N] (ints): the pool the shots are drawn from;
    test_features [M, F], test_labels [M]: what the accuracy is measured on.
    num_classes: the number of classes (default: the largest label seen + 1); a class with no
    training image still has its {-1, 1} target column, as in big_vision.
    Returns {shots: [accuracy for each seed]} with plain floats, in the order given.
    """
    train_x = _checked_features("train_features", train_features)
    test_x = _checked_features("test_features", test_features)
    if train_x.shape[1] != test_x.shape[1]:
        raise ConfigError(f"train_features have {train_x.shape[1]} dimensions but test_features "
                          f"have {test_x.shape[1]}")
    train_y = _checked_labels("train_labels", train_labels, len(train_x), "train_features")
    test_y = _checked_labels("test_labels", test_labels, len(test_x), "test_features")
    shots, seeds, l2_reg = _checked_shots(shots), _checked_seeds(seeds), _checked_l2_reg(l2_reg)
    seen = int(max(train_y.max(), test_y.max())) + 1
    if num_classes is None:
        num_classes = seen
    elif isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < seen:
        raise ConfigError(f"num_classes must be an integer >= {seen} (the largest label + 1), got {num_classes!r}")

    most = int(np.bincount(train_y, minlength=num_classes).max())
    for k in shots:
        if k > most:  # every class gives all it has: the whole pool's linear accuracy, under another name
            logging.getLogger("paddle_vit").warning(
                "few-shot: %d shots is more than any class has (the most: %d images): each class gives all "
                "its images, as big_vision does", k, most)
    results = {k: [] for k in shots}
    for seed in seeds:
        per_class = fewshot_indices(train_y, num_classes, seed)
        for k in shots:
            chosen = np.concatenate([indices[:k] for indices in per_class])
            results[k].append(linear_accuracy(train_x[chosen], train_y[chosen], test_x, test_y,
                                              num_classes, l2_reg))
    return results


def summarize(results):
    """{shots: [per seed]} -> {shots: mean over the seeds} (plain floats)."""
    return {k: float(np.mean(values)) for k, values in results.items()}


# ---- the frozen representation ---------------------------------------------------------------
def _vit_of(model):
    """The ViT inside a DataParallel (or any wrapper keeping it as `_layers`)."""
    model = getattr(model, "_layers", model)
    if not (hasattr(model, "forward_features") and hasattr(model, "forward_head")):
        raise ConfigError(f"few-shot features need a paddle_vit ViT (forward_features / forward_head), "
                          f"got {type(model).__name__}")
    return model


def representation(model, x):
    """Images [B, C, H, W] -> the frozen representation [B, F]: the pre-logits layer's output where
    the model has one (F = representation_size), else the pooled token the head reads (the class
    token after the final LayerNorm, or the normed mean of the patch tokens; F = embed_dim)."""
    vit = _vit_of(model)
    return vit.forward_head(vit.forward_features(x), pre_logits=True)


@paddle.no_grad()
def extract_features(model, loader, autocast=None):
    """(features float32 [N, F], labels int64 [N]) of every batch of `loader` ((images, labels)
    pairs), the model in eval mode (its train/eval mode is given back afterwards); `autocast`: a
    mixed-precision context to run the model in (a model trained with AMP O2 holds low-precision
    weights), None for none."""
    vit = _vit_of(model)
    was_training = vit.training
    vit.eval()
    features, labels = [], []
    try:
        for images, batch_labels in loader:
            with autocast() if autocast is not None else contextlib.nullcontext():
                batch_features = representation(vit, images)  # [B, F]
            features.append(batch_features.astype("float32").numpy())
            batch_labels = batch_labels.numpy() if hasattr(batch_labels, "numpy") else np.asarray(batch_labels)
            labels.append(batch_labels.reshape([-1]).astype(np.int64))
    finally:
        if was_training:
            vit.train()
    if not features:
        raise ConfigError("the loader gave no batches: few-shot features need at least one image")
    return np.concatenate(features), np.concatenate(labels)

"""Few-shot linear evaluation of a model on a recipe's data (tools/eval.py --protocol fewshot, and
every eval.fewshot_interval epochs during training).

The training split is the pool the shots are drawn from, read through the validation transform
(the representation of the images, not of augmented crops, as big_vision reads its few-shot
training split with a fixed preprocessing); the validation split is the test set. Each split's
features are computed once per call and every (shots, seed) regression reuses them.

With several processes every rank computes the features of its shard and they are gathered (in
rank order, the sampler's padding trimmed), so that every rank holds all of them and computes the
same accuracies; rank 0 alone logs them. The evaluation draws no training randomness: the images
go through the deterministic eval transform, the model is in eval mode, and the shots are drawn
by `np.random.default_rng(seed)` generators of its own.
"""
import copy

import paddle

from ..data import AugmentedDataset, build_dataloader, build_datasets
from ..device import init_distributed, select_device
from ..fewshot import extract_features, fewshot_accuracy, summarize
from ..factory import eval_preprocess, model_for_evaluation
from ..variants import use_cpu_fast_paths
from .evaluator import gather_across_ranks, unpad


def pool_dataset(train_set, val_set):
    """The training split's images through the validation split's transform (and, for files read
    by a checkpoint's own pipeline, its decoder)."""
    source = train_set.source
    decode = getattr(val_set.source, "decode", None)
    if decode is not None and hasattr(source, "decode") and source.decode is not decode:
        source = copy.copy(source)  # the training set keeps its own decoder
        source.decode = decode
    return AugmentedDataset(source, val_set.transform, val_set.image_size, val_set.seed)


def pool_loader(train_set, val_set, batch_size, num_workers=0, seed=0):
    """A loader over `pool_dataset` in file order (sharded over the ranks when there are several)."""
    return build_dataloader(pool_dataset(train_set, val_set), batch_size, shuffle=False, drop_last=False,
                            num_workers=num_workers, seed=seed)


def gathered_features(model, loader, autocast=None):
    """extract_features over `loader`, gathered from every rank in data-set order:
    (features float32 [N, F], labels int64 [N]) of the whole data set on every rank."""
    features, labels = extract_features(model, loader, autocast)
    world = paddle.distributed.get_world_size()
    if world > 1:
        features = gather_across_ranks(paddle.to_tensor(features)).numpy()
        labels = gather_across_ranks(paddle.to_tensor(labels)).numpy()
        per_rank = len(features) // world
        features = unpad(features, loader.num_samples, world, per_rank)
        labels = unpad(labels, loader.num_samples, world, per_rank)
    scored = labels >= 0  # an unreadable validation file's slot (data.imagefolder.MASKED_LABEL): left out
    return features[scored], labels[scored]


def fewshot_metrics(model, train_loader, test_loader, num_classes, shots, l2_reg, seeds, autocast=None):
    """Few-shot accuracy of `model`'s frozen representation: the pool from `train_loader`, the
    test from `test_loader`; `seeds` a count (seeds 0 .. n-1) or a list of seeds; `autocast` the
    training's mixed precision context, if any.

    Returns {"accuracy": {shots: [per seed]}, "mean": {shots: mean}, "shots", "seeds", "l2_reg",
    "num_train", "num_test", "feature_dim", "num_classes"}."""
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    train_features, train_labels = gathered_features(model, train_loader, autocast)  # [N, F], [N]
    test_features, test_labels = gathered_features(model, test_loader, autocast)  # [M, F], [M]
    accuracy = fewshot_accuracy(train_features, train_labels, test_features, test_labels, shots=shots,
                                l2_reg=l2_reg, seeds=seeds, num_classes=num_classes)
    return {"accuracy": accuracy, "mean": summarize(accuracy), "shots": list(accuracy), "seeds": seeds,
            "l2_reg": float(l2_reg), "num_train": int(len(train_labels)), "num_test": int(len(test_labels)),
            "feature_dim": int(train_features.shape[1]), "num_classes": int(num_classes)}


def run_fewshot_evaluation(config, weights, shots, l2_reg, seeds, use_ema=False, chosen_data_keys=None):
    """Few-shot accuracy of `weights` on `config.data` (tools/eval.py --protocol fewshot): the
    model built as for the classification protocol, run eagerly (eval.engine does not apply: the
    representation is read inside the model). Its head is not used, so its class count need not
    be the data's: a model pre-trained on other classes is measured on these, as in the paper."""
    select_device(config.train.device)
    init_distributed()
    model = model_for_evaluation(config, weights, use_ema)  # weights: a WeightsSource, or a path
    preprocess = eval_preprocess(model, config.data, chosen_data_keys)
    train_set, val_set, class_names = build_datasets(
        config.data, model.config.image_size, seed=config.train.seed,
        eval_preprocess=preprocess if model.preprocess is not None else None)
    batch, workers, seed = config.eval.batch_size, config.data.num_workers, config.train.seed
    train_loader = pool_loader(train_set, val_set, batch, workers, seed)
    test_loader = build_dataloader(val_set, batch, shuffle=False, drop_last=False, num_workers=workers, seed=seed)
    metrics = fewshot_metrics(use_cpu_fast_paths(model), train_loader, test_loader, len(class_names), shots,
                              l2_reg, seeds)
    metrics["class_names"] = list(class_names)
    return metrics

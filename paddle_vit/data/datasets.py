"""The data sets: where images come from (a "source") and the augmented, resumable view of it.

A source holds the raw images and answers `load(index) -> (RGB PIL image, label)`; it has
`labels` (int64 array) and `class_names`. `AugmentedDataset` puts a transform on a source and
gives sample `index` of epoch `epoch` a generator keyed by (seed, epoch, index), so its
augmentations do not depend on the process, the worker or what was loaded before. It also takes
a tagged index `copy * len(source) + index` (rng.py's `tag_copy`): copy `copy` of image `index`,
keyed by (seed, epoch, index, copy), which repeated augmentation's sampler asks for.
"""
import logging
import numbers
import threading
import traceback

import numpy as np
import paddle
from PIL import Image

from ..errors import ConfigError, DataError, check_choice
from .cifar import load_cifar
from .config import BAD_IMAGE_POLICIES, DATASETS, DataConfig
from .filelist import build_filelist_sources
from .imagefolder import build_imagefolder_sources
from .rng import STREAM_SPLIT, STREAM_SUBSET, STREAM_SYNTHETIC, keyed_rng, sample_rng, untag_copy
from .shared import SharedBytes
from .transforms import build_transforms

_WORKER_ERROR_BYTES = 8192
_DATA_PROBLEM, _BUG = "D", "B"  # first character of a worker's error report
logger = logging.getLogger("paddle_vit")


class ArraySource:
    """Images held in memory as uint8 [N, H, W] (grayscale) or [N, H, W, 3] (RGB)."""

    def __init__(self, images, labels, class_names, indices=None):
        self.images, self.labels = images, np.asarray(labels, dtype=np.int64)
        self.class_names = list(class_names)
        # where each image sits in the original collection (the digits split keeps this)
        self.indices = np.arange(len(images)) if indices is None else np.asarray(indices)

    def __len__(self):
        return len(self.images)

    def load(self, index):
        return Image.fromarray(self.images[index]).convert("RGB"), int(self.labels[index])


class SyntheticSource:
    """Learnable random images, drawn on demand from (seed, split, index).

    Class c has its own mean colour and stripe direction; each sample adds a random stripe
    phase and Gaussian pixel noise. The labels cycle through the classes, so they are balanced.
    """

    def __init__(self, size, num_classes, image_size, seed, split):
        if size <= 0 or num_classes <= 0:
            raise ConfigError(f"the synthetic set needs positive sizes and classes, "
                              f"got {size} images, {num_classes} classes")
        self.size, self.image_size, self.seed, self.split = int(size), int(image_size), int(seed), int(split)
        self.class_names = [str(c) for c in range(num_classes)]
        self.labels = np.arange(self.size, dtype=np.int64) % num_classes
        class_rng = keyed_rng(STREAM_SYNTHETIC, seed, 0)
        self.colours = class_rng.uniform(40, 215, size=(num_classes, 3))
        self.angles = np.pi * np.arange(num_classes) / num_classes + class_rng.uniform(0, 0.2, num_classes)
        self.frequencies = 2.0 + np.arange(num_classes) % 3

    def __len__(self):
        return self.size

    def load(self, index):
        label = int(self.labels[index])
        rng = keyed_rng(STREAM_SYNTHETIC, self.seed, self.split, index)
        y, x = np.mgrid[0:self.image_size, 0:self.image_size] / self.image_size  # [S, S] each
        angle, frequency = self.angles[label], self.frequencies[label]
        phase = rng.uniform(0, 2 * np.pi)
        stripes = np.sin(2 * np.pi * frequency * (x * np.cos(angle) + y * np.sin(angle)) + phase)  # [S, S]
        noise = rng.normal(0.0, 20.0, size=(self.image_size, self.image_size, 3))
        pixels = self.colours[label] + 40.0 * stripes[..., None] + noise  # [S, S, 3]
        return Image.fromarray(np.clip(np.round(pixels), 0, 255).astype(np.uint8)), label


def stratified_split(labels, val_fraction, split_seed):
    """(train indices, val indices), each sorted: round(n_c * val_fraction) of every class c
    goes to val, chosen by a generator keyed by split_seed (the same on every machine)."""
    rng = keyed_rng(STREAM_SPLIT, split_seed)
    val = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        num_val = int(round(len(members) * val_fraction))
        val.append(members[rng.permutation(len(members))[:num_val]])
    val = np.sort(np.concatenate(val))
    train = np.setdiff1d(np.arange(len(labels)), val)
    return train, val


def stratified_subset(labels, fraction, split_seed, seed):
    """Sorted indices of a stratified `fraction` of a split: the first max(1, round(n_c *
    fraction)) of a permutation of every class c keyed by (`split_seed`, `seed`), so that a
    smaller fraction is a subset of a larger one, as the paper's random subsets of JFT grow."""
    rng = keyed_rng(STREAM_SUBSET, split_seed, seed)
    kept = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        order = rng.permutation(len(members))
        kept.append(members[order[:max(1, int(round(len(members) * fraction)))]])
    return np.sort(np.concatenate(kept))


class SubsetSource:
    """The images `indices` of another source, in that order; labels and class names follow."""

    def __init__(self, source, indices):
        self.source, self.indices = source, np.asarray(indices)
        self.labels = np.asarray(source.labels)[self.indices]
        self.class_names = list(source.class_names)

    def __len__(self):
        return len(self.indices)

    def load(self, index):
        return self.source.load(int(self.indices[index]))

    def check_readable(self):
        """The source's check (image files), over this subset's images only."""
        check = getattr(self.source, "check_readable", None)
        if check is not None:
            check(self.indices)

    def __getattr__(self, name):  # num_bad_images and the like come from the source
        return getattr(self.__dict__["source"], name)


def digits_sources(val_fraction, split_seed):
    """scikit-learn's 1,797 8x8 digits (values 0..16) as uint8 grayscale, split stratified."""
    from sklearn.datasets import load_digits  # here: scikit-learn is slow to import and only the digits need it

    if not 0 < val_fraction < 1:
        raise ConfigError(f"data.val_fraction must be in (0, 1), got {val_fraction}")
    digits = load_digits()
    images = np.round(digits.images * 255.0 / 16.0).astype(np.uint8)  # [1797, 8, 8]
    labels = digits.target.astype(np.int64)
    train, val = stratified_split(labels, val_fraction, split_seed)
    if len(train) == 0 or len(val) == 0:
        raise ConfigError(_empty_digits_split(labels, val_fraction, split_seed, len(train), len(val)))
    class_names = [str(c) for c in range(10)]
    return (ArraySource(images[train], labels[train], class_names, indices=train),
            ArraySource(images[val], labels[val], class_names, indices=val), class_names)


def _empty_digits_split(labels, val_fraction, split_seed, num_train, num_val):
    """The message for a data.val_fraction that leaves one split of the digits without an image:
    round(n_c * val_fraction) of each class c goes to val, so a fraction near 1 takes every image
    and one near 0 none. Names the sizes the split would have and a value that works."""
    empty, direction = ("training", "lower") if num_train == 0 else ("validation", "raise")
    example = DataConfig.val_fraction  # the default
    example_train, example_val = (len(part) for part in stratified_split(labels, example, split_seed))
    return (f"data.val_fraction {val_fraction:g} leaves no image for {empty}: the {len(labels)} digits would split "
            f"{num_train} train / {num_val} val; {direction} data.val_fraction ({example:g} gives "
            f"{example_train} train / {example_val} val)")


def _split_report(message):
    """'7|Dtext' -> (7, 'Dtext'); an empty message, or one cut by a write in progress (no
    iteration number before '|'), -> (None, '')."""
    iteration, _, report = message.partition("|")
    if not iteration.isdigit():
        return None, ""
    return int(iteration), report


class AugmentedDataset(paddle.io.Dataset):
    """`dataset[index] -> (float32 [3, S, S] normalised image, int64 label)`.

    Sample `index` of epoch `epoch` is transformed with `sample_rng(seed, epoch, index)`; a
    tagged index `copy * len(self) + index` (copy >= 1) loads the same image and label with
    `sample_rng(seed, epoch, index, copy)`: the copies of repeated augmentation differ.
    `set_epoch` picks the epoch (the loader calls it). Worker processes see the epoch that
    was set when iteration began (workers are created per epoch, never persistent).

    An exception inside a DataLoader worker (or the reading thread of Paddle's single-process
    loader, where it would leave the main thread waiting forever) is not raised there: Paddle 3.3 re-raises worker
    exceptions in a background thread, which leaves the main process with an unrelated
    "blocking queue is killed" SystemError, and later multi-process loaders in the same process
    can hang. The worker instead writes the message to shared memory and returns a blank
    sample; `ResumableDataLoader` raises it in the main process before yielding that batch
    (see `take_worker_error`). Each report carries the number of the iteration whose workers
    wrote it (`begin_iteration`): a worker of an abandoned iteration that is still shutting down
    can finish a sample and report after the next iteration began, and that late report must
    not be raised there.
    """

    def __init__(self, source, transform, image_size, seed=0):
        super().__init__()
        self.source, self.transform = source, transform
        self.image_size, self.seed = int(image_size), int(seed)
        self.epoch = 0
        self._iteration = 0  # copied into each worker when the workers of an iteration start
        self._worker_error = SharedBytes(_WORKER_ERROR_BYTES)

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def begin_iteration(self):
        """Start a new iteration: from now on only reports of its workers are taken."""
        self._iteration += 1

    def __len__(self):
        return len(self.source)

    def __getitem__(self, index):
        index = int(index)
        if paddle.io.get_worker_info() is None and threading.current_thread() is threading.main_thread():
            return self._load(index)  # called directly: raise as usual
        # in a worker process, or in the thread Paddle's single-process loader reads with, where
        # a raised exception leaves the main thread waiting forever on the batch queue
        try:
            return self._load(index)
        except Exception as error:  # anything raised in a worker would hang or garble the loader
            if isinstance(error, DataError):
                report = _DATA_PROBLEM + str(error)
            else:
                report = (f"{_BUG}{type(error).__name__} in a DataLoader worker on sample {index}:\n"
                          f"{traceback.format_exc()}")
            self._record_worker_error(report)
            return np.zeros((3, self.image_size, self.image_size), np.float32), np.int64(0)

    def _load(self, tagged):
        index, copy = untag_copy(tagged, len(self.source))
        image, label = self.source.load(index)
        return self.transform(image, sample_rng(self.seed, self.epoch, index, copy)), np.int64(label)

    def _record_worker_error(self, report):
        """Keep the first report of this iteration; a newer iteration's report replaces an older one's."""
        iteration, _ = _split_report(self._worker_error.read_message())
        if iteration is None or iteration < self._iteration:
            self._worker_error.write_message(f"{self._iteration}|{report}")

    def take_worker_error(self):
        """The first error a worker of the current iteration recorded since the last call, as an
        exception to raise (DataError for a data problem, RuntimeError with the traceback for a
        bug), or None. Reports of earlier iterations are ignored."""
        iteration, report = _split_report(self._worker_error.read_message())
        if iteration != self._iteration:
            return None
        self._worker_error.clear()
        return DataError(report[1:]) if report[0] == _DATA_PROBLEM else RuntimeError(report[1:])

    @property
    def labels(self):
        return self.source.labels

    @property
    def class_names(self):
        return self.source.class_names

    @property
    def num_classes(self):
        return len(self.source.class_names)

    @property
    def num_bad_images(self):
        """Unreadable images skipped so far (image files only; 0 otherwise)."""
        return getattr(self.source, "num_bad_images", 0)

    def check_readable(self):
        """Refuse (DataError) a split none of whose files can be read (image files: one decode
        when the first file is whole); the other sources are held in memory or drawn."""
        check = getattr(self.source, "check_readable", None)
        if check is not None:
            check()


def build_sources(data_config, image_size):
    """(train source, val source, class names) of `data_config.dataset`."""
    name = check_choice("data.dataset", data_config.dataset, DATASETS, error=DataError)
    if name == "digits":
        return digits_sources(data_config.val_fraction, data_config.split_seed)
    if name == "imagefolder":
        return build_imagefolder_sources(data_config.root, data_config.on_bad_image)
    if name == "filelist":
        return build_filelist_sources(data_config)
    if name in ("cifar10", "cifar100"):
        train_images, train_labels, test_images, test_labels, class_names = load_cifar(name, data_config.root)
        return (ArraySource(train_images, train_labels, class_names),
                ArraySource(test_images, test_labels, class_names), class_names)
    train = SyntheticSource(data_config.synthetic_train_size, data_config.synthetic_classes,
                            image_size, data_config.split_seed, split=1)
    val = SyntheticSource(data_config.synthetic_val_size, data_config.synthetic_classes,
                          image_size, data_config.split_seed, split=2)
    return train, val, train.class_names  # synthetic


class Prepared:
    """The val transform when the source already returns the model input (an image folder read
    by `Preprocess.read`)."""

    def __call__(self, array, rng=None):
        return array


def build_datasets(data_config, image_size, seed=0, eval_preprocess=None):
    """(train dataset, val dataset, class names) for `data_config` at model input `image_size`.

    `seed` keys the train augmentations (with the epoch and the sample index); the val set
    is transformed deterministically: by the recipe's eval transform, or by `eval_preprocess`
    (a `paddle_vit.preprocess.Preprocess`, e.g. a checkpoint's own pipeline) when given,
    which for an image folder also decodes the files as that pipeline's library does.
    """
    check_choice("data.on_bad_image", data_config.on_bad_image, BAD_IMAGE_POLICIES)
    if isinstance(image_size, bool) or not isinstance(image_size, numbers.Integral) or image_size <= 0:
        raise ConfigError(f"image_size must be a positive integer, got {image_size!r}")
    image_size = int(image_size)
    # build the transforms first: a bad transform setting fails before a large archive is read
    train_transform = build_transforms(data_config, image_size, train=True)
    val_transform = build_transforms(data_config, image_size, train=False)
    if eval_preprocess is not None:
        val_transform = eval_preprocess.transform()
    if data_config.root and data_config.dataset in ("digits", "synthetic"):  # a user who meant another data set
        logger.warning("data.root %s is not read: data.dataset %s needs no files (set data.dataset to imagefolder, "
                       "filelist, cifar10 or cifar100 to read them)", data_config.root, data_config.dataset)
    train_source, val_source, class_names = build_sources(data_config, image_size)
    if hasattr(val_source, "unreadable_masked"):  # an unreadable val file: left out, not another counted twice
        val_source.unreadable_masked = True
    if eval_preprocess is not None and hasattr(val_source, "decode"):  # files: decoded by the pipeline too
        val_source.decode, val_transform = eval_preprocess.read, Prepared()
    if data_config.train_fraction < 1.0:
        full = len(train_source)
        train_source = SubsetSource(train_source, stratified_subset(train_source.labels, data_config.train_fraction,
                                                                    data_config.split_seed, seed))
        logger.info("data.train_fraction %g: %d of the %d training images, stratified", data_config.train_fraction,
                    len(train_source), full)
    logger.info("data %s: %d train / %d val images, %d classes", data_config.dataset,
                len(train_source), len(val_source), len(class_names))
    return (AugmentedDataset(train_source, train_transform, image_size, seed),
            AugmentedDataset(val_source, val_transform, image_size, seed), list(class_names))

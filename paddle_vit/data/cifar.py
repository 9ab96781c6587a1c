"""CIFAR-10 / CIFAR-100 from the python-version archives, read by paddle.vision.datasets.

Paddle's `Cifar10` / `Cifar100` (3.3.1) open the tar archive `data_file`, unpickle every member
whose name contains the split's flag ("data_batch" / "test_batch" for CIFAR-10, "train" /
"test" for CIFAR-100) and keep (row of 3072 uint8 in CHW order, label) pairs; `download=True`
with no `data_file` fetches the archive into ~/.cache/paddle/dataset/cifar. They do not read
the class names, nor check which archive they were given: both are done here, so a missing,
foreign or CIFAR-10-for-100 archive is a DataError naming the path.
"""
import os
import pickle
import tarfile

import numpy as np
from paddle.vision.datasets import Cifar10, Cifar100

from ..errors import DataError

ARCHIVES = {
    # name: (archive file, members that must exist, meta member, class-name key, classes)
    "cifar10": ("cifar-10-python.tar.gz", ("cifar-10-batches-py/data_batch_1", "cifar-10-batches-py/test_batch"),
                "cifar-10-batches-py/batches.meta", b"label_names", 10),
    "cifar100": ("cifar-100-python.tar.gz", ("cifar-100-python/train", "cifar-100-python/test"),
                 "cifar-100-python/meta", b"fine_label_names", 100),
}


def _archive_path(name, root):
    archive_name = ARCHIVES[name][0]
    path = os.path.expanduser(str(root))
    if os.path.isdir(path):
        path = os.path.join(path, archive_name)
    if not os.path.isfile(path):
        raise DataError(f"{name} archive {path} not found (expected the python-version {archive_name})")
    return path


def _member_names(name, path):
    try:
        with tarfile.open(path, mode="r") as archive:
            return {member.name.removeprefix("./") for member in archive.getmembers()}
    except (tarfile.TarError, OSError, EOFError) as error:
        raise DataError(f"{name} archive {path} cannot be read as a tar archive ({error})") from None


def _class_names(name, path, members):
    _, _, meta_member, key, num_classes = ARCHIVES[name]
    if meta_member in members:
        try:
            with tarfile.open(path, mode="r") as archive:
                meta = pickle.load(archive.extractfile(meta_member), encoding="bytes")
            names = [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in meta[key]]
        except Exception as error:  # an unpickling failure can be of any type
            raise DataError(f"{name} archive {path}: cannot read {meta_member} ({error})") from None
        if len(names) != num_classes:
            raise DataError(f"{name} archive {path}: {meta_member} names {len(names)} classes, expected {num_classes}")
        return names
    return [str(i) for i in range(num_classes)]


def _load_split(name, path, mode):
    dataset_class = Cifar10 if name == "cifar10" else Cifar100
    try:
        dataset = dataset_class(data_file=path, mode=mode, download=path is None, backend="cv2")
    except Exception as error:  # download, tar and unpickling failures surface as many types
        where = path or "the download"
        raise DataError(f"{name} {mode} split could not be loaded from {where} "
                        f"({type(error).__name__}: {error})") from None
    if len(dataset) == 0:
        raise DataError(f"{name} archive {dataset.data_file} holds no {mode} images")
    images = np.empty((len(dataset), 32, 32, 3), dtype=np.uint8)
    labels = np.empty(len(dataset), dtype=np.int64)
    for index in range(len(dataset)):
        image, label = dataset[index]  # backend "cv2": float32 [32, 32, 3] with values 0..255
        images[index] = image
        labels[index] = int(label)
    return images, labels, dataset.data_file


def load_cifar(name, root):
    """(train images, train labels, test images, test labels, class names) of CIFAR `name`.

    Images are uint8 [N, 32, 32, 3]. `root` is the archive (or a folder holding it under its
    standard name); None downloads it with Paddle.
    """
    path = None if root is None else _archive_path(name, root)
    if path is not None:
        members = _member_names(name, path)
        missing = [m for m in ARCHIVES[name][1] if m not in members]
        if missing:
            raise DataError(f"{path} is not the {name} python-version archive (no {', '.join(missing)})")
    train_images, train_labels, path = _load_split(name, path, "train")
    test_images, test_labels, _ = _load_split(name, path, "test")
    num_classes = ARCHIVES[name][4]
    for labels in (train_labels, test_labels):
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise DataError(f"{name} archive {path} has labels outside 0..{num_classes - 1}")
    class_names = _class_names(name, path, _member_names(name, path))
    return train_images, train_labels, test_images, test_labels, class_names

"""ImageFolder: root/train/<class>/* and root/val/<class>/*, decoded with PIL.

Scanning is eager (so a bad layout fails at start-up with the path named), decoding lazy.
Class folders are sorted; the class names come from train/ and val/ must hold the same ones.
Files are found recursively inside a class folder (symbolic links followed, each folder walked
once, so a link loop counts no image twice; FIFOs and other special files skipped with a
warning); a split needs at least two classes; hidden files and folders (".*", such as
.ipynb_checkpoints) are left out; other files whose extension is not an image's are ignored
and counted. A file that fails to decode is skipped (on_bad_image="skip": a warning names it
once, `num_bad_images` counts it across worker processes, and the sample slot is served by
the next readable file; in a validation split, `unreadable_masked`, that slot's label is
`MASKED_LABEL` and every metric leaves it out, so that no image is counted twice) or raises
DataError naming it (on_bad_image="error"). A split in which
no file decodes at all is refused before training starts (`check_readable`).
"""
import logging
import os
import unicodedata

import numpy as np
from PIL import Image, ImageOps

from ..errors import DataError

MASKED_LABEL = -1  # the label of a validation slot whose file is unreadable: left out of every metric
from ..fileio import kind_of_special_file
from ..preprocess.pipeline import composite_on_white
from .shared import SharedBytes

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
SPLITS = ("train", "val")
logger = logging.getLogger("paddle_vit")


def _is_hidden(name):
    return name.startswith(".")


def _is_image_file(name):
    return name.lower().endswith(IMAGE_EXTENSIONS)


def find_image_files(folder, split_dir=None, skipped=None):
    """(sorted image paths, number of ignored non-image files) under `folder`, recursively.

    Symbolic links are followed, but a folder reached a second time (a link back to a parent: a
    loop, or two links to one folder) is walked once, with a warning; a name with an image's
    extension that is not a regular file (a FIFO, a device, a socket, a dangling link) is skipped
    with a warning, since opening a FIFO would wait forever for a writer. A link back to
    `split_dir`, which would count every class's images in this one, counts as a loop too. With a
    list `skipped`, the warnings' reasons are appended to it instead, for the caller to report."""
    images, ignored = [], 0

    def skip(reason):
        if skipped is None:
            logger.warning("skipping %s", reason)
        else:
            skipped.append(reason)

    seen = set()
    if split_dir is not None:
        status = os.stat(split_dir)
        seen.add((status.st_dev, status.st_ino))
    pending = [folder]
    while pending:
        directory = pending.pop()
        try:
            status = os.stat(directory)
        except OSError as error:
            skip(f"folder {directory}: {error.strerror or error}")
            continue
        if (status.st_dev, status.st_ino) in seen:
            skip(f"{directory}: a symbolic link to a folder walked already (a loop, or a second link to it)")
            continue
        seen.add((status.st_dev, status.st_ino))
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as error:
            raise DataError(f"cannot list the image folder {directory}: {error.strerror or error}") from None
        subfolders = []
        for entry in entries:
            if _is_hidden(entry.name):
                continue
            try:
                is_folder = entry.is_dir()  # follows links
                is_file = not is_folder and entry.is_file()
            except OSError:
                is_folder = is_file = False
            if is_folder:
                subfolders.append(entry.path)
            elif not _is_image_file(entry.name):
                ignored += 1
            elif is_file:
                images.append(entry.path)
            else:
                skip(f"{entry.path}: not a regular file ({kind_of_special_file(entry.path)})")
        pending.extend(reversed(subfolders))
    return sorted(images), ignored


def scan_split(split_dir):
    """(class names, image paths, labels, ignored file count) of one split folder."""
    if not os.path.isdir(split_dir):
        raise DataError(f"ImageFolder split folder {split_dir} does not exist")
    class_names, paths, labels, ignored = [], [], [], 0
    folders = {}  # the real path of each class folder -> its name: two names for one folder are two classes alike
    for entry in sorted(os.scandir(split_dir), key=lambda e: e.name):
        if _is_hidden(entry.name):
            continue
        if not entry.is_dir():
            ignored += 1  # a loose file next to the class folders
            continue
        real = os.path.realpath(entry.path)
        if real in folders:
            raise DataError(f"class folders {os.path.join(split_dir, folders[real])} and {entry.path} are one folder "
                            f"({real}, through a symbolic link): two classes would hold the same images")
        folders[real] = entry.name
        images, class_ignored = find_image_files(entry.path, split_dir)
        ignored += class_ignored
        if not images:
            raise DataError(f"class folder {entry.path} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
        labels += [len(class_names)] * len(images)
        class_names.append(entry.name)
        paths += images
    if not paths:
        raise DataError(f"ImageFolder split {split_dir} holds no images (expected {split_dir}/<class>/<image>)")
    return class_names, paths, np.asarray(labels, dtype=np.int64), ignored


def _check_same_classes(root, train_classes, val_classes):
    if train_classes == val_classes:
        return
    missing = sorted(set(train_classes) - set(val_classes))
    extra = sorted(set(val_classes) - set(train_classes))
    parts = []
    if missing:
        parts.append(f"missing from val/: {', '.join(missing)}")
    if extra:
        parts.append(f"in val/ but not in train/: {', '.join(extra)}")
    hint = ""
    composed = {unicodedata.normalize("NFC", name) for name in missing}
    if composed & {unicodedata.normalize("NFC", name) for name in extra}:
        hint = (": some are the same name written in two Unicode forms (NFC and NFD, as macOS writes folder "
                "names); rename one split's folders to the other's")
    raise DataError(f"ImageFolder {root}: val classes differ from train classes ({'; '.join(parts)}){hint}")


def decode_image(path):
    """The image at `path` as RGB, EXIF orientation applied; raises whatever PIL raises."""
    with Image.open(path) as image:
        image.load()  # decode now: a truncated file fails here, not later in a transform
        image = ImageOps.exif_transpose(image)
    return composite_on_white(image)


def _one_line(error):
    return " ".join(f"{type(error).__name__}: {error}".split())


class ImageFileSource:
    """Images in files, decoded when asked for: `load(index) -> (RGB PIL image, label)`.

    The sources of image files (an ImageFolder split, a PaddleClas list) differ only in how
    they find their files; decoding, the bad-file policy and the check that a split is
    readable are this class's. `where` names the split in messages ("ImageFolder split DIR").
    """

    def __init__(self, paths, labels, class_names, where, on_bad_image="skip"):
        self.paths, self.labels, self.class_names = list(paths), labels, list(class_names)
        self.where, self.on_bad_image = where, on_bad_image
        # path -> what `load` returns: the RGB image; evaluation with a checkpoint's own pipeline
        # sets its `Preprocess.read`, which decodes as that library does (its EXIF handling and
        # RGB conversion) and returns the model input
        self.decode = decode_image
        # one flag per file in shared memory, so a bad file found by a DataLoader worker is
        # counted (and not decoded again) in every process
        self._bad = SharedBytes(len(self.paths))
        self.unreadable_masked = False  # a validation split's: an unreadable file's slot is MASKED_LABEL

    def __len__(self):
        return len(self.paths)

    @property
    def num_bad_images(self):
        """How many distinct files failed to decode so far (in any worker)."""
        return int(self._bad.view.sum())

    @property
    def bad_images(self):
        """The paths that failed to decode so far."""
        return [self.paths[i] for i in np.flatnonzero(self._bad.view)]

    def load(self, index):
        count, bad = len(self.paths), self._bad.view
        for offset in range(count):
            candidate = (index + offset) % count
            if bad[candidate]:
                continue
            try:
                image = self.decode(self.paths[candidate])
            except Exception as error:  # a corrupt file can make any decoder raise anything
                self._unreadable(candidate, error)
                continue
            if candidate != index and self.unreadable_masked:
                return image, MASKED_LABEL  # another file's image: served, never scored
            return image, int(self.labels[candidate])
        raise DataError(f"no readable image left in {self.where}")

    def _unreadable(self, index, error):
        """File `index` failed to decode: the error (on_bad_image="error"), or skip it from now on."""
        path = self.paths[index]
        if self.on_bad_image == "error":
            raise DataError(f"cannot read image {path}: {_one_line(error)}") from None
        if not self._bad.view[index]:
            self._bad.view[index] = 1
            logger.warning("skipping unreadable image %s (%s)", path, _one_line(error))

    def check_readable(self, indices=None):
        """Refuse a split none of whose files (of `indices`, all by default) decodes, now rather
        than at the first batch or evaluation, after a run has made its folder. Files are tried
        in order until one decodes: one decode for a healthy split. Those that fail on the way
        are the error, or skipped, as `load` would have them; a split that is all garbage is
        one DataError naming its folder, not one warning per file."""
        order = range(len(self.paths)) if indices is None else [int(index) for index in indices]
        failed = []  # (index, error) of the files tried so far
        for index in order:
            try:
                decode_image(self.paths[index])
            except Exception as error:  # a corrupt file can make any decoder raise anything
                if self.on_bad_image == "error":
                    self._unreadable(index, error)  # raises, as load would
                failed.append((index, error))
                continue
            for bad_index, error in failed:
                self._unreadable(bad_index, error)
            return
        first, error = failed[0]
        raise DataError(f"{self.where} has no readable image: all {len(failed)} files tried "
                        f"fail to decode (the first, {self.paths[first]}: {_one_line(error)}); "
                        f"replace them or point data.root elsewhere")


class ImageFolderSource(ImageFileSource):
    """The decoded images of one ImageFolder split (root/train or root/val)."""

    def __init__(self, paths, labels, class_names, split_dir, on_bad_image="skip"):
        super().__init__(paths, labels, class_names, f"ImageFolder split {split_dir}", on_bad_image)
        self.split_dir = split_dir


def build_imagefolder_sources(root, on_bad_image="skip"):
    """(train source, val source, class names) of the ImageFolder at `root`."""
    if root is None:
        raise DataError("data.root must name the ImageFolder root (holding train/ and val/)")
    root = os.path.expanduser(str(root))
    if not os.path.isdir(root):
        raise DataError(f"ImageFolder root {root} does not exist or is not a folder")
    scans = {}
    for split in SPLITS:
        split_dir = os.path.join(root, split)
        if not os.path.isdir(split_dir):
            raise DataError(f"ImageFolder root {root} has no {split}/ folder ({split_dir} not found)")
        scans[split] = scan_split(split_dir)
    _check_same_classes(root, scans["train"][0], scans["val"][0])
    if len(scans["train"][0]) < 2:
        raise DataError(f"ImageFolder {os.path.join(root, 'train')} holds one class folder ({scans['train'][0][0]}); "
                        f"a classifier needs at least two (expected {os.path.join(root, 'train')}/<class>/<image>, "
                        f"one folder per class)")
    sources = []
    for split in SPLITS:
        class_names, paths, labels, ignored = scans[split]
        if ignored:
            logger.info("ImageFolder %s: ignored %d non-image files", os.path.join(root, split), ignored)
        source = ImageFolderSource(paths, labels, class_names, os.path.join(root, split), on_bad_image)
        source.num_ignored_files = ignored
        sources.append(source)
    return sources[0], sources[1], scans["train"][0]

"""ImageNet as PaddleClas, PaddleViT and PLSC keep it: image files under a root, and lists of
"relative/path label" lines naming them (train_list.txt, val_list.txt).

    data.root/train/n01440764/n01440764_10026.JPEG      train_list.txt: train/n01440764/n01440764_10026.JPEG 0
    data.root/val/ILSVRC2012_val_00000001.JPEG          val_list.txt:   val/ILSVRC2012_val_00000001.JPEG 65

How a line is read, beside PaddleClas's ImageNetDataset (which strips the line, splits it on
its `delimiter`, a single space by default, and takes field 0 as the path, field 1 as the label):
- the label is the LAST field and the path everything before it, so a path holding a space
  reads correctly (PaddleClas takes the path's second word for the label and fails);
- with data.list_separator null, any run of spaces or tabs separates them (a superset of
  PaddleClas's default, and exactly what PaddleViT's reader accepts); else that string does;
- blank lines are skipped (PaddleClas fails on one); there are no comment lines (a file name
  may begin with "#"), and a third field is refused rather than silently dropped;
- the file is UTF-8 (a byte-order mark is allowed), "\\r\\n" line ends too.
Order is the list's order. Every listed file is checked to exist up front (one directory
listing per folder, not one stat per file: ImageNet's train list names 1000 folders); files
that exist but fail to decode follow data.on_bad_image as an ImageFolder's do.

The class names file (data.class_names) is PaddleClas's label_list form, "0 tench, Tinca tinca"
(the id, one space or tab, the name; ids 0..K-1 in any order), or one name per line (the
labels.txt PaddleX writes), the form chosen by the first line. Without it the classes are
named "0", "1", ... and their count is the training list's highest label + 1.
"""
import logging
import os
import re
import stat

import numpy as np

from ..errors import DataError
from ..fileio import kind_of_special_file
from .imagefolder import ImageFileSource

logger = logging.getLogger("paddle_vit")
_LABEL = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: int() would also take "1_000" or "٣"
_LABEL_LIST_LINE = re.compile(r"([0-9]+)[ \t]+(\S.*)")  # PaddleClas's "<id> <name>"
_SHOWN_MISSING = 3  # missing files named in the error
# labels without data.class_names: classes without a training image are fine (a subset of a larger
# label set), but not a head over 10x the labels in use once it passes this many classes
SPARSE_CLASSES_ALLOWED = 1000


class FileListSource(ImageFileSource):
    """The images of one list file, in the list's order."""

    def __init__(self, paths, labels, class_names, list_path, on_bad_image="skip"):
        super().__init__(paths, labels, class_names, f"the images listed in {list_path}", on_bad_image)
        self.list_path = list_path


def _resolve(root, path):
    """`path` relative to `root` unless absolute. A listed path is taken as written; "~" in a
    config key is the home folder (load_config expands it; a DataConfig built in code too)."""
    return os.path.join(root, path)


def _config_path(root, value):
    return _resolve(root, os.path.expanduser(str(value)))


def _read_text_lines(path, key, what):
    """The lines of the text file `path` (the value of config key `key`), line ends removed;
    DataError when it is missing, not a regular file or not UTF-8."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{key} {path} does not exist (expected {what})") from None
    except OSError as error:
        raise DataError(f"{key} {path} cannot be read: {error.strerror or error}") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{key} {path} is a folder; expected {what}")
    if not stat.S_ISREG(mode):  # opening a FIFO would wait for a writer forever
        raise DataError(f"{key} {path} is {kind_of_special_file(path)}; expected {what}")
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        raise DataError(f"{key} {path} cannot be read: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(f"{key} {path}: line {line} is not UTF-8 text (byte {data[error.start]:#04x}); "
                        f"save the file as UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final line end
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _shown(line, limit=120):
    """A line as the error shows it: quoted (a tab visible as \\t), long ones cut."""
    return repr(line if len(line) <= limit else line[:limit] + "...")


def _separator_name(separator):
    return "spaces or tabs" if separator is None else repr(separator)


def parse_list(list_path, key, separator=None):
    """[(line number, relative path, label)] of the list file `list_path`, blank lines skipped.

    A line that is not "path<separator>label" with an integer label is a DataError naming the
    file, the line number and the line."""
    entries = []
    for number, line in enumerate(_read_text_lines(list_path, key, "a text file of 'relative/path label' lines"), 1):
        stripped = line.strip()
        if not stripped:
            continue
        fields = stripped.rsplit(separator, 1)
        where = f"{key} {list_path}, line {number}"
        if len(fields) != 2 or not fields[0].strip():
            raise DataError(f"{where}: expected 'relative/path label' separated by {_separator_name(separator)}, "
                            f"got {_shown(line)}")
        path, label = fields[0].strip(), fields[1].strip()
        if not _LABEL.fullmatch(label):
            raise DataError(f"{where}: the label {label!r} is not an integer (a line is 'relative/path label', "
                            f"separated by {_separator_name(separator)}): {_shown(line)}")
        entries.append((number, path, int(label)))
    if not entries:
        raise DataError(f"{key} {list_path} lists no images (expected 'relative/path label' lines)")
    return entries


def read_class_names(path, key="data.class_names"):
    """The class names in `path`: PaddleClas's "<id> <name>" lines (ids 0..K-1, any order) when
    the first line is one, else one name per line. Trailing blank lines are ignored; a blank
    line inside is a DataError (it would shift every later class)."""
    lines = _read_text_lines(path, key, "a text file of class names")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise DataError(f"{key} {path} names no classes")
    if _LABEL_LIST_LINE.fullmatch(lines[0].strip()) is None:  # one name per line
        for number, line in enumerate(lines, 1):
            if not line.strip():
                raise DataError(f"{key} {path}, line {number}: a blank line where a class name should be "
                                f"(one name per line, class 0 first)")
        ordered = [line.strip() for line in lines]
        _warn_of_shared_names(ordered, path)
        return ordered
    names = {}
    for number, line in enumerate(lines, 1):
        match = _LABEL_LIST_LINE.fullmatch(line.strip())
        if match is None:
            raise DataError(f"{key} {path}, line {number}: expected '<class id> <name>' as on line 1, "
                            f"got {_shown(line)}")
        class_id = int(match.group(1))
        if class_id in names:
            raise DataError(f"{key} {path}, line {number}: class id {class_id} is named twice "
                            f"({names[class_id][1]!r} on line {names[class_id][0]})")
        names[class_id] = (number, match.group(2).strip())
    missing = sorted(set(range(len(names))) - set(names))
    if missing:
        extra = max(names)
        raise DataError(f"{key} {path}: class ids must be 0..{len(names) - 1} (one line each), but {missing[0]} "
                        f"has no line and {extra} is beyond (line {names[extra][0]})")
    ordered = [names[class_id][1] for class_id in range(len(names))]
    _warn_of_shared_names(ordered, path)
    return ordered


def _warn_of_shared_names(names, path):
    """ImageNet names two classes "crane" (the bird, the machine): legal, but a report keyed by
    name shows one of them, so say which ids share a name."""
    ids = {}
    for class_id, name in enumerate(names):
        ids.setdefault(name, []).append(class_id)
    shared = {name: found for name, found in ids.items() if len(found) > 1}
    if shared:
        listed = "; ".join(f"{name!r}: {', '.join(map(str, found))}" for name, found in list(shared.items())[:5])
        logger.warning("data.class_names %s: %d name(s) shared by several class ids (%s); reports keyed by "
                       "name show one of each", path, len(shared), listed)


def _check_labels(entries, list_path, key, num_classes, why):
    """Every label in [0, num_classes); else DataError naming the first line outside."""
    for number, path, label in entries:
        if label < 0 or label >= num_classes:
            problem = "is negative" if label < 0 else f"is out of range: {why}"
            raise DataError(f"{key} {list_path}, line {number}: the label {label} {problem}")


def _regular_files_in(folder):
    """{name: None for a regular file (links followed), else what it is} of `folder`'s
    entries, or None when the folder cannot be listed."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    found = {}
    for entry in entries:
        try:
            regular = entry.is_file()  # no stat unless a link: the directory entry says
        except OSError:
            regular = False
        found[entry.name] = None if regular else ("a folder" if entry.is_dir() else
                                                  kind_of_special_file(entry.path))
    return found


def check_files_exist(entries, root, list_path, key):
    """DataError when any listed image is missing or not a regular file: how many, and the
    first few with their line numbers. One directory listing per folder the list names."""
    listings = {}
    problems = []
    for number, path, _ in entries:
        full = _resolve(root, path)
        folder, name = os.path.split(full)
        if folder not in listings:
            listings[folder] = _regular_files_in(folder or ".")
        listing = listings[folder]
        if listing is None or name not in listing:
            problems.append((number, path, "missing"))
        elif listing[name] is not None:
            problems.append((number, path, listing[name]))
    if problems:
        shown = "; ".join(f"line {number}: {path} ({what})" for number, path, what in problems[:_SHOWN_MISSING])
        more = f"; and {len(problems) - _SHOWN_MISSING} more" if len(problems) > _SHOWN_MISSING else ""
        raise DataError(f"{len(problems)} of the {len(entries)} images in {key} {list_path} are missing or not "
                        f"regular files under data.root {root}: {shown}{more}")


def build_filelist_sources(data_config):
    """(train source, val source, class names) of data.dataset filelist."""
    root = os.path.expanduser(str(data_config.root))
    if not os.path.isdir(root):
        raise DataError(f"data.root {root} does not exist or is not a folder (the folder the lists' paths "
                        f"are relative to)")
    lists = {"train": ("data.train_list", _config_path(root, data_config.train_list)),
             "val": ("data.val_list", _config_path(root, data_config.val_list))}
    entries = {split: parse_list(path, key, data_config.list_separator) for split, (key, path) in lists.items()}
    for split, (key, list_path) in lists.items():  # a negative label first: it would skew the class count
        _check_labels(entries[split], list_path, key, float("inf"), "")
    if data_config.class_names:
        names_path = _config_path(root, data_config.class_names)
        class_names = read_class_names(names_path)
        count_from = f"data.class_names {names_path} names {len(class_names)}"
        why = f"{count_from} classes (labels 0..{len(class_names) - 1})"
    else:
        num_classes = max(label for _, _, label in entries["train"]) + 1
        used = len({label for _, _, label in entries["train"]})
        if num_classes > max(SPARSE_CLASSES_ALLOWED, 10 * used):  # a typo, most likely: a head that size
            raise DataError(f"the highest label in data.train_list {lists['train'][1]} is {num_classes - 1}, but only "
                            f"{used} different labels appear: that would be a {num_classes}-class model; renumber "
                            f"the labels from 0, or name every class in data.class_names")
        class_names = [str(label) for label in range(num_classes)]
        count_from = f"the highest label in data.train_list {lists['train'][1]} is {num_classes - 1}"
        why = (f"{count_from}, so there are {num_classes} classes; name every class in data.class_names "
               f"if some have no training image")
    if len(class_names) < 2:
        raise DataError(f"data.dataset filelist has one class ({count_from}); a classifier needs at least two")
    sources = []
    for split, (key, list_path) in lists.items():
        _check_labels(entries[split], list_path, key, len(class_names), why)
        check_files_exist(entries[split], root, list_path, key)
        labels = np.asarray([label for _, _, label in entries[split]], dtype=np.int64)
        paths = [_resolve(root, path) for _, path, _ in entries[split]]
        sources.append(FileListSource(paths, labels, class_names, list_path, data_config.on_bad_image))
    unseen = len(class_names) - len(np.unique(sources[0].labels))
    if unseen:
        logger.info("data filelist: %d of the %d classes have no training image", unseen, len(class_names))
    return sources[0], sources[1], class_names

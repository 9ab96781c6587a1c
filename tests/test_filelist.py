"""data.dataset filelist: ImageNet as PaddleClas, PaddleViT and PLSC keep it (a root, nested
train/<wnid>/ folders, a flat val/, train_list.txt / val_list.txt of "relative/path label" lines,
label_list.txt naming the classes), read, trained on and evaluated; every bad list one line."""
import dataclasses
import json
import os

import numpy as np
import pytest
from PIL import Image

from paddle_vit import ConfigError, DataError
from paddle_vit.cli import run
from paddle_vit.config import load_config
from paddle_vit.data import DataConfig, build_datasets
from paddle_vit.data.filelist import parse_list, read_class_names
from paddle_vit.preprocess import preprocess_for_checkpoint

from repo_paths import load_tool
from test_failures import assert_one_line_error, run_tool

TRAIN, EVAL = load_tool("train"), load_tool("eval")

WNIDS = ("n01440764", "n01443537", "n01484850")
COLOURS = ((220, 40, 40), (40, 220, 40), (40, 40, 220))  # class c's images are this colour
LABEL_LIST = "0 tench, Tinca tinca\n1 goldfish, Carassius auratus\n2 great white shark, white shark\n"
NAMES = ["tench, Tinca tinca", "goldfish, Carassius auratus", "great white shark, white shark"]
VAL_LABELS = (2, 0, 1, 1, 2, 0)  # the val list's order, classes interleaved as ImageNet's val set is


def save_coloured(path, label, seed):
    noise = np.random.default_rng(seed).integers(-12, 13, (16, 16, 3))
    pixels = np.clip(np.asarray(COLOURS[label]) + noise, 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, format="JPEG", quality=95)


def paddleclas_imagenet(root, per_class=4):
    """root/train/<wnid>/<wnid>_<i>.JPEG, root/val/ILSVRC2012_val_<n>.JPEG (flat), the two lists
    (train list by class, as PaddleClas's is) and label_list.txt; returns (train, val) entries."""
    train, val = [], []
    for label, wnid in enumerate(WNIDS):
        (root / "train" / wnid).mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            relative = f"train/{wnid}/{wnid}_{index}.JPEG"
            save_coloured(root / relative, label, seed=len(train))
            train.append((relative, label))
    (root / "val").mkdir(parents=True, exist_ok=True)
    for number, label in enumerate(VAL_LABELS, 1):
        relative = f"val/ILSVRC2012_val_{number:08d}.JPEG"
        save_coloured(root / relative, label, seed=100 + number)
        val.append((relative, label))
    for name, entries in (("train_list.txt", train), ("val_list.txt", val)):
        (root / name).write_text("".join(f"{path} {label}\n" for path, label in entries))
    (root / "label_list.txt").write_text(LABEL_LIST)
    return train, val


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    root = tmp_path_factory.mktemp("ILSVRC2012")
    train, val = paddleclas_imagenet(root)
    return root, train, val


def data_config(root, **overrides):
    values = dict(dataset="filelist", root=str(root), train_list="train_list.txt", val_list="val_list.txt",
                  class_names="label_list.txt")
    values.update(overrides)
    return dataclasses.replace(DataConfig(), **values)


# ---- reading ---------------------------------------------------------------------------------

def test_lists_give_their_files_in_order_with_their_labels_and_the_label_list_names(imagenet):
    root, train_entries, val_entries = imagenet
    train, val, class_names = build_datasets(data_config(root, mean=[0.0] * 3, std=[1.0] * 3), 16)
    assert class_names == NAMES
    for dataset, entries in ((train, train_entries), (val, val_entries)):
        assert dataset.source.paths == [os.path.join(str(root), path) for path, _ in entries]
        assert list(dataset.labels) == [label for _, label in entries]
        for index, (_, label) in enumerate(entries):  # the pixels are the listed class's colour
            image, sample_label = dataset[index]
            assert sample_label == label
            np.testing.assert_allclose(image.mean(axis=(1, 2)) * 255, COLOURS[label], atol=8)


def test_class_count_follows_the_training_list_without_a_names_file(imagenet):
    root, _, _ = imagenet
    _, val, class_names = build_datasets(data_config(root, class_names=None), 16)
    assert class_names == ["0", "1", "2"] and val.num_classes == 3


def test_any_run_of_spaces_or_tabs_blank_lines_crlf_a_bom_and_paths_with_spaces_are_read(tmp_path):
    text = "\ufeffa/x.jpg 0\r\n\r\n  b/y.jpg\t\t1  \r\nc/with space.jpg   2\r\n\n"
    (tmp_path / "list.txt").write_bytes(text.encode("utf-8"))
    assert parse_list(str(tmp_path / "list.txt"), "data.train_list") == [
        (1, "a/x.jpg", 0), (3, "b/y.jpg", 1), (4, "c/with space.jpg", 2)]
    (tmp_path / "comma.txt").write_text("a b/x.jpg,3\nc.jpg , 4\n")
    assert parse_list(str(tmp_path / "comma.txt"), "data.val_list", separator=",") == [
        (1, "a b/x.jpg", 3), (2, "c.jpg", 4)]


def test_a_class_names_file_of_one_name_per_line_or_ids_in_any_order(tmp_path, caplog):
    (tmp_path / "labels.txt").write_text("cat\nsnow leopard\n\n")
    assert read_class_names(str(tmp_path / "labels.txt")) == ["cat", "snow leopard"]
    (tmp_path / "label_list.txt").write_text("1 dog\n0 cat, domestic\n")
    assert read_class_names(str(tmp_path / "label_list.txt")) == ["cat, domestic", "dog"]
    assert "shared by several class ids" not in caplog.text
    (tmp_path / "cranes.txt").write_text("0 crane\n1 tench\n2\tcrane\n")  # ImageNet's 134 and 517
    assert read_class_names(str(tmp_path / "cranes.txt")) == ["crane", "tench", "crane"]
    assert "1 name(s) shared by several class ids ('crane': 0, 2)" in caplog.text


def test_list_paths_are_relative_to_root_unless_absolute_and_tilde_is_home(imagenet, tmp_path, monkeypatch):
    root, train_entries, _ = imagenet
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine.txt").write_text("".join(f"{os.path.join(str(root), p)} {label}\n" for p, label in train_entries))
    config = load_config(data={"data": {"dataset": "filelist", "root": str(root), "train_list": "~/mine.txt",
                                        "val_list": "val_list.txt"}})
    assert config.data.train_list == str(tmp_path / "mine.txt")
    train, _, _ = build_datasets(config.data, 16)
    assert train.source.paths == [os.path.join(str(root), path) for path, _ in train_entries]


def test_eval_with_a_checkpoints_own_preprocessing_decodes_the_listed_files_as_that_library_does(imagenet):
    root, _, val_entries = imagenet
    preprocess = preprocess_for_checkpoint({"pipeline": "paddleclas"}, 16)
    _, val, _ = build_datasets(data_config(root), 16, eval_preprocess=preprocess)
    image, label = val[3]
    np.testing.assert_array_equal(image, preprocess.read(os.path.join(str(root), val_entries[3][0])))
    assert label == val_entries[3][1]
    _, own, _ = build_datasets(data_config(root), 16)  # the recipe's transform gives other numbers
    assert np.abs(own[3][0] - image).max() > 0.01


# ---- training and evaluation end to end ------------------------------------------------------

def recipe(path, images, output, **data):
    data_keys = {"dataset": "filelist", "root": str(images), "train_list": "train_list.txt",
                 "val_list": "val_list.txt", "class_names": "label_list.txt", **data}
    path.write_text(
        "model: {name: vit_walkthrough, image_size: 14, embed_dim: 16, depth: 1, num_heads: 2}\n"
        f"data: {json.dumps(data_keys)}\n"
        f"train: {{epochs: 1, batch_size: 4, device: cpu, log_interval: 1, output_dir: '{output}'}}\n"
        "eval: {batch_size: 4}\n")
    return str(path)


def test_a_paddleclas_layout_trains_in_worker_processes_skipping_a_corrupt_file_evaluates_and_resumes(tmp_path,
                                                                                                     capsys):
    root = tmp_path / "ILSVRC2012"
    _, val_entries = paddleclas_imagenet(root)
    broken = root / "train" / WNIDS[1] / f"{WNIDS[1]}_2.JPEG"
    broken.write_bytes(broken.read_bytes()[:50])  # a JPEG cut short: skipped, counted across workers
    output = tmp_path / "run"
    config = recipe(tmp_path / "recipe.yaml", root, output, num_workers=1)
    assert run(TRAIN.main, ["-c", config]) == 0
    with open(output / "metrics.jsonl") as stream:
        record = [json.loads(line) for line in stream][-1]
    assert record["skipped_images"] == 1
    capsys.readouterr()
    # eager: what is read is the question here (the engines' agreement: test_train, test_onnx_runtime)
    assert run(EVAL.main, ["-c", config, "--weights", str(output / "checkpoints" / "last.pdckpt"),
                           "-o", "eval.engine=dynamic"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_samples"] == len(val_entries)
    assert summary["top1"] == pytest.approx(record["val_top1"], abs=1e-6)
    assert list(summary["per_class_accuracy"]) == NAMES

    # resuming goes on with the same list, and refuses another one (other images, another order)
    lines = (root / "train_list.txt").read_text().splitlines()
    (root / "train_list_b.txt").write_text("\n".join(lines[::-1]) + "\n")
    code, errors = run_tool(TRAIN, ["-c", config, "-o", "train.resume=auto", "-o", "train.epochs=2",
                                    "-o", "data.train_list=train_list_b.txt"], capsys)
    assert_one_line_error(code, errors, "data.train_list 'train_list.txt' (the config: 'train_list_b.txt')")
    assert run(TRAIN.main, ["-c", config, "-o", "train.resume=auto", "-o", "train.epochs=2"]) == 0
    with open(output / "metrics.jsonl") as stream:
        assert [json.loads(line)["epoch"] for line in stream] == [1, 2]


# ---- every bad list is one line --------------------------------------------------------------

def write(path, text):
    path.write_text(text)
    return str(path)


BAD_LISTS = [
    # (case, overrides made from (tmp_path, root), fragments of the error line)
    ("no label", lambda t, r: {"train_list": write(t / "l.txt", "train/a.JPEG 0\ntrain/b.JPEG\n")},
     ["data.train_list", "l.txt, line 2", "expected 'relative/path label'", "'train/b.JPEG'"]),
    ("label not an integer", lambda t, r: {"val_list": write(t / "l.txt", "\nval/x.JPEG goldfish\n")},
     ["data.val_list", "l.txt, line 2", "the label 'goldfish' is not an integer", "'val/x.JPEG goldfish'"]),
    ("a third field", lambda t, r: {"val_list": write(t / "l.txt", "val/x.JPEG 1 extra\n")},
     ["line 1", "the label 'extra' is not an integer"]),
    ("tab-separated with a comma separator",
     lambda t, r: {"train_list": write(t / "l.txt", "train/x.JPEG\t1\n"), "list_separator": ","},
     ["data.train_list", "line 1", "separated by ','", "'train/x.JPEG\\t1'"]),
    ("negative label", lambda t, r: {"val_list": write(t / "l.txt", "val/ILSVRC2012_val_00000001.JPEG -1\n")},
     ["data.val_list", "line 1", "the label -1 is negative"]),
    ("negative training label without a names file",
     lambda t, r: {"class_names": None, "train_list": write(t / "l.txt", "a.JPEG -2\n")},
     ["data.train_list", "line 1", "the label -2 is negative"]),
    ("label beyond the names file", lambda t, r: {"val_list": write(t / "l.txt", "a.JPEG 0\nb.JPEG 3\n")},
     ["line 2", "the label 3 is out of range", "label_list.txt names 3 classes (labels 0..2)"]),
    ("val label beyond the training list's",
     lambda t, r: {"class_names": None, "val_list": write(t / "l.txt", "a.JPEG 7\n")},
     ["data.val_list", "line 1", "the label 7 is out of range", "the highest label in data.train_list",
      "is 2, so there are 3 classes", "data.class_names"]),
    ("a label far beyond the others (a typo: the head would fill the memory)",
     lambda t, r: {"class_names": None,
                   "train_list": write(t / "l.txt", "a.JPEG 0\nb.JPEG 1\nc.JPEG 99999999999999999999\n")},
     ["the highest label in data.train_list", "is 99999999999999999999, but only 3 different labels appear",
      "renumber the labels from 0"]),
    ("missing list", lambda t, r: {"train_list": "nope.txt"}, ["data.train_list", "nope.txt does not exist"]),
    ("list is a folder", lambda t, r: {"val_list": "val"}, ["data.val_list", "val is a folder"]),
    ("list is a FIFO", lambda t, r: os.mkfifo(t / "fifo.txt") or {"val_list": str(t / "fifo.txt")},
     ["data.val_list", "fifo.txt is a FIFO"]),
    ("empty list", lambda t, r: {"train_list": write(t / "l.txt", "\n \n")}, ["data.train_list", "lists no images"]),
    ("not UTF-8", lambda t, r: {"train_list": str(t / "l.txt") if (t / "l.txt").write_bytes(
        b"a.JPEG 0\nb\xff.JPEG 1\n") else None}, ["data.train_list", "line 2 is not UTF-8"]),
    ("missing images", lambda t, r: {"val_list": write(t / "l.txt", "".join(
        f"val/gone_{i}.JPEG 0\n" for i in range(5)) + "val/ILSVRC2012_val_00000001.JPEG 2\nmissing/a.JPEG 1\n")},
     ["6 of the 7 images in data.val_list", "missing or not regular files under data.root",
      "line 1: val/gone_0.JPEG (missing)", "line 3: val/gone_2.JPEG (missing)", "and 3 more"]),
    ("an image that is a folder", lambda t, r: {"val_list": write(t / "l.txt", "train/n01440764 0\n")},
     ["1 of the 1 images", "line 1: train/n01440764 (a folder)"]),
    ("missing root", lambda t, r: {"root": str(t / "nowhere")}, ["data.root", "nowhere does not exist"]),
    ("one class", lambda t, r: {"class_names": None, "train_list": write(t / "l.txt", "val/ILSVRC2012_val_00000002.JPEG 0\n"),
                                "val_list": write(t / "v.txt", "val/ILSVRC2012_val_00000002.JPEG 0\n")},
     ["has one class", "at least two"]),
    ("names file: an id twice", lambda t, r: {"class_names": write(t / "n.txt", "0 tench\n1 goldfish\n1 shark\n")},
     ["data.class_names", "n.txt, line 3", "class id 1 is named twice ('goldfish' on line 2)"]),
    ("names file: a gap", lambda t, r: {"class_names": write(t / "n.txt", "0 tench\n1 goldfish\n3 shark\n")},
     ["data.class_names", "0..2", "2 has no line", "3 is beyond (line 3)"]),
    ("names file: a line not like the first", lambda t, r: {"class_names": write(t / "n.txt", "0 tench\ngoldfish\n")},
     ["n.txt, line 2", "expected '<class id> <name>' as on line 1", "'goldfish'"]),
    ("names file: a blank line inside", lambda t, r: {"class_names": write(t / "n.txt", "tench\n\ngoldfish\n")},
     ["n.txt, line 2", "a blank line where a class name should be"]),
]


@pytest.mark.parametrize("case, make, fragments", BAD_LISTS, ids=[case[0] for case in BAD_LISTS])
def test_every_bad_list_is_one_error_line_and_no_run_folder(imagenet, tmp_path, capsys, case, make, fragments):
    root, _, _ = imagenet
    output = tmp_path / "run"
    config = recipe(tmp_path / "recipe.yaml", root, output, **make(tmp_path, root))
    assert_one_line_error(*run_tool(TRAIN, ["-c", config], capsys), *fragments)
    assert not output.exists()


@pytest.mark.parametrize("override, fragments", [
    ("data.train_list=null", ["data.train_list must name the training list", "data.dataset filelist"]),
    ("data.root=null", ["data.root must name the folder the lists' image paths are relative to"]),
    ("data.list_separator=''", ["data.list_separator must be null (any spaces or tabs) or a non-empty string"]),
])
def test_filelist_keys_are_checked_with_the_config(override, fragments):
    keys = {"dataset": "filelist", "root": "/data", "train_list": "t.txt", "val_list": "v.txt"}
    with pytest.raises(ConfigError) as raised:
        load_config(data={"data": keys}, overrides=[override])
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_a_corrupt_listed_file_names_itself_in_error_mode(imagenet, tmp_path):
    root, train_entries, _ = imagenet
    (tmp_path / "bad.JPEG").write_bytes(b"\xff\xd8 not a jpeg")
    val_list = write(tmp_path / "val_list.txt", f"{train_entries[0][0]} 0\n{tmp_path / 'bad.JPEG'} 1\n")
    _, val, _ = build_datasets(data_config(root, val_list=val_list, on_bad_image="error"), 16)
    assert val[0][1] == 0
    with pytest.raises(DataError, match="cannot read image .*bad.JPEG"):
        val[1]

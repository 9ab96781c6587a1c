"""Exports and published folders onto any folder, inflicted for real on small mounted file
systems: a mount point (which cannot be renamed), a read-only mount, a disk that fills up, and a
folder left by a run killed while its files were moved in; a disk filling while paddle2onnx,
ONNX Runtime or safetensors writes, simulated for any user. (Kills at every call, the swap
among them: tests/test_crash_consistency.py.) One clear line and exit code 2, nothing half written, the previous output whole;
docs/troubleshooting.md's fault table lists these cases. (To be merged into tests/test_failures.py.)"""
import contextlib
import json
import os

import pytest

from paddle_vit import create_model, fileio, staged_writes
from paddle_vit.cli import convert_weights
from paddle_vit.weights import save_weights

from conftest import mounted_tmpfs
from repo_paths import REPO, load_tool
from test_failures import assert_one_line_error, run_tool

EXPORT = load_tool("export")
SMALL = {"image_size": 14, "embed_dim": 16, "depth": 2, "num_heads": 2, "num_classes": 4}
MODEL_FLAGS = ["--model", "vit_walkthrough"] + [argument for key, value in SMALL.items()
                                                for argument in ("-o", f"model.{key}={value}")]
EXPORT_FILES = ["inference.json", "inference.pdiparams", "model.safetensors", "preprocess.json"]
RECORDED = os.path.join(REPO, "tests", "fixtures", "publish")
PUBLISHED = {"timm": ("plain_mean", ["README.md", "config.json", "model.safetensors"]),
             "huggingface": ("hf_vit", ["README.md", "config.json", "model.safetensors", "preprocessor_config.json"])}


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """The walkthrough ViT at 14 x 14 px (a few thousand weights): a .safetensors file."""
    path = tmp_path_factory.mktemp("weights") / "small.safetensors"
    save_weights(create_model("vit_walkthrough", **SMALL), str(path))
    return path


@pytest.fixture
def mount_point(tmp_path):
    """A 40 MiB file system mounted at the folder given as --out."""
    yield from mounted_tmpfs(tmp_path / "volume", "size=40m")


def export(weights, out, capsys, *extra):
    return run_tool(EXPORT, ["--weights", str(weights), *MODEL_FLAGS, "--out", str(out), *extra], capsys)


def publish(out, capsys, to="timm", *extra):
    return run_tool(convert_weights, ["--weights", os.path.join(RECORDED, PUBLISHED[to][0]), "--out", str(out),
                                      "--to", to, *extra], capsys)


def fill(disk):
    """Fill the file system of `disk` to the last byte with a file `disk`/balloon."""
    with open(os.path.join(disk, "balloon"), "wb", buffering=0) as balloon:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    balloon.write(b"\0" * size)
            except OSError:
                pass


def contents(folder):
    """{name: bytes} of every file in `folder`, hidden ones included (a folder is named only)."""
    found = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, "rb") as stream:
                found[name] = stream.read()
        else:
            found[name] = "a folder"
    return found


def assert_a_full_disk_keeps_the_previous_whole(write, disk, name, replace_option, what):
    """`write(out, *options)` -> (exit code, lines) writes a folder `out` on the tmpfs `disk`: once
    onto free space, then again with `replace_option` onto the disk filled up, which must be one
    error line saying `what` could not be written and leave the first folder byte for byte; and a
    new folder onto the full disk must leave nothing behind."""
    out = disk / name
    assert write(out)[0] == 0
    before = contents(out)
    fill(disk)
    assert_one_line_error(*write(out, replace_option), f"cannot write the {what} to {out}", "No space left on device")
    assert contents(out) == before  # no staging folder, every file as the first write left it
    assert_one_line_error(*write(disk / "new"), "No space left on device")
    assert not (disk / "new").exists()


# ---- export --------------------------------------------------------------------------------

@pytest.mark.slow  # a whole predict or export run: the full suite's, out of the fast loop
@pytest.mark.root
def test_an_export_onto_a_mount_point_is_written_there_and_the_next_replaces_it(weights, mount_point, capsys):
    """The export was renamed over --out at its end: a mount point is busy (EBUSY)."""
    assert export(weights, mount_point, capsys)[0] == 0
    assert sorted(os.listdir(mount_point)) == EXPORT_FILES
    assert json.loads((mount_point / "preprocess.json").read_text())["output"] == "logits"
    (mount_point / "model.onnx").write_bytes(b"stale, from an older export with ONNX")
    assert export(weights, mount_point, capsys, "--softmax")[0] == 0
    assert sorted(os.listdir(mount_point)) == EXPORT_FILES  # no staging folder, the stale file gone
    assert json.loads((mount_point / "preprocess.json").read_text())["output"] == "probabilities"


@pytest.mark.root
def test_an_export_onto_a_read_only_mount_says_so_in_one_line(weights, read_only_folder, capsys):
    for out in (read_only_folder, read_only_folder / "new"):
        assert_one_line_error(*export(weights, out, capsys), f"cannot write the export to {out}",
                              "Read-only file system")
    assert os.listdir(read_only_folder) == []


@pytest.mark.slow  # two exports: 2-4 s
@pytest.mark.root
def test_an_export_onto_a_full_disk_says_so_and_leaves_the_previous_export_whole(weights, tiny_disk, capsys):
    assert_a_full_disk_keeps_the_previous_whole(lambda out, *options: export(weights, out, capsys, *options),
                                                tiny_disk, "export", "--softmax", "export")


@pytest.mark.slow
def test_a_folder_left_by_an_export_killed_while_moving_its_files_in_is_replaced(weights, tmp_path, capsys,
                                                                                monkeypatch):
    """Where the folder cannot be swapped (a mount point, a link: `staged_writes.swap_possible`) the new
    files are moved in one by one; a kill between two moves leaves a folder the next run replaces."""
    out = tmp_path / "export"
    assert export(weights, out, capsys)[0] == 0
    monkeypatch.setattr(staged_writes, "swap_possible", lambda out_dir: False)
    real_replace, moved = os.replace, []

    def killed_after_two_files(source, target):
        if os.path.dirname(target) == str(out):  # the commit's renames, not the writes into the staging folder
            if len(moved) == 2:
                raise KeyboardInterrupt  # as a kill: nothing after this runs
            moved.append(os.path.basename(target))
        real_replace(source, target)
    monkeypatch.setattr(staged_writes.os, "replace", killed_after_two_files)
    code, lines = export(weights, out, capsys, "--softmax")
    monkeypatch.setattr(staged_writes.os, "replace", real_replace)
    assert code == 130 and lines == ["error: interrupted"]
    assert "preprocess.json" not in os.listdir(out) and "preprocess.json" not in moved  # not taken for complete
    assert [name for name in os.listdir(out) if name.startswith(".export-")]  # the evidence of an interrupted run
    assert export(weights, out, capsys, "--softmax")[0] == 0
    assert sorted(os.listdir(out)) == EXPORT_FILES
    assert json.loads((out / "preprocess.json").read_text())["output"] == "probabilities"


def test_a_killed_commit_is_replaced_and_a_folder_of_other_files_never_is(weights, tmp_path, capsys):
    """What a SIGKILL during the commit leaves: export files without preprocess.json, and the
    staging folder. Without the staging folder, the same files may be the user's own."""
    out = tmp_path / "killed"
    (out / ".export-k1ll3d").mkdir(parents=True)
    (out / ".export-k1ll3d" / "preprocess.json").write_text("{}")
    (out / "inference.json").write_text("half")
    (out / "model.onnx").write_text("old")
    assert export(weights, out, capsys)[0] == 0
    assert sorted(os.listdir(out)) == EXPORT_FILES
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "model.safetensors").write_text("my own weights")
    assert_one_line_error(*export(weights, mine, capsys), "holds files that are not an export")
    assert os.listdir(mine) == ["model.safetensors"]


# ---- int8 ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("fills_before", ["_run_quantizer", "fuse_attention"])
def test_an_int8_export_onto_a_disk_that_fills_names_the_write_not_protobuf(weights, tiny_disk, tmp_path, capsys,
                                                                            monkeypatch, fills_before):
    """The disk fills while the int8 file (or its attention-fused float32 copy, written first)
    is written: onnx's C++ writer leaves a truncated file and said nothing, and the tool said
    what reading it back gave (invalid protobuf, 'Failed to find proper ai.onnx domain')."""
    pytest.importorskip("paddle2onnx", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")
    pytest.importorskip("onnxruntime.quantization", reason="int8 needs the optional extra: pip install -e '.[onnx]'")
    from PIL import Image

    from paddle_vit.deploy import quantize

    Image.new("RGB", (20, 20), (120, 60, 30)).save(tmp_path / "gate.png")
    real = getattr(quantize, fills_before)

    def fill_then(*args, **kwargs):
        fill(tiny_disk)
        return real(*args, **kwargs)
    monkeypatch.setattr(quantize, fills_before, fill_then)
    out = tiny_disk / "int8"
    code, lines = export(weights, out, capsys, "--quantize", "int8", "--gate-images", str(tmp_path / "gate.png"))
    assert_one_line_error(code, lines, f"cannot write the export to {out}: No space left on device: {tiny_disk} has",
                          "(writing model.int8.onnx)")
    assert "protobuf" not in lines[0] and ".export-" not in lines[0]
    assert not out.exists()


# ---- timm and Hugging Face folders ------------------------------------------------------------

@pytest.mark.root
@pytest.mark.parametrize("to", ["timm", "huggingface"])
def test_a_folder_published_onto_a_mount_point_is_written_there_and_overwritten_when_asked(mount_point, capsys, to):
    assert publish(mount_point, capsys, to)[0] == 0
    assert sorted(os.listdir(mount_point)) == PUBLISHED[to][1]
    assert_one_line_error(*publish(mount_point, capsys, to), "not empty", "--overwrite")
    (mount_point / "notes.txt").write_text("replaced with the rest")
    assert publish(mount_point, capsys, to, "--overwrite")[0] == 0
    assert sorted(os.listdir(mount_point)) == PUBLISHED[to][1]  # no staging folder left


@pytest.mark.root
def test_a_folder_published_onto_a_read_only_mount_says_so_in_one_line(read_only_folder, capsys):
    for out in (read_only_folder, read_only_folder / "new"):
        assert_one_line_error(*publish(out, capsys), f"cannot write the timm folder to {out}", "Read-only file system")
    assert os.listdir(read_only_folder) == []


@pytest.mark.root
@pytest.mark.parametrize("to", ["timm", "huggingface"])
def test_a_folder_published_onto_a_full_disk_says_so_and_the_previous_stays_whole(tiny_disk, capsys, to):
    assert_a_full_disk_keeps_the_previous_whole(lambda out, *options: publish(out, capsys, to, *options),
                                                tiny_disk, "published", "--overwrite", f"{to} folder")


def test_a_folder_left_by_a_publish_killed_while_moving_its_files_in_is_replaced(tmp_path, capsys):
    out = tmp_path / "killed"
    (out / ".publish-k1ll3d").mkdir(parents=True)
    (out / ".publish-k1ll3d" / "config.json").write_text("{}")
    (out / "model.safetensors").write_text("half")
    (out / "README.md").write_text("old")
    assert publish(out, capsys)[0] == 0  # no --overwrite needed: it is no complete folder
    assert sorted(os.listdir(out)) == PUBLISHED["timm"][1]
    assert json.loads((out / "config.json").read_text())["architecture"]



# ---- a disk too small: named as one, whichever library was writing ---------------------------

MID = {"image_size": 14, "embed_dim": 64, "depth": 4, "num_heads": 2, "num_classes": 4}  # 0.8 MiB of weights
MID_FLAGS = ["--model", "vit_walkthrough"] + [argument for key, value in MID.items()
                                              for argument in ("-o", f"model.{key}={value}")]
ALL_FORMATS = ["--format", "paddle", "--format", "onnx", "--quantize", "int8"]


@pytest.fixture(scope="module")
def mid_weights(tmp_path_factory):
    """A walkthrough ViT with 0.8 MiB of weights, and two photos for the int8 gate."""
    from PIL import Image
    import numpy as np
    folder = tmp_path_factory.mktemp("mid")
    path = folder / "mid.safetensors"
    save_weights(create_model("vit_walkthrough", **MID), str(path))
    (folder / "gate").mkdir()
    for index in range(2):
        pixels = np.random.default_rng(index).integers(0, 256, (14, 14, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / "gate" / f"{index}.png")
    return path, str(folder / "gate")


tmpfs = contextlib.contextmanager(mounted_tmpfs)  # a tmpfs for part of a test


def export_all(mid_weights, out, capsys):
    weights, gate = mid_weights
    return run_tool(EXPORT, ["--weights", str(weights), *MID_FLAGS, "--out", str(out), *ALL_FORMATS,
                             "--gate-images", gate], capsys)


@pytest.mark.slow
@pytest.mark.root
def test_an_export_onto_a_disk_too_small_says_how_much_room_it_has_and_needs(mid_weights, tmp_path, capsys):
    """Before, these sizes gave paddle2onnx's "parse error" (1000 KiB: the traced model cut
    short), ONNX Runtime's "INVALID_PROTOBUF" (2800) and "No space left on device" (4200)."""
    for size_kib in (1000, 2800, 4200):
        with tmpfs(tmp_path / f"disk{size_kib}", f"size={size_kib}k") as disk:
            out = disk / "export"
            assert_one_line_error(*export_all(mid_weights, out, capsys), f"cannot write the export to {out}",
                                  f"No space left on device: {disk} has", "MiB free, about 4.3 MiB needed")
            assert os.listdir(disk) == [], size_kib
    with tmpfs(tmp_path / "roomy", "size=4600k") as roomy:  # what the estimate says fits does
        assert export_all(mid_weights, roomy / "export", capsys)[0] == 0


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("size_kib", [1400, 2800])
def test_a_disk_that_fills_while_a_library_writes_is_named_as_full_not_as_its_symptom(mid_weights, tmp_path, capsys,
                                                                                     monkeypatch, size_kib):
    """The check before the export aside (another process may fill the disk meanwhile): the
    library's own error after a write cut short (paddle2onnx's "nodes must be topologically
    sorted" at 1400 KiB, ONNX Runtime's "INVALID_PROTOBUF" at 2800) is reported as a full disk."""
    from paddle_vit.deploy import export as export_module
    monkeypatch.setattr(export_module, "space_needed", lambda model, formats, int8: (0, 800 * 1024))
    with tmpfs(tmp_path / "disk", f"size={size_kib}k") as disk:
        out = disk / "export"
        assert_one_line_error(*export_all(mid_weights, out, capsys), f"cannot write the export to {out}",
                              f"No space left on device: {disk} has")
        assert os.listdir(disk) == []


@pytest.mark.root
def test_a_published_folder_onto_a_disk_too_small_says_how_much_room_it_needs(tmp_path, capsys):
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        out = disk / "published"
        assert_one_line_error(*publish(out, capsys), f"cannot write the timm folder to {out}",
                              f"No space left on device: {disk} has", "MiB needed")
        assert os.listdir(disk) == []


# ---- a disk that fills while a library writes, simulated for any user -------------------------
# (the same faults for real, on small tmpfs mounts, are the root tests above)

class SimulatedDisk:
    """`os.statvfs` for the paths under `root` saying `free` bytes are left (set `free` to fill
    the disk as a library writes); the real answer elsewhere."""

    def __init__(self, root, free, statvfs):
        self.root, self.free, self.statvfs = str(root), free, statvfs

    def cut_short(self, path):
        """What a C++ writer (paddle2onnx, ONNX Runtime) leaves when the disk fills under it, without
        an error: the first bytes of a protobuf at `path`, and 8 KiB left on the disk."""
        with open(path, "wb") as stream:
            stream.write(b"\x08\x07\x12")
        self.free = 8 * 1024

    def __call__(self, path):
        real = self.statvfs(path)
        if not os.path.abspath(os.fspath(path)).startswith(self.root):
            return real
        blocks = self.free // real.f_frsize
        return os.statvfs_result((real.f_bsize, real.f_frsize, real.f_blocks, blocks, blocks, *tuple(real)[5:]))


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """tmp_path on a disk with 1 GiB free until a test says otherwise."""
    simulated = SimulatedDisk(tmp_path, 1 << 30, os.statvfs)
    monkeypatch.setattr(os, "statvfs", simulated)
    return simulated


def assert_full_disk_line(code, lines, what, out, *symptoms):
    """One `error:` line naming the full disk (the room there is and the room needed), exit 2;
    none of the `symptoms` a library's own message would have shown."""
    assert_one_line_error(code, lines, f"cannot write the {what} to {out}: No space left on device: "
                                       f"{fileio.mount_point(out)} has ", " MiB free, about ", " MiB needed")
    for symptom in symptoms:
        assert symptom not in lines[0].split(str(out), 1)[1], lines[0]


def assert_the_onnx_export_names_the_full_disk(weights, tmp_path, capsys, *symptoms):
    """An ONNX export into tmp_path/export, whose library's write the disk cut short: one line
    naming the full disk and model.onnx, none of the library's `symptoms`, nothing left behind."""
    out = tmp_path / "export"
    code, lines = export(weights, out, capsys, "--format", "onnx")
    assert_full_disk_line(code, lines, "export", out, *symptoms, ".export-")
    assert lines[0].endswith(" MiB needed (writing model.onnx)"), lines[0]
    assert os.listdir(tmp_path) == []


def test_an_export_onto_a_disk_with_less_room_than_it_needs_is_refused_before_any_work(weights, tmp_path, capsys,
                                                                                    monkeypatch, disk):
    from paddle_vit.deploy import export as export_module

    def no_work(*arguments, **options):
        raise AssertionError("the export began")
    monkeypatch.setattr(export_module, "save_traced", no_work)
    disk.free = 64 * 1024
    out = tmp_path / "export"
    code, lines = export(weights, out, capsys)
    assert_full_disk_line(code, lines, "export", out)
    assert "has 0.1 MiB free" in lines[0]
    assert os.listdir(tmp_path) == []


@pytest.fixture
def onnx_extra():
    pytest.importorskip("paddle2onnx", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")
    pytest.importorskip("onnxruntime", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")


@pytest.mark.slow
def test_paddle2onnx_cut_short_by_a_full_disk_is_named_as_the_full_disk(weights, tmp_path, capsys, monkeypatch, disk,
                                                                      onnx_extra):
    """paddle2onnx runs in a child; a full disk left its model cut short, and what it said was
    "parse error" (or "nodes must be topologically sorted")."""
    import subprocess

    from paddle_vit.deploy import onnx_export
    real_run, converted = subprocess.run, []

    def cut_short(command, **options):
        if command[1:3] != ["-c", onnx_export._ONNX_CHILD]:
            return real_run(command, **options)
        disk.cut_short(command[5])
        converted.append(command[5])
        return subprocess.CompletedProcess(command, 1, "", "[Paddle2ONNX] parse error: unexpected end of input")
    monkeypatch.setattr(subprocess, "run", cut_short)
    assert_the_onnx_export_names_the_full_disk(weights, tmp_path, capsys, "parse error", "paddle2onnx")
    assert converted, "paddle2onnx was never run"


@pytest.mark.slow
def test_onnxruntimes_graph_write_cut_short_by_a_full_disk_is_named_as_the_full_disk(weights, tmp_path, capsys,
                                                                                   monkeypatch, disk, onnx_extra):
    """The case of the issue: ONNX Runtime's optimised graph written to a disk that filled, and
    the export said "onnxruntime could not load the converted model: ... INVALID_PROTOBUF"."""
    import onnxruntime
    real_session, folded = onnxruntime.InferenceSession, []

    def cut_short(source, options=None, **more):
        target = getattr(options, "optimized_model_filepath", "")
        if not target:
            return real_session(source, options, **more)
        disk.cut_short(target)
        folded.append(target)
        raise RuntimeError(f"[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from {target} failed:Protobuf "
                           f"parsing failed.")
    monkeypatch.setattr(onnxruntime, "InferenceSession", cut_short)
    assert_the_onnx_export_names_the_full_disk(weights, tmp_path, capsys, "INVALID_PROTOBUF", "could not load")
    assert folded, "onnxruntime never wrote its graph"


@pytest.mark.parametrize("to", ["timm", "huggingface"])
def test_safetensors_cut_short_by_a_full_disk_names_the_file_and_keeps_the_previous_folder(tmp_path, capsys,
                                                                                         monkeypatch, disk, to):
    """safetensors' writer says "I/O error: No space left on device (os error 28)", naming no file."""
    from safetensors import SafetensorError

    from paddle_vit.weights import publish as publish_module
    out = tmp_path / "published"
    assert publish(out, capsys, to)[0] == 0
    before = contents(out)

    def cut_short(tensors, path, metadata=None):
        with open(path, "wb") as stream:
            stream.write(b"\x10\x00")
        disk.free = 4 * 1024
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    monkeypatch.setattr(publish_module, "save_file", cut_short)
    code, lines = publish(out, capsys, to, "--overwrite")
    assert_full_disk_line(code, lines, f"{to} folder", out, "serializing", ".publish-")
    assert lines[0].endswith("(writing model.safetensors)"), lines[0]
    assert contents(out) == before and sorted(os.listdir(tmp_path)) == ["published"]

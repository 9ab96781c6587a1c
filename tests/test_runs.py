"""No run ever overwrites or mixes with another, and nothing is half-done after any kill: run
folders, the lock, resume checks, a SIGKILL at every write point, a full disk (a real tmpfs)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from paddle_vit.cli import run
from paddle_vit.checkpoint import load_checkpoint, save_checkpoint
from paddle_vit.engine.runs import RunLock
from paddle_vit.engine.trainer import Trainer

from repo_paths import REPO, TOOLS, load_tool
from test_train import small_config

TRAIN, EVAL = load_tool("train"), load_tool("eval")
TIMING = ("images_per_sec", "epoch_seconds")  # the only fields of metrics.jsonl that differ between runs


def recipe(tmp_path, name="recipe", **train):
    """A small recipe file without train.output_dir: its runs go to output/<name>/run-NNN."""
    config = small_config(tmp_path / "unused", train=dict({"epochs": 2}, **train))
    data = config.to_dict()
    data["train"]["output_dir"] = None
    path = tmp_path / f"{name}.yaml"
    import yaml
    path.write_text(yaml.safe_dump(data))
    return str(path)


def metrics(folder):
    with open(os.path.join(folder, "metrics.jsonl")) as stream:
        return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in stream]


def one_error_line(code, err, *fragments):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ---- a folder per run ------------------------------------------------------------------------

def test_running_the_quick_start_twice_keeps_both_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = recipe(tmp_path)
    assert run(TRAIN.main, ["-c", path]) == 0
    first = os.path.realpath("output/recipe/latest")
    first_metrics = metrics(first)
    assert run(TRAIN.main, ["-c", path, "-o", "optimizer.lr=0.0001"]) == 0
    second = os.path.realpath("output/recipe/latest")
    assert [os.path.basename(first), os.path.basename(second)] == ["run-001", "run-002"]
    assert metrics(first) == first_metrics and metrics(second) != first_metrics
    for folder in (first, second):
        assert sorted(os.listdir(os.path.join(folder, "checkpoints"))) == [
            "best.pdparams", "last.pdckpt", "last.pdparams"]
    # the first run's best weights still give the first run's accuracy
    capsys.readouterr()
    assert run(EVAL.main, ["-c", path, "--weights", os.path.join(first, "checkpoints", "best.pdparams"),
                           "-o", "eval.engine=dynamic"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluated["top1"] == pytest.approx(max(record["val_top1"] for record in first_metrics), abs=1e-6)


def test_resume_auto_continues_the_latest_run_in_its_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = recipe(tmp_path, epochs=1)
    assert run(TRAIN.main, ["-c", path]) == 0
    assert run(TRAIN.main, ["-c", path, "-o", "train.epochs=2", "-o", "train.resume=auto"]) == 0
    assert sorted(os.listdir("output/recipe")) == ["latest", "run-001"]
    assert [record["epoch"] for record in metrics("output/recipe/run-001")] == [1, 2]


def test_an_explicit_folder_that_holds_a_run_is_refused_with_the_command_that_continues_it(tmp_path, capsys):
    path = recipe(tmp_path, epochs=1)
    folder = tmp_path / "mine"
    assert run(TRAIN.main, ["-c", path, "-o", f"train.output_dir={folder}"]) == 0
    before = (folder / "metrics.jsonl").read_text()
    capsys.readouterr()
    code = run(TRAIN.main, ["-c", path, "-o", f"train.output_dir={folder}"])
    one_error_line(code, capsys.readouterr().err, f"train.output_dir {folder} holds a run already (1 epoch",
                   "-o train.resume=auto")
    assert (folder / "metrics.jsonl").read_text() == before
    assert run(TRAIN.main, ["-c", path, "-o", f"train.output_dir={folder}", "-o", "train.resume=auto",
                            "-o", "train.epochs=2"]) == 0
    assert [record["epoch"] for record in metrics(folder)] == [1, 2]


@pytest.mark.slow
def test_two_live_runs_on_one_folder_the_second_is_refused(tmp_path):
    folder = tmp_path / "busy"
    folder.mkdir()
    lock = RunLock(str(folder)).acquire()  # a live run holds the folder
    try:
        result = subprocess.run([sys.executable, os.path.join(TOOLS, "train.py"), "-c", recipe(tmp_path),
                                 "-o", f"train.output_dir={folder}", "-o", "train.resume=auto"],
                                capture_output=True, text=True, timeout=300)
        one_error_line(result.returncode, result.stderr, f"the run folder {folder} is in use by another training run",
                       f"pid {os.getpid()}")
    finally:
        lock.release()
    assert not (folder / "metrics.jsonl").exists()


# ---- resuming the same run, and only that -----------------------------------------------------

@pytest.mark.parametrize("override, fragment", [
    ("train.batch_size=8", "train.batch_size 16 (the config: 8)"),
    ("train.accumulate_steps=2", "train.accumulate_steps 1 (the config: 2)"),
    ("data.synthetic_classes=3", "the classes [0, 1, 2, 3] (the data: [0, 1, 2])"),
    ("data.dataset=digits", "data.dataset 'synthetic' (the config: 'digits')"),
    ("optimizer.name=sgd", "optimizer.name 'adamw' (the config: 'sgd')"),
    ("model.freeze=backbone", "model.freeze None (the config: 'backbone')"),
])
def test_resuming_with_another_batch_data_or_optimizer_is_refused_naming_what_differs(tmp_path, capsys, override, fragment):
    folder = tmp_path / "run"
    config = small_config(folder, train={"epochs": 1})
    Trainer(config).fit()
    argv = ["-c", recipe(tmp_path), "-o", f"train.output_dir={folder}", "-o", "train.resume=auto", "-o", override]
    code = run(TRAIN.main, argv)
    one_error_line(code, capsys.readouterr().err, "was written with", fragment, "-o train.resume_check=false")


def test_resume_check_off_carries_the_position_over_in_images(tmp_path):
    folder = tmp_path / "run"
    config = small_config(folder, train={"epochs": 2, "batch_size": 16})
    trainer = Trainer(config)
    trainer.position.epoch, trainer.position.batch_in_epoch = 0, 4  # as if stopped 64 images into the epoch
    trainer.save("last.pdckpt")
    trainer.close()
    resumed = Trainer(small_config(folder, train={"epochs": 2, "batch_size": 32, "resume": "auto",
                                                  "resume_check": False}))
    assert resumed.position.batch_in_epoch == 2  # the same 64 images, in batches of 32
    resumed.fit()


def test_a_mid_epoch_stop_resumes_with_another_split_of_the_same_global_batch(tmp_path):
    """Stopped after 3 updates of 8 x 2 accumulated, resumed as batches of 16: the position (48
    images in) and the epoch's loss so far carry over, and the run ends where an unbroken run
    of batch 16 ends."""
    no_dropout = {"dropout": 0.0, "drop_path": 0.0, "name": "vit_walkthrough"}
    stopped = Trainer(small_config(tmp_path / "run", model=no_dropout,
                                   train={"epochs": 1, "batch_size": 8, "accumulate_steps": 2}))
    step = stopped.optimizer_step

    def stop_after_three():
        step()
        stopped.stop_requested = stopped.position.global_step == 3
    stopped.optimizer_step = stop_after_three
    assert stopped.fit()["interrupted"]
    resumed = Trainer(small_config(tmp_path / "run", model=no_dropout,
                                   train={"epochs": 1, "batch_size": 16, "resume": "auto"}))
    assert (resumed.position.batch_in_epoch, resumed.position.global_step) == (3, 3)
    resumed.fit()
    Trainer(small_config(tmp_path / "unbroken", model=no_dropout, train={"epochs": 1, "batch_size": 16})).fit()
    got, want = (json.loads(open(tmp_path / name / "metrics.jsonl").readline()) for name in ("run", "unbroken"))
    for key in ("train_loss", "val_loss", "step"):
        assert got[key] == pytest.approx(want[key], abs=1e-6), key


def test_checkpoint_steps_writes_last_within_the_epoch_at_update_boundaries(tmp_path):
    """96 images in batches of 16 with 2 accumulated: 3 updates an epoch. checkpoint_steps 2
    writes last.pdckpt after update 2 (mid-epoch 1) and 4 (mid-epoch 2), besides each epoch's end."""
    trainer = Trainer(small_config(tmp_path / "run", train={"epochs": 2, "accumulate_steps": 2,
                                                            "checkpoint_steps": 2}))
    save, written = trainer.save, []

    def recording_save(name):
        written.append((name, trainer.position.global_step, trainer.position.batch_in_epoch))
        save(name)
    trainer.save = recording_save
    trainer.fit()
    assert written == [("last.pdckpt", 2, 4), ("last.pdckpt", 3, 0), ("last.pdckpt", 4, 2), ("last.pdckpt", 6, 0)]


def test_a_checkpoint_of_an_older_format_is_one_line(tmp_path, capsys):
    folder = tmp_path / "run"
    Trainer(small_config(folder, train={"epochs": 1})).fit()
    state = load_checkpoint(str(folder / "checkpoints" / "last.pdckpt"))
    del state["model_config"]
    save_checkpoint(state, str(folder / "checkpoints" / "last.pdckpt"))
    code = run(TRAIN.main, ["-c", recipe(tmp_path), "-o", f"train.output_dir={folder}", "-o", "train.resume=auto"])
    one_error_line(code, capsys.readouterr().err, "was written by an older paddle-vit and lacks model_config")


@pytest.fixture(scope="module")
def one_epoch_run(tmp_path_factory):
    """A finished one-epoch run folder, copied by each test that damages it."""
    folder = tmp_path_factory.mktemp("one_epoch") / "run"
    Trainer(small_config(folder, train={"epochs": 1})).fit()
    return folder


def files_in(folder):
    """{relative path: bytes, or the kind of a special file} of everything under `folder`."""
    found = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, folder)] = (open(path, "rb").read() if os.path.isfile(path)
                                                    else oct(os.lstat(path).st_mode))
    return found


def without_global_step(path):
    state = load_checkpoint(str(path))
    del state["global_step"]
    save_checkpoint(state, str(path))


def emptied(path):
    path.write_bytes(b"")


def replaced_by_a_fifo(path):
    path.unlink()
    os.mkfifo(path)


def two_emptied(path):
    (path.parent / "epoch_0001.pdckpt").write_bytes(b"")
    path.write_bytes(b"")


@pytest.mark.parametrize("damage, fragments", [
    (without_global_step, ["last.pdckpt was written by an older paddle-vit and lacks global_step: it cannot be "
                           "resumed", "-o model.pretrained="]),
    (emptied, ["last.pdckpt cannot be read (truncated or corrupt?)"]),
    (replaced_by_a_fifo, ["last.pdckpt is not a regular file (a FIFO)"]),
    (two_emptied, ["none of the 2 checkpoints in", "can be resumed; the first: checkpoint",
                   "epoch_0001.pdckpt cannot be read"]),
    (os.remove, ["holds a run (1 epoch, the last 1) but no checkpoint to continue it from"]),  # it started afresh
])
def test_resume_auto_on_checkpoints_it_cannot_resume_is_one_line_and_leaves_the_run_as_it_was(
        tmp_path, capsys, one_epoch_run, damage, fragments):
    """Starting afresh instead would write a new config.yaml, metrics.jsonl and checkpoints over
    the run's."""
    folder = tmp_path / "run"
    shutil.copytree(one_epoch_run, folder)
    damage(folder / "checkpoints" / "last.pdckpt")
    before = files_in(folder)
    code = run(TRAIN.main, ["-c", recipe(tmp_path), "-o", f"train.output_dir={folder}", "-o", "train.resume=auto"])
    one_error_line(code, capsys.readouterr().err, str(folder), *fragments)
    assert files_in(folder) == before


def test_resuming_with_another_model_names_the_keys_that_differ(tmp_path, capsys, one_epoch_run):
    folder = tmp_path / "run"
    shutil.copytree(one_epoch_run, folder)
    before = files_in(folder)
    code = run(TRAIN.main, ["-c", recipe(tmp_path), "-o", f"train.output_dir={folder}", "-o", "train.resume=auto",
                            "-o", "model.embed_dim=32", "-o", "model.depth=3"])
    one_error_line(code, capsys.readouterr().err, "was written for another model (16-wide, depth 2, 4 classes) than "
                   "the config builds: model.depth 2 (the config: 3); model.embed_dim 16 (the config: 32)")
    assert files_in(folder) == before


def test_a_folder_where_a_checkpoint_is_meant_or_a_file_where_a_folder_is_meant_is_one_line(tmp_path, capsys,
                                                                                           one_epoch_run):
    code = run(TRAIN.main, ["-c", recipe(tmp_path), "-o", f"train.output_dir={tmp_path / 'new'}",
                            "-o", f"train.resume={one_epoch_run}"])
    one_error_line(code, capsys.readouterr().err, f"checkpoint {one_epoch_run} is a folder; expected a .pdckpt file "
                   f"such as {one_epoch_run / 'checkpoints' / 'last.pdckpt'}")
    assert not (tmp_path / "new").exists()
    a_file = tmp_path / "a_file"
    a_file.write_text("not a run")
    code = run(TRAIN.main, ["-c", recipe(tmp_path), "-o", f"train.output_dir={a_file}", "-o", "train.resume=auto"])
    one_error_line(code, capsys.readouterr().err, f"train.output_dir {a_file} is a file; expected a folder")
    assert a_file.read_text() == "not a run"


# ---- a SIGKILL at every write point ----------------------------------------------------------

KILL_AT_WRITE = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from paddle_vit import fileio
real, writes = fileio.atomic_write, []
def dying_write(path, write):
    writes.append(os.path.basename(path))
    if len(writes) == {kill_at} and {before}:
        os.kill(os.getpid(), signal.SIGKILL)  # the machine dies before this write
    real(path, write)
    if len(writes) == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)  # ... or just after it
fileio.atomic_write = dying_write
import runpy
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path({train!r}, run_name="__main__")
"""


def writes_of_an_unbroken_run(tmp_path):
    """The files an unbroken 2-epoch run writes, in order (the kill points), and its results."""
    from paddle_vit import fileio
    writes, real = [], fileio.atomic_write

    def counting(path, write):
        writes.append(os.path.basename(path))
        real(path, write)
    fileio.atomic_write = counting
    try:
        Trainer(small_config(tmp_path / "unbroken", train={"epochs": 2})).fit()
    finally:
        fileio.atomic_write = real
    return writes


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("unbroken")
    writes = writes_of_an_unbroken_run(tmp_path)
    folder = tmp_path / "unbroken"
    weights = {name: value.numpy() for name, value in load_checkpoint(str(folder / "checkpoints" / "last.pdckpt"))
               ["model"].items()}
    return {"writes": writes, "metrics": metrics(folder), "weights": weights, "folder": folder}


def test_the_run_writes_each_file_atomically_at_these_points(unbroken):
    # per epoch: best weights, the checkpoint with the epoch's records, last weights, metrics.jsonl
    assert unbroken["writes"][:2] == ["config.yaml", "metrics.jsonl"]
    epoch = unbroken["writes"][2:2 + 4]
    assert epoch == ["best.pdparams", "last.pdckpt", "last.pdparams", "metrics.jsonl"]


@pytest.mark.slow
@pytest.mark.parametrize("kill_at, before", [(4, True), (4, False), (6, True), (8, True)])
def test_a_sigkill_at_any_write_then_resume_equals_an_unbroken_run(tmp_path, unbroken, kill_at, before):
    """Kill before or after the k-th atomic write (4: the first epoch's checkpoint; 6: its
    metrics.jsonl; 8: the second epoch's checkpoint), resume, and compare metrics.jsonl (but for
    timings), the final weights and the VisualDL curve with the unbroken run's."""
    config = small_config(tmp_path / "killed", train={"epochs": 2})
    config_path = tmp_path / "killed.yaml"
    config.save(str(config_path))
    driver = tmp_path / "driver.py"
    driver.write_text(KILL_AT_WRITE.format(repo=REPO, kill_at=kill_at, before=before,
                                           train=os.path.join(TOOLS, "train.py")))
    result = subprocess.run([sys.executable, str(driver), "-c", str(config_path)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr
    resumed = Trainer(small_config(tmp_path / "killed", train={"epochs": 2, "resume": "auto"}))
    resumed.fit()
    folder = tmp_path / "killed"
    assert metrics(folder) == unbroken["metrics"]
    weights = load_checkpoint(str(folder / "checkpoints" / "last.pdckpt"))["model"]
    for name, expected in unbroken["weights"].items():
        np.testing.assert_allclose(weights[name].numpy(), expected, atol=1e-6, err_msg=name)
    from visualdl import LogReader

    def curve(run_folder):
        reader = LogReader(file_path=str(run_folder / "vdl" / "vdlrecords.paddle_vit.log"))
        return [(record.id, round(record.value, 5)) for record in reader.get_data("scalar", "train/loss")]
    assert curve(folder) == curve(unbroken["folder"])  # one curve, no step twice


# ---- a full disk, for real -------------------------------------------------------------------

FILL_BEFORE = """
import os, sys
sys.path.insert(0, {repo!r})
from paddle_vit import fileio
real, writes = fileio.atomic_write, []
def write_then_fill(path, write):
    writes.append(os.path.basename(path))
    if writes.count({name!r}) == {occurrence} and writes[-1] == {name!r}:  # the disk fills up before this write
        with open(os.path.join({disk!r}, "balloon"), "wb") as balloon:
            try:
                while True:
                    balloon.write(b"\\0" * 65536)
                    balloon.flush()
            except OSError:
                pass
    real(path, write)
fileio.atomic_write = write_then_fill
import runpy
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path({train!r}, run_name="__main__")
"""


@pytest.mark.parametrize("name, occurrence, what", [("last.pdckpt", 2, "checkpoint"), ("last.pdparams", 2, "weights"),
                                                    ("metrics.jsonl", 3, "metrics")])
@pytest.mark.slow
@pytest.mark.root
def test_a_full_disk_at_a_write_is_one_line_and_the_previous_files_stay_whole(tmp_path, tiny_disk, name, occurrence,
                                                                             what):
    folder = tiny_disk / "run"
    config = small_config(folder, train={"epochs": 2})
    config.save(str(tmp_path / "recipe.yaml"))
    driver = tmp_path / "driver.py"
    driver.write_text(FILL_BEFORE.format(repo=REPO, name=name, occurrence=occurrence, disk=str(tiny_disk),
                                         train=os.path.join(TOOLS, "train.py")))
    result = subprocess.run([sys.executable, str(driver), "-c", str(tmp_path / "recipe.yaml")], capture_output=True,
                            text=True, timeout=300)
    one_error_line(result.returncode, result.stderr, "cannot write", what, "No space left on device",
                   "the previous one is kept")
    assert not [file for file in os.listdir(folder / "checkpoints") if file.endswith(".tmp")]
    os.remove(tiny_disk / "balloon")
    load_checkpoint(str(folder / "checkpoints" / "last.pdckpt"))  # whole
    resumed = Trainer(small_config(folder, train={"epochs": 2, "resume": "auto"}))
    resumed.fit()
    assert [record["epoch"] for record in metrics(folder)] == [1, 2]


@pytest.mark.slow
@pytest.mark.root
def test_a_full_disk_while_logging_is_one_line(tmp_path, tiny_disk):
    folder = tiny_disk / "run"
    small_config(folder, train={"epochs": 2}).save(str(tmp_path / "recipe.yaml"))
    script = FILL_BEFORE.format(repo=REPO, name="never", occurrence=1, disk=str(tiny_disk),
                                train=os.path.join(TOOLS, "train.py"))
    # fill the disk once the run is under way, from a second process, while the run logs
    driver = tmp_path / "driver.py"
    driver.write_text(script)
    process = subprocess.Popen([sys.executable, str(driver), "-c", str(tmp_path / "recipe.yaml"), "-o",
                                "train.epochs=40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (folder / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.2)
    with open(tiny_disk / "balloon", "wb") as balloon:
        try:
            while True:
                balloon.write(b"\0" * 65536)
                balloon.flush()
        except OSError:
            pass
    stdout, stderr = process.communicate(timeout=300)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert process.returncode == 2 and len(lines) == 1, stderr
    assert "No space left on device" in lines[0] and lines[0].startswith("error: cannot write"), lines[0]
    assert "Logging error" not in stderr + stdout

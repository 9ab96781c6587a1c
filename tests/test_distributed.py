"""Training on several processes through `python -m paddle.distributed.launch` (gloo on CPU):
two nodes on loopback against one process of the same global batch, a checkpoint of two
ranks resumed on one and on four, and a rank killed mid-run."""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import paddle
import pytest

from paddle_vit.config import load_config
from paddle_vit.checkpoint import load_checkpoint
from paddle_vit.engine.trainer import Trainer

from repo_paths import TOOLS

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]  # each test starts several launchers

RECIPE = {
    "model": {"name": "vit_walkthrough", "image_size": 14, "embed_dim": 16, "depth": 2, "num_heads": 2,
              "dropout": 0.0, "drop_path": 0.0},  # the random streams of dropout are per process
    "data": {"dataset": "synthetic", "synthetic_train_size": 64, "synthetic_val_size": 41, "synthetic_classes": 4},
    "optimizer": {"lr": 0.003},
    "schedule": {"warmup_epochs": 0.5},
    "train": {"epochs": 2, "batch_size": 8, "device": "cpu", "log_interval": 2, "save_interval": 1},
    # the few-shot features are gathered from the ranks (41 val images: one padded duplicate to trim)
    "eval": {"batch_size": 8, "fewshot_interval": 1, "fewshot_shots": [1, 5], "fewshot_seeds": 2},
}


def write_recipe(path, **sections):
    import yaml
    data = {section: dict(values, **sections.get(section, {})) for section, values in RECIPE.items()}
    path.write_text(yaml.safe_dump(data))
    return str(path)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launcher(log_dir, recipe, *overrides, nproc=1, node=None):
    """The command of one launcher: `node=(rank, nnodes, master)` for a multi-node job."""
    command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc),
               "--log_dir", str(log_dir)]
    if node is not None:
        rank, nnodes, master = node
        command += ["--nnodes", str(nnodes), "--master", master, "--rank", str(rank)]
    command += [os.path.join(TOOLS, "train.py"), "-c", recipe]
    for override in overrides:
        command += ["-o", override]
    return command


# Paddle 3.3's TCPStore now and then aborts as a job starts, on a port that another socket took
# between the launcher choosing it and the worker binding it (libuv's assertion in workerlog.0)
PADDLE_STORE_ABORT = "uv__finish_close"


def run_job(make_commands, log_dirs, cwd, timeout=240):
    """Run the launchers of one job (`make_commands()`: one command per node, new ports each call)
    and return [(exit code, output)] per launcher. When one ends with an error, the others get 30
    s and are then stopped: a node left waiting for a peer that died costs seconds, not the
    timeout. A job whose worker shows Paddle's TCPStore abort is started once more, with new
    ports; any other failure is returned as it is."""
    for attempt in (1, 2):
        for folder in log_dirs:
            shutil.rmtree(folder, ignore_errors=True)
        outputs = [os.path.join(str(cwd), f"launcher{index}.out") for index in range(len(log_dirs))]
        processes = [subprocess.Popen(command, stdout=open(output, "w"), stderr=subprocess.STDOUT, cwd=str(cwd))
                     for command, output in zip(make_commands(), outputs)]
        deadline = time.time() + timeout
        while any(process.poll() is None for process in processes) and time.time() < deadline:
            if any(process.poll() not in (None, 0) for process in processes):
                deadline = min(deadline, time.time() + 30)
            time.sleep(0.2)
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        aborted = any(PADDLE_STORE_ABORT in open(log, errors="replace").read()
                      for folder in log_dirs for log in glob.glob(os.path.join(str(folder), "workerlog.*")))
        if not (aborted and attempt == 1):
            return [(process.returncode, open(output, errors="replace").read())
                    for process, output in zip(processes, outputs)]


def weights(path):
    return {name: value.numpy() for name, value in paddle.load(str(path)).items()}


def without_key_bias(named_weights):
    """The weights with each packed q/k/v bias [3 D] cut to its q and v parts [2 D]."""
    def cut(name, value):
        if not name.endswith("attn.qkv.bias"):
            return value
        width = value.shape[0] // 3
        return np.concatenate([value[:width], value[2 * width:]])
    return {name: cut(name, value) for name, value in named_weights.items()}


def assert_same_weights(actual, expected, tolerance=1e-5):
    assert actual.keys() == expected.keys()
    worst = max(float(np.abs(actual[name] - expected[name]).max()) for name in expected)
    assert worst < tolerance, f"largest weight difference {worst}"


def metrics(folder):
    return [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]


def assert_same_metrics(actual, expected):
    assert [r["epoch"] for r in actual] == [r["epoch"] for r in expected]
    for got, want in zip(actual, expected):
        for key in ("train_loss", "val_loss", "val_top1", "step", "fewshot_1shot", "fewshot_5shot"):
            assert got[key] == pytest.approx(want[key], abs=1e-5), key


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory):
    """The reference: one process reading batches of 16 (2 ranks x 8)."""
    folder = tmp_path_factory.mktemp("one") / "run"
    config = load_config(data={**RECIPE, "train": {**RECIPE["train"], "batch_size": 16, "output_dir": str(folder)}})
    Trainer(config).fit()
    return folder


@pytest.fixture(scope="module")
def two_node_run(tmp_path_factory):
    """Two launchers on this machine as node 0 and node 1 of one job, one process each."""
    base = tmp_path_factory.mktemp("two_nodes")
    recipe, folder = write_recipe(base / "recipe.yaml"), base / "run"

    def commands():
        master = f"127.0.0.1:{free_port()}"
        return [launcher(base / f"node{rank}", recipe, f"train.output_dir={folder}", node=(rank, 2, master))
                for rank in (0, 1)]
    for code, output in run_job(commands, [base / "node0", base / "node1"], base):
        assert code == 0, output[-3000:]
    return base, folder


def test_two_nodes_on_loopback_train_as_one_process_of_the_global_batch(one_process_run, two_node_run):
    base, folder = two_node_run
    assert_same_weights(weights(folder / "checkpoints" / "last.pdparams"),
                        weights(one_process_run / "checkpoints" / "last.pdparams"))
    # 41 val images on 2 ranks: the padded duplicate is not counted, as in the single process
    assert_same_metrics(metrics(folder), metrics(one_process_run))
    assert load_checkpoint(str(folder / "checkpoints" / "last.pdckpt"))["world_size"] == 2
    worker_logs = {rank: (base / f"node{rank}" / "workerlog.0").read_text() for rank in (0, 1)}
    for text in worker_logs.values():
        assert "Traceback" not in text and "error" not in text.lower() and "WARNING" not in text
    assert "epoch 2 step 8" in worker_logs[0]  # global rank 0 logs ...
    assert " INFO " not in worker_logs[1]  # ... and node 1's rank does not


def test_the_ips_form_of_a_two_node_launch_trains_the_same(one_process_run, tmp_path):
    """`--ips A,B` on both nodes, each told its own address with --host: two loopback addresses
    (Paddle refuses 127.0.0.1 in a multi-node --ips) stand for two machines."""
    recipe, folder = write_recipe(tmp_path / "recipe.yaml"), tmp_path / "run"

    def commands():
        nodes = []
        for rank, host in enumerate(("127.0.0.2", "127.0.0.3")):
            command = launcher(tmp_path / f"node{rank}", recipe, f"train.output_dir={folder}")
            at = command.index("--log_dir")
            command[at:at] = ["--ips", "127.0.0.2,127.0.0.3", "--host", host]
            nodes.append(command)
        return nodes
    for code, output in run_job(commands, [tmp_path / "node0", tmp_path / "node1"], tmp_path):
        assert code == 0, output[-3000:]
    assert "PADDLE_TRAINER_ID=1" in (tmp_path / "node1" / "envlog.0").read_text()
    assert_same_weights(weights(folder / "checkpoints" / "last.pdparams"),
                        weights(one_process_run / "checkpoints" / "last.pdparams"))


def test_a_two_rank_checkpoint_resumes_on_one_and_on_four_processes(one_process_run, two_node_run, tmp_path,
                                                                     caplog):
    """The checkpoint of epoch 1 of the two-rank run, continued on 1 process (batch 8: the run sets
    accumulate_steps 2) and on 4 (batch 2: the run sets 2, and the ranks all-reduce once per
    update), ends where the unbroken run of batch 16 ends."""
    _, folder = two_node_run
    checkpoint = tmp_path / "epoch_0001.pdckpt"
    shutil.copy(folder / "checkpoints" / "epoch_0001.pdckpt", checkpoint)
    expected = weights(one_process_run / "checkpoints" / "last.pdparams")

    on_one = tmp_path / "on_one"
    config = load_config(data={**RECIPE, "train": {**RECIPE["train"], "output_dir": str(on_one),
                                                    "resume": str(checkpoint)}})
    with caplog.at_level("WARNING", logger="paddle_vit"):
        trainer = Trainer(config)
    assert trainer.config.train.accumulate_steps == 2
    assert "written on 2 processes, on 1: train.accumulate_steps is set to 2 to keep its global batch of 16" \
        in caplog.text
    trainer.fit()
    assert_same_weights(weights(on_one / "checkpoints" / "last.pdparams"), expected)
    assert_same_metrics(metrics(on_one), metrics(one_process_run))

    recipe, on_four = write_recipe(tmp_path / "recipe.yaml"), tmp_path / "on_four"
    [(code, output)] = run_job(lambda: [launcher(tmp_path / "four", recipe, f"train.output_dir={on_four}",
                                                 f"train.resume={checkpoint}", "train.batch_size=2", nproc=4)],
                               [tmp_path / "four"], tmp_path)
    assert code == 0, output[-3000:]
    assert "written on 2 processes, on 4: train.accumulate_steps is set to 2 to keep its global batch of 16" \
        in (tmp_path / "four" / "workerlog.0").read_text()
    assert_same_weights(weights(on_four / "checkpoints" / "last.pdparams"), expected)
    assert_same_metrics(metrics(on_four), metrics(one_process_run))


def test_a_global_batch_that_cannot_be_kept_is_refused_naming_the_batch_that_keeps_it(two_node_run, tmp_path,
                                                                                       capsys):
    from repo_paths import load_tool
    from paddle_vit.cli import run
    _, folder = two_node_run
    checkpoint = tmp_path / "epoch_0001.pdckpt"
    shutil.copy(folder / "checkpoints" / "epoch_0001.pdckpt", checkpoint)
    code = run(load_tool("train").main, ["-c", write_recipe(tmp_path / "r.yaml"), "-o",
                                         f"train.output_dir={tmp_path / 'out'}", "-o", f"train.resume={checkpoint}",
                                         "-o", "train.batch_size=6"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "a global batch of 16 (the config: 6; -o train.batch_size=16 keeps it)" in lines[0]


def rank_pids(launcher_pid):
    """{global rank: pid} of the training processes a launcher started."""
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as stream:
                environ = dict(item.split(b"=", 1) for item in stream.read().split(b"\0") if b"=" in item)
            with open(f"/proc/{entry}/stat") as stream:
                parent = int(stream.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == launcher_pid and b"PADDLE_TRAINER_ID" in environ:
            pids[int(environ[b"PADDLE_TRAINER_ID"])] = int(entry)
    return pids


def test_a_killed_rank_stops_the_job_in_one_line_and_resume_continues_from_the_last_whole_checkpoint(tmp_path):
    """Checkpoints every 25 updates (100 an epoch); rank 1 is killed in epoch 2 after the one of
    step 125 or later. The run continues from that mid-epoch checkpoint on one process."""
    recipe = write_recipe(tmp_path / "recipe.yaml", data={"synthetic_train_size": 1600},
                          train={"log_interval": 20, "checkpoint_steps": 25})
    folder, last = tmp_path / "run", tmp_path / "run" / "checkpoints" / "last.pdckpt"
    job = subprocess.Popen(launcher(tmp_path / "launch", recipe, f"train.output_dir={folder}", nproc=2),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    deadline, written = time.time() + 240, 0
    while written < 125 and job.poll() is None and time.time() < deadline:
        time.sleep(0.1)
        written = load_checkpoint(str(last))["global_step"] if last.exists() else 0
    assert job.poll() is None, "the run ended before the checkpoint of step 125: make epoch 2 longer"
    os.kill(rank_pids(job.pid)[1], signal.SIGKILL)  # rank 1 dies in epoch 2
    job.communicate(timeout=120)
    assert job.returncode != 0
    rank0_log = (tmp_path / "launch" / "workerlog.0").read_text()
    survivor = [line for line in rank0_log.splitlines() if line.startswith("error:")]
    assert len(survivor) == 1 and survivor[0].startswith("error: rank 0: "), rank0_log[-3000:]
    assert f"{last} is the last whole checkpoint: continue with -o train.resume=auto" in survivor[0]
    assert "Traceback" not in (tmp_path / "launch" / "workerlog.0").read_text()
    # nothing half-written is left, and the checkpoint is a whole one of epoch 2, mid-epoch
    assert not [name for name in os.listdir(last.parent) if name.endswith(".tmp")]
    state = load_checkpoint(str(last))
    assert state["epoch"] == 1 and state["global_step"] >= written and state["global_step"] % 25 == 0
    assert state["batch_in_epoch"] == state["global_step"] - 100 > 0
    assert [r["epoch"] for r in metrics(folder)] == [1]

    # the same run continues on one process; it ends where an unbroken one of batch 16 ends
    resumed = Trainer(load_config(recipe, [f"train.output_dir={folder}", "train.resume=auto"]))
    assert resumed.config.train.accumulate_steps == 2
    position = resumed.position
    assert (position.epoch, position.batch_in_epoch) == (1, 2 * state["batch_in_epoch"])  # batches of 8, not 2 x 8
    resumed.fit()
    unbroken = tmp_path / "unbroken"
    Trainer(load_config(recipe, [f"train.output_dir={unbroken}", "train.batch_size=16"])).fit()
    # 200 steps of batches summed as 2 x 8 rather than 16 apart: float32 rounding, not a different run.
    # The keys' bias is left out: its gradient is zero but for rounding (adding one vector to every key
    # adds the same number to a query's every score, which the softmax ignores), and AdamW turns
    # that noise into steps of the learning rate's size (2e-4 apart after 200 steps, the rest 8e-6).
    assert_same_weights(without_key_bias(weights(folder / "checkpoints" / "last.pdparams")),
                        without_key_bias(weights(unbroken / "checkpoints" / "last.pdparams")), tolerance=5e-5)
    assert_same_metrics(metrics(folder), metrics(unbroken))


@pytest.mark.parametrize("level", ["os", "os_g", "p_g_os"])
def test_sharding_on_cpu_is_one_line_naming_what_paddle_lacks(tmp_path, capsys, level):
    from repo_paths import load_tool
    from paddle_vit.cli import run
    code = run(load_tool("train").main, ["-c", write_recipe(tmp_path / "r.yaml"), "-o",
                                         f"train.output_dir={tmp_path / 'out'}", "-o", f"train.sharding={level}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: train.sharding={level} needs GPUs or XPUs: Paddle ")
    assert "supports no cpu" in lines[0] and "-o train.sharding=null" in lines[0]
    assert not (tmp_path / "out").exists()


def test_sharded_optimizer_states_merge_into_the_unsharded_one():
    """Two ranks' shares of an AdamW state (as group_sharded_parallel leaves them: each rank the
    moments of its own parameters) merge into the state one unsharded optimizer has."""
    from paddle_vit.checkpoint import portable_optimizer_state
    from paddle_vit.engine.sharding import merge_rank_states, _to_numpy
    paddle.seed(0)
    model = paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.Linear(3, 2))
    schedule = paddle.optimizer.lr.CosineAnnealingDecay(1e-3, 10)
    optimizer = paddle.optimizer.AdamW(schedule, parameters=model.parameters())
    model(paddle.randn([5, 4])).sum().backward()
    optimizer.step()
    whole = _to_numpy(portable_optimizer_state(optimizer, model))
    names = [name for name, _ in model.named_parameters()]
    share_of = {name: index % 2 for index, name in enumerate(names)}  # rank 0: 0.weight, 1.weight
    shares = [{key: value for key, value in whole.items()
               if key == "LR_Scheduler" or share_of[key[1:].split("_")[0]] == rank} for rank in (0, 1)]
    assert "LR_Scheduler" in whole and all(len(share) < len(whole) for share in shares)
    merged = merge_rank_states(shares)
    assert merged.keys() == whole.keys()
    for key in whole:
        np.testing.assert_array_equal(np.asarray(merged[key]), np.asarray(whole[key]))
    shares[1]["LR_Scheduler"] = {"last_epoch": 99}
    with pytest.raises(ValueError, match="LR_Scheduler differs between ranks"):
        merge_rank_states(shares)


def test_a_node_that_cannot_see_the_run_folder_stops_every_rank_before_anything_is_written(two_node_run,
                                                                                           tmp_path):
    """Node 0 resumes the run (step 8); node 1, as without a shared file system, finds no
    checkpoint. Both stop in one line at start, and node 0's run folder is left as it was."""
    _, finished = two_node_run
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    before = {name: (folder / name).read_bytes() for name in ("config.yaml", "metrics.jsonl")}
    recipe = write_recipe(tmp_path / "recipe.yaml")

    def commands():
        master = f"127.0.0.1:{free_port()}"
        return [launcher(tmp_path / f"node{rank}", recipe, "train.resume=auto", "train.epochs=3",
                         f"train.output_dir={folder if rank == 0 else tmp_path / 'elsewhere'}", node=(rank, 2, master))
                for rank in (0, 1)]
    for rank, (code, output) in enumerate(run_job(commands, [tmp_path / "node0", tmp_path / "node1"], tmp_path)):
        assert code == 2, output[-3000:]
        errors = [line for line in (tmp_path / f"node{rank}" / "workerlog.0").read_text().splitlines()
                  if line.startswith("error:")]
        assert len(errors) == 1, output[-3000:]
        assert errors[0].startswith("error: the processes of this run would start from different points (rank 0: "
                                    "step 8, rank 1: step 0; this rank resumes ")
        assert (f"resumes {folder / 'checkpoints'}" if rank == 0 else "resumes nothing") in errors[0]
        assert errors[0].endswith("every node must see the same run folder (train.output_dir on a shared file "
                                  "system) to resume")
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert not (tmp_path / "elsewhere").exists()


def test_the_errors_of_a_lost_peer_are_told_from_others():
    """The messages gloo's collectives raised here when the other rank was SIGKILLed."""
    from paddle_vit.engine.stopping import is_communication_error
    assert is_communication_error(RuntimeError("[/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:584] TIMEOUT "
                                               "self_rank = 0 pair_rank = 1 peer_str = [127.0.0.1]:53961"))
    assert is_communication_error(RuntimeError("[/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:576] Read "
                                               "error [127.0.0.1]:35211: Connection reset by peer"))
    assert not is_communication_error(RuntimeError("(InvalidArgument) The shape of input x is wrong"))
    assert not is_communication_error(ValueError("gloo"))


STOP_DRIVER = """
import os, signal, sys, time
sys.path.insert(0, {repo!r})
from paddle_vit.engine import stopping
undo = stopping.install(3, lambda: "X is the last whole checkpoint")
if sys.argv[1] == "undo":
    undo()
time.sleep(0.2)
os.kill(os.getpid(), getattr(signal, sys.argv[2]))
time.sleep(30)  # a main thread busy elsewhere: the watcher thread must end the process
"""


@pytest.mark.parametrize("how", ["installed", "undo"])
def test_a_signal_in_a_multi_process_run_is_one_line_at_once_and_only_while_training(tmp_path, how):
    """What the launcher's SIGTERM (and a SIGABRT) does to a rank: one line naming the rank and
    the checkpoint, exit 128 + signal; after the loop the process's own handlers are back."""
    from repo_paths import REPO
    driver = tmp_path / "driver.py"
    driver.write_text(STOP_DRIVER.format(repo=REPO))
    for name, number in (("SIGTERM", 15), ("SIGABRT", 6)):
        result = subprocess.run([sys.executable, str(driver), how, name], capture_output=True, text=True, timeout=60)
        lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        if how == "installed":
            assert result.returncode == 128 + number and len(lines) == 1, result.stderr
            assert lines[0].startswith("error: rank 3: ") and lines[0].endswith("; X is the last whole checkpoint")
            assert ("stopped by SIGTERM (the launcher sends it" if number == 15 else "aborted (SIGABRT)") in lines[0]
        else:
            assert result.returncode != 128 + number and lines == [], result.stderr


def test_two_processes_distil_with_repeated_augmentation_as_one_process_of_the_global_batch(tmp_path):
    """DeiT's recipe on two ranks: the teacher in every process, each image twice an epoch with
    its copies on both ranks, the same steps' images as one process of batch 16 reads."""
    teacher_folder = tmp_path / "teacher"
    Trainer(load_config(data={**RECIPE, "train": {**RECIPE["train"], "epochs": 1, "output_dir": str(teacher_folder)},
                              "eval": {"batch_size": 8}})).fit()
    deit = {"model": {"distilled": True, "pool": "cls"}, "data": {"repeated_augmentation": 2},
            "train": {"distillation": {"teacher": str(teacher_folder / "checkpoints" / "last.pdckpt")}}}
    one = tmp_path / "one"
    sections = {section: dict(values, **deit.get(section, {})) for section, values in RECIPE.items()}
    Trainer(load_config(data={**sections, "train": {**sections["train"], "batch_size": 16,
                                                    "output_dir": str(one)}})).fit()
    recipe, two = write_recipe(tmp_path / "recipe.yaml", **deit), tmp_path / "two"
    for code, output in run_job(lambda: [launcher(tmp_path / "logs", recipe, f"train.output_dir={two}", nproc=2)],
                                [tmp_path / "logs"], tmp_path):
        assert code == 0, output[-3000:]
    assert_same_weights(weights(two / "checkpoints" / "last.pdparams"), weights(one / "checkpoints" / "last.pdparams"))
    assert_same_metrics(metrics(two), metrics(one))
    assert load_checkpoint(str(two / "checkpoints" / "last.pdckpt"))["distillation"]["type"] == "hard"
    assert all(record["teacher_forward_share"] > 0 for record in metrics(two) + metrics(one))  # the teacher ran

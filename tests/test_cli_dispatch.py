"""How a command starts: ``paddle-vit COMMAND`` and ``python tools/COMMAND.py`` make the
process-wide settings (`paddle_vit.runtime.configure`) before Paddle is imported, because Paddle
reads ``GLOG_minloglevel`` when its library loads; `paddle_vit.cli` and the scripts import no Paddle
themselves; the console's own mistakes are one ``error:`` line and exit code 2."""
import json
import os
import subprocess
import sys

import pytest

from paddle_vit import cli
from repo_paths import REPO, TOOLS

# a fresh interpreter that records, at the moment `paddle` is first imported, what the settings
# were; then it runs argv[1:] as the console (``paddle-vit ...``) or as a script (a .py path)
PROBE = """
import atexit, json, os, runpy, sys

seen = {}

class RecordPaddleImport:
    def find_spec(self, name, path=None, target=None):
        if name == "paddle" and not seen:
            runtime = sys.modules.get("paddle_vit.runtime")
            seen.update(glog=os.environ.get("GLOG_minloglevel"),
                        applied=sorted(runtime.APPLIED) if runtime else None)
        return None

sys.meta_path.insert(0, RecordPaddleImport())
atexit.register(lambda: print("PROBE " + json.dumps({"paddle_import": seen or None})))
target = sys.argv[1]
if target.endswith(".py"):
    sys.argv = sys.argv[1:]
    runpy.run_path(target, run_name="__main__")
elif target == "import-only":
    import paddle_vit.cli
    runpy.run_path(sys.argv[2], run_name="tool")
else:
    import paddle_vit.cli
    sys.argv = ["paddle-vit", *sys.argv[1:]]
    sys.exit(paddle_vit.cli.main())
"""


def probe(*arguments):
    """(exit code, what the probe saw when Paddle was imported, stdout, stderr)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PADDLE_VIT_", "GLOG_", "MKL_DEBUG")) and key != "FLAGS_use_stride_kernel"}
    env["PADDLE_VIT_ALLOCATOR"] = "system"  # no restart: the probe's own process is the one observed
    result = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True,
                            timeout=300, cwd=REPO, env=env)
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    return result.returncode, json.loads(line[len("PROBE "):])["paddle_import"], result.stdout, result.stderr


def test_importing_the_cli_and_a_script_imports_no_paddle():
    code, seen, _, stderr = probe("import-only", os.path.join(TOOLS, "train.py"))
    assert code == 0, stderr[-2000:]
    assert seen is None  # paddle was never imported


@pytest.mark.slow  # a child Python that starts Paddle: 2-4 s
def test_a_script_makes_the_settings_before_paddle_is_imported():
    code, seen, stdout, stderr = probe(os.path.join(TOOLS, "train.py"), "--help")
    assert code == 0, stderr[-2000:]
    assert "usage:" in stdout
    assert seen["glog"] == "2" and "GLOG_minloglevel" in seen["applied"]
    assert "No ccache found" not in stderr  # the warning filter was in place when Paddle loaded


@pytest.mark.slow  # a child Python that starts Paddle: 2-4 s
def test_the_console_makes_the_settings_before_paddle_is_imported():
    code, seen, stdout, stderr = probe("eval", "--help")
    assert code == 0, stderr[-2000:]
    assert "usage: " in stdout and "--weights" in stdout
    assert seen["glog"] == "2" and "GLOG_minloglevel" in seen["applied"]


def test_the_console_says_its_own_mistakes_in_one_line(capsys):
    assert cli.main([]) == 2
    assert capsys.readouterr().out.startswith("usage: paddle-vit COMMAND")
    assert cli.main(["--help"]) == 0
    assert cli.main(["evl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown command 'evl' (did you mean: eval?)") and err.count("\n") == 1


@pytest.mark.parametrize("command, argv, option", [
    ("export", ["--weights", "w.pdparams", "--model", "vit_walkthrough", "--out", ""], "--out"),
    ("convert_weights", ["--weights", "w.pdparams", "--model", "vit_walkthrough", "--to", "timm", "--overwrite",
                         "--out", ""], "--out"),
    ("visualize", ["--weights", "w.pdparams", "--image", "a.png", "--out", " "], "--out"),
    ("data_size_experiment", ["--out", ""], "--out"),
    ("deit_budget_experiment", ["--quick", "--out", ""], "--out"),
    ("eval", ["-c", "recipe.yaml", "--weights", "w.pdparams", "--confusion-matrix", ""], "--confusion-matrix"),
    ("predict", ["--weights", "w.pdparams", ""], "IMAGE_OR_FOLDER"),
    ("train", ["-c", "recipe.yaml", "-o", ""], "--override"),
])
def test_an_empty_value_is_refused_before_the_current_folder_is_touched(tmp_path, monkeypatch, capsys, command,
                                                                          argv, option):
    """An empty path is the current folder to the path functions: an export's `--out ''` replaced
    everything in it. Every command refuses an empty value in one line, before any work."""
    import importlib
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    module = importlib.import_module(f"paddle_vit.cli.{command}")
    assert module.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and option in err[0] and "empty" in err[0], err
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_the_path_functions_refuse_an_empty_path(tmp_path, monkeypatch):
    """The library's own guard, for a caller that is not a command: nothing is made or replaced."""
    from paddle_vit import fileio, staged_writes
    from paddle_vit.errors import ConfigError, ExportError
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    for check in (lambda: fileio.writable_folder("", "--out"), lambda: fileio.writable_file(" ", "--out", (".png",))):
        with pytest.raises(ConfigError, match="--out is an empty path"):
            check()
    with pytest.raises(ExportError, match="empty path"):
        with staged_writes.staged_folder("", "export", "preprocess.json", error_type=ExportError,
                                         description="the export"):
            pass
    assert os.listdir(tmp_path) == ["notes.txt"]


@pytest.mark.parametrize("error, line", [(MemoryError(), "error: out of memory"),
                                         (MemoryError("std::bad_alloc\nmore"), "error: out of memory: std::bad_alloc")])
def test_running_out_of_memory_is_one_line_with_or_without_a_message(capsys, error, line):
    """A bare MemoryError() (a list too large for the machine) once crashed the handler itself."""
    def body(argv):
        raise error
    assert cli.run(body, []) == 2
    assert capsys.readouterr().err.splitlines() == [line]

"""The compiled kernels' cache (paddle_vit/variants/compiled.py): built once per machine and
source whichever checkout asks, no file left by a process that loads it, and a good cache never
emptied by a load that failed for another reason."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from paddle_vit.variants import compiled
from repo_paths import REPO

KEY = compiled.build_key(compiled.machine_flags())


def a_built_folder(cache, library=b"\x7fELF a library", record=True):
    """A cache folder as a build leaves it (a fake library), its hash recorded or not."""
    folder = os.path.join(cache, KEY)
    path = compiled.library_path(folder, KEY)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as stream:
        stream.write(library)
    if record:
        compiled._record_hash(folder, path)
    return folder, path


def no_build(folder, name, target_flags):
    raise AssertionError("an intact library was built again")


def test_a_load_that_fails_with_the_library_intact_leaves_the_cache_alone(tmp_path, monkeypatch):
    """A memory limit or a signal while loading is no reason to throw away a build every other
    process uses: the error goes up (the caller keeps Paddle's kernels), nothing is built and the
    folder stays."""
    folder, path = a_built_folder(str(tmp_path))
    before = sorted([compiled.LOCK, *os.listdir(folder)])  # the lock made by the first process that asks

    def out_of_memory(name, library):
        raise MemoryError("std::bad_alloc")
    monkeypatch.setattr(compiled, "_build_in_child", no_build)
    monkeypatch.setattr(compiled, "load_library", out_of_memory)
    with pytest.raises(MemoryError):
        compiled._build(str(tmp_path))
    assert sorted(os.listdir(folder)) == before and compiled.library_intact(folder, KEY)


@pytest.mark.parametrize("change", ["truncated", "changed", "unrecorded"])
def test_a_library_not_as_its_build_left_it_is_built_again_before_it_is_loaded(tmp_path, monkeypatch, change):
    """A library cut short (a build killed during the link), changed since its hash was recorded,
    or never recorded (a kill between the link and the record) is not mapped at all: a library cut
    short can end the process with SIGBUS instead of failing to load. The folder is emptied, but
    for its lock and log, and built again, once; only the new library is loaded."""
    folder, path = a_built_folder(str(tmp_path), record=change != "unrecorded")
    with open(os.path.join(folder, compiled.LOG), "w") as log:
        log.write(f"{compiled.BUILD_HEADER} the first build\n")
    with open(path, "r+b") as stream:
        if change == "truncated":
            stream.truncate(4)
        elif change == "changed":
            stream.write(b"\x7fELF A")  # the same size, another content
    builds, loaded = [], []

    def fake_build(folder, name, target_flags):
        builds.append(sorted(os.listdir(folder)))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as stream:
            stream.write(b"\x7fELF built again")

    def load(name, library):
        with open(library, "rb") as stream:
            loaded.append(stream.read())
        return "the library"
    monkeypatch.setattr(compiled, "_build_in_child", fake_build)
    monkeypatch.setattr(compiled, "load_library", load)
    assert compiled._build(str(tmp_path)) == "the library"
    assert builds == [[compiled.LOCK, compiled.LOG]]
    assert loaded == [b"\x7fELF built again"]
    assert compiled.library_intact(folder, KEY)


def test_an_intact_library_is_loaded_without_a_build(tmp_path, monkeypatch):
    folder, path = a_built_folder(str(tmp_path))
    monkeypatch.setattr(compiled, "_build_in_child", no_build)
    monkeypatch.setattr(compiled, "load_library", lambda name, library: library)
    assert compiled._build(str(tmp_path)) == path


def test_the_module_files_older_processes_left_beside_the_library_are_removed_on_load(tmp_path, monkeypatch):
    """Paddle's loader, as an older checkout sharing the cache still runs it, leaves one module
    file per process (<name>_<thread id>.py): a load removes them, and keeps every other file."""
    folder, path = a_built_folder(str(tmp_path))
    library_folder = os.path.dirname(path)
    name = compiled.library_name(KEY)
    left = [f"{name}_139622971930560.py", f"{name}_140718387652544.py"]
    kept = [f"{name}.py", "version.txt", f"{name}_setup.py"]  # the builder's own, one per key
    for entry in left + kept:
        with open(os.path.join(library_folder, entry), "w") as stream:
            stream.write("# a module file\n")
    monkeypatch.setattr(compiled, "_build_in_child", no_build)
    monkeypatch.setattr(compiled, "load_library", lambda name, library: "the library")
    assert compiled._build(str(tmp_path)) == "the library"
    assert sorted(os.listdir(library_folder)) == sorted([os.path.basename(path), *kept])


LOAD = """
import os, sys, threading
import numpy as np
import paddle
import paddle.nn.functional as F
from paddle_vit.variants import compiled

if len(sys.argv) > 2:  # the compiler stood in for (BUILD_BY_COPY, the library it copies)
    compiled.BUILD_CHILD = sys.argv[2]
loaded = threading.Event()

def another_thread():  # a notebook's cell, a log: what it writes must reach the output untouched
    while not loaded.wait(0.2):
        os.write(1, b"another thread\\n")

thread = threading.Thread(target=another_thread)
thread.start()
library = compiled.kernel_library()
loaded.set()
thread.join()
assert compiled.__file__.startswith(sys.argv[1]), compiled.__file__  # this copy's package, not another
if library is None or not hasattr(library, "paddle_vit_encoder_layer"):
    sys.exit(3)
scores, x = paddle.randn([2, 3, 50, 50]) * 10, paddle.randn([2, 50, 256]) * 3
np.testing.assert_allclose(library.paddle_vit_softmax(scores, 2).numpy(), F.softmax(scores, axis=-1).numpy(),
                           rtol=1e-5, atol=1e-7)
np.testing.assert_allclose(library.paddle_vit_gelu(x, 2).numpy(), F.gelu(x).numpy(), rtol=1e-5, atol=1e-6)
"""
# The build's child process with the compiler stood in for: it is started, its output sent to
# build.log and its library found as the cache runs Paddle's builder, but it prints a compile line
# per source (with the flags the cache passed) and copies a library built already. What is tested
# is the cache's choice to build and where the build's output goes; the compiler's own run is the
# machine's build, whose log test_the_machines_build_compiled_each_source_with_the_projects_flags
# reads, and it runs again whenever a source changes (the sources are part of the build's key).
BUILD_BY_COPY = """
import json, os, shutil, sys, time
arguments = json.loads(sys.argv[1])
for source in arguments["sources"]:
    print("c++ -c", source, " ".join(arguments["extra_cxx_cflags"]), flush=True)
    time.sleep(0.3)  # a build takes seconds: the other thread writes meanwhile
target = os.path.join(arguments["build_directory"], arguments["name"], arguments["name"] + ".so")
os.makedirs(os.path.dirname(target), exist_ok=True)
shutil.copyfile(%r, target)
print("c++ -shared -o", target, " ".join(arguments["extra_ldflags"]), flush=True)
"""
# the whole build stood in for by a copy of a library built already (kernel_cache_writer.py)
LOAD_BUILDING_BY_COPY = """
import runpy, sys
sys.exit(runpy.run_path(sys.argv[1])["main"](sys.argv[2:]))
"""
CACHE_WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_cache_writer.py")


def files_in(folder):
    return sorted(os.path.relpath(path, folder) for path in glob.glob(os.path.join(folder, "**"), recursive=True))


def builds_logged(folder):
    with open(os.path.join(folder, compiled.LOG)) as log:
        return sum(line.startswith(compiled.BUILD_HEADER) for line in log)


def last_build_log(folder):
    """The lines of `folder`'s build.log from its last build's header on."""
    with open(os.path.join(folder, compiled.LOG), errors="replace") as log:
        lines = log.read().splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith(compiled.BUILD_HEADER)]
    assert starts, "build.log names no build"
    return lines[starts[-1]:]


def compiles_each_source_and_links(lines):
    """Each of the kernels' sources on a compile line with the project's flags, and a link."""
    for source in compiled.SOURCES:
        assert any(os.path.basename(source) in line and "-fno-trapping-math" in line and "-O3" in line
                   for line in lines), source
    assert any(line.split()[:1] in (["g++"], ["c++"]) and "-shared" in line for line in lines)  # the link


@pytest.mark.skipif(not compiled.build_possible() or os.environ.get(compiled.SWITCH_VARIABLE, "").strip() == "0",
                    reason="no C++ compiler: nothing is built")
def test_the_machines_build_compiled_each_source_with_the_projects_flags():
    """The kernels this machine uses (built at their first use, in the user's cache, by the
    compiler through Paddle's builder): the build's log shows each source compiled with the
    project's flags and the library linked."""
    library = compiled.kernel_library()
    assert library is not None and hasattr(library, "paddle_vit_encoder_layer")
    compiles_each_source_and_links(last_build_log(os.path.join(compiled.cache_folder(), KEY)))


@pytest.mark.slow  # six processes that start Paddle: 15-30 s
@pytest.mark.skipif(not compiled.build_possible(), reason="no C++ compiler: nothing is built")
def test_two_checkouts_starting_together_build_once_and_a_third_builds_nothing(tmp_path):
    """Three copies of the package (two clones, an install) share one cache: the two started
    together build the kernels once (in a child process, its output into build.log and none into
    theirs) and both load them, computing what Paddle's kernels compute;
    the third loads them as built, three times, and no process leaves a file in the cache. A
    library then cut short (to its first 1%, which ends a process that maps it with SIGBUS) is
    built again by the next process, which loads it. The compiler stood in for (BUILD_BY_COPY)."""
    built = compiled.kernel_library().__file__  # the machine's own build, copied as the compiler's output
    copies = []
    for name in ("clone_a", "clone_b", "install"):
        shutil.copytree(os.path.join(REPO, "paddle_vit"), tmp_path / name / "paddle_vit",
                        ignore=shutil.ignore_patterns("__pycache__"))
        copies.append(str(tmp_path / name))
    env = {key: value for key, value in os.environ.items() if key not in (compiled.SWITCH_VARIABLE, "PYTHONPATH")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    build_by_copy = BUILD_BY_COPY % built

    def start(copy, script=LOAD, *arguments):
        return subprocess.Popen([sys.executable, "-W", "ignore:No ccache found:UserWarning", "-c", script, *arguments],
                                cwd=copy, env=dict(env, PYTHONPATH=copy), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def succeeds(process):
        output, errors = process.communicate(timeout=900)
        assert process.returncode == 0, (process.returncode, errors[-2000:])
        return output.splitlines(), errors
    outputs = [succeeds(process) for process in [start(copy, LOAD, copy, build_by_copy) for copy in copies[:2]]]
    (folder,) = glob.glob(str(tmp_path / "cache" / "paddle_vit" / "kernels" / "*"))
    key = os.path.basename(folder)
    assert builds_logged(folder) == 1
    # the build ran in a child process: its output went to build.log, every compiler command with
    # the project's flags, and none reached either process's output, where the other thread's did;
    # the process that built said so in one line
    assert max(len(lines) for lines, _ in outputs) >= 5  # the build takes seconds
    assert all(set(lines) == {"another thread"} for lines, _ in outputs), outputs
    said = [line for _, errors in outputs for line in errors.splitlines()]  # the one that built says so, once
    assert len(said) == 1 and "building the compiled CPU kernels, once for this machine" in said[0], said
    with open(os.path.join(folder, compiled.LOG)) as log:
        text = log.read()
    assert "another thread" not in text
    compiles_each_source_and_links(text.splitlines())  # the cache passed the project's flags
    cached = files_in(folder)
    for _ in range(3):
        succeeds(start(copies[2], LOAD, copies[2], build_by_copy))
    assert builds_logged(folder) == 1 and files_in(folder) == cached  # nothing built, nothing added
    assert os.path.isdir(os.path.join(folder, compiled.SOURCE_COPY)) and compiled.library_intact(folder, key)

    library = compiled.library_path(folder, key)
    whole = shutil.copyfile(library, tmp_path / "whole.so")
    with open(library, "r+b") as stream:
        stream.truncate(os.path.getsize(whole) // 100)
    succeeds(start(copies[2], LOAD_BUILDING_BY_COPY, CACHE_WRITER, str(tmp_path / "cache"), str(whole)))
    assert builds_logged(folder) == 2 and compiled.library_intact(folder, key)

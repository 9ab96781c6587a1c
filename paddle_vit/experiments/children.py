"""The experiments' runs in child Pythons, side by side, and their answers back as JSON lines.

A child process, not multiprocessing: multiprocessing's resource tracker outlives a notebook's
kernel and holds up its shutdown (which then ends in a SIGTERM). Each child gets one math thread
(OMP_NUM_THREADS=1): the experiments' models are so small that a core is kept busy by Python and
Paddle's dispatch, not by arithmetic, so runs side by side use the cores better than threads in
one run.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

ANSWER = "EXPERIMENT_ANSWER "  # the prefix of a child's answer line on its stdout
_RUNNING = set()  # the children run_child is waiting for now
_RUNNING_LOCK = threading.Lock()


def run_child(module, request, record):
    """Run ``python -m <module>`` with `request` (JSON-ready) on its stdin, pass each answer it
    prints (`answer`) to `record` as it comes. Returns None, or the child's last stderr line
    (its error) when it failed."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
                       GLOG_minloglevel="2", OMP_NUM_THREADS="1", **{PARENT: str(os.getpid())})
    with tempfile.TemporaryFile("w+") as stderr:  # a file, not a pipe: a full pipe would block the child
        child = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=stderr, text=True, env=environment)
        with _RUNNING_LOCK:
            _RUNNING.add(child)
        try:
            child.stdin.write(json.dumps(request))
            child.stdin.close()
            for line in child.stdout:
                if line.startswith(ANSWER):
                    record(json.loads(line[len(ANSWER):]))
            child.wait()
        except (BrokenPipeError, ValueError):  # ended by end_children meanwhile
            child.wait()
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(child)
        stderr.seek(0)
        messages = stderr.read().strip()
    if child.returncode == 0:
        return None
    return messages.splitlines()[-1] if messages else f"exit code {child.returncode}"


def end_children():
    """Kill the children run_child is waiting for and wait until they are gone: an experiment
    stopped (Ctrl-C, SIGTERM) calls it before it removes the folders they write in."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for child in running:
        child.kill()
    for child in running:
        child.wait()


PARENT = "PADDLE_VIT_EXPERIMENT_PARENT"  # the experiment's process id, in its children's environment
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends


def die_with_parent():
    """The child's side, first: end this process when the experiment's process ends, however (a
    kill included), so that no run goes on writing into a folder the next experiment takes over.
    Set here rather than between fork and exec, which is unsafe in a process with threads; a
    parent that ended before it was set is caught by the parent id. Linux only: elsewhere a child
    outlives a killed parent."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.environ.get(PARENT) and os.getppid() != int(os.environ[PARENT]):
        os._exit(1)  # the parent is already gone


def read_request():
    """The child's side: end with the parent (`die_with_parent`), then the request its parent
    wrote to stdin."""
    die_with_parent()
    return json.load(sys.stdin)


def answer(payload):
    """The child's side: one answer (JSON-ready) back to the parent's `record`."""
    print(ANSWER + json.dumps(payload), flush=True)

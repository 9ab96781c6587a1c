"""Kill a tool at each of its file-system calls, in the spirit of the studies that crash an
application at every system call it makes (ALICE, OSDI 2014) and of SQLite's crash tests.

A small C library, preloaded (LD_PRELOAD), stands in front of the C library's functions that
change files: rename, renameat, renameat2, unlink, unlinkat, rmdir, mkdir, mkdirat, link, linkat,
symlink, symlinkat, write, pwrite64, writev, sendfile, copy_file_range, ftruncate, fsync and
fdatasync. Python, Paddle, ONNX, protobuf and safetensors all reach the kernel through them. It
counts the calls whose path (or whose descriptor's file) lies under the watched folder or in a
hidden sibling named after it (a staging folder beside it), and logs each one (`calls`: the
unbroken run), sends its process SIGKILL as the N-th one starts (`kill`), or SIGSTOP as each of
several starts (`stopped_states`, which copies what the file system holds at each stop and lets
the run go on): what the file system holds then is what the calls before it made.

Every rename, unlink, rmdir, mkdir, link and fsync is a kill point; of the writes to one file the
first and the last (the writes between leave the same kind of state: the file partly written).
The tools run in processes forked from one that imported them (`ToolRunner`), so a kill point
costs the tool's own work, not Python's and Paddle's start-up; a process the tool starts is not
counted, and the calls come in the same order on each run (the tools' DataLoaders here have no
workers).
"""
import collections
import dataclasses
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys

SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static char watched[PATH_MAX], hidden_sibling[PATH_MAX];
static int log_fd = -1;
static long kill_at = 0, calls = 0;
static long stops[4096];
static int stop_count = 0, next_stop = 0;

/* watch `folder`, log each watched call to `log` (NULL: none), kill at the `kill`-th (0: never),
   stop the process (SIGSTOP, every thread) as each of the calls numbered in `stop_at` starts
   (increasing, comma-separated; NULL or "": none) */
void crash_points_configure(const char* folder, const char* log, long kill, const char* stop_at) {
  snprintf(watched, sizeof watched, "%s", folder);
  const char* slash = strrchr(watched, '/');
  snprintf(hidden_sibling, sizeof hidden_sibling, "%.*s/.%s", (int)(slash - watched), watched, slash + 1);
  if (log_fd >= 0) syscall(SYS_close, log_fd);
  log_fd = log && *log ? (int)syscall(SYS_open, log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  kill_at = kill;
  calls = 0;
  stop_count = next_stop = 0;
  for (const char* at = stop_at; at && *at && stop_count < (int)(sizeof stops / sizeof *stops); at++) {
    char* end;
    stops[stop_count++] = strtol(at, &end, 10);
    if (*end != ',') break;
    at = end;
  }
}

__attribute__((constructor)) static void settings(void) {
  const char* folder = getenv("CRASH_WATCH");
  if (folder == NULL || !*folder) return;
  const char* kill = getenv("CRASH_KILL");
  crash_points_configure(folder, getenv("CRASH_LOG"), kill && *kill ? atol(kill) : 0, NULL);
  unsetenv("CRASH_WATCH"); unsetenv("CRASH_LOG"); unsetenv("CRASH_KILL");  /* the children run free */
}

static int under(const char* path) {
  size_t n = strlen(watched);
  if (!n || path == NULL) return 0;
  if (strncmp(path, watched, n) == 0 && (path[n] == 0 || path[n] == '/')) return 1;
  return strncmp(path, hidden_sibling, strlen(hidden_sibling)) == 0;
}

static const char* absolute(int dirfd, const char* path, char* buffer) {
  if (path == NULL) return NULL;
  if (path[0] == '/') return path;
  char link[64], base[PATH_MAX];
  ssize_t n;
  if (dirfd == AT_FDCWD) snprintf(link, sizeof link, "/proc/self/cwd");
  else snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
  n = syscall(SYS_readlink, link, base, sizeof base - 1);
  if (n < 0) return path;
  base[n] = 0;
  snprintf(buffer, PATH_MAX, "%s/%s", base, path);
  return buffer;
}

static const char* of_descriptor(int fd, char* buffer) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = syscall(SYS_readlink, link, buffer, PATH_MAX - 1);
  if (n < 0) return NULL;
  buffer[n] = 0;
  return buffer;
}

static void point(const char* call, const char* path) {
  if (!under(path)) return;
  long count = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  if (log_fd >= 0) {
    char line[PATH_MAX + 64];
    int n = snprintf(line, sizeof line, "%ld %s %s\n", count, call, path);
    syscall(SYS_write, log_fd, line, n);
  }
  if (kill_at && count == kill_at) syscall(SYS_kill, getpid(), SIGKILL);
  while (next_stop < stop_count && stops[next_stop] < count) next_stop++;
  if (next_stop < stop_count && stops[next_stop] == count) {
    next_stop++;
    syscall(SYS_kill, getpid(), SIGSTOP);  /* the whole process, as a kill would end it; SIGCONT goes on */
  }
}

#define REAL(name) static __typeof__(name)* real_##name; if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)
#define AT(dirfd, path) absolute(dirfd, path, buffer)

int rename(const char* a, const char* b) { REAL(rename); char buffer[PATH_MAX]; point("rename", AT(AT_FDCWD, b)); return real_rename(a, b); }
int renameat(int fa, const char* a, int fb, const char* b) { REAL(renameat); char buffer[PATH_MAX]; point("renameat", AT(fb, b)); return real_renameat(fa, a, fb, b); }
int renameat2(int fa, const char* a, int fb, const char* b, unsigned flags) { REAL(renameat2); char buffer[PATH_MAX]; point("renameat2", AT(fb, b)); return real_renameat2(fa, a, fb, b, flags); }
int unlink(const char* a) { REAL(unlink); char buffer[PATH_MAX]; point("unlink", AT(AT_FDCWD, a)); return real_unlink(a); }
int unlinkat(int f, const char* a, int flags) { REAL(unlinkat); char buffer[PATH_MAX]; point("unlinkat", AT(f, a)); return real_unlinkat(f, a, flags); }
int rmdir(const char* a) { REAL(rmdir); char buffer[PATH_MAX]; point("rmdir", AT(AT_FDCWD, a)); return real_rmdir(a); }
int mkdir(const char* a, mode_t m) { REAL(mkdir); char buffer[PATH_MAX]; point("mkdir", AT(AT_FDCWD, a)); return real_mkdir(a, m); }
int mkdirat(int f, const char* a, mode_t m) { REAL(mkdirat); char buffer[PATH_MAX]; point("mkdirat", AT(f, a)); return real_mkdirat(f, a, m); }
int link(const char* a, const char* b) { REAL(link); char buffer[PATH_MAX]; point("link", AT(AT_FDCWD, b)); return real_link(a, b); }
int linkat(int fa, const char* a, int fb, const char* b, int flags) { REAL(linkat); char buffer[PATH_MAX]; point("linkat", AT(fb, b)); return real_linkat(fa, a, fb, b, flags); }
int symlink(const char* a, const char* b) { REAL(symlink); char buffer[PATH_MAX]; point("symlink", AT(AT_FDCWD, b)); return real_symlink(a, b); }
int symlinkat(const char* a, int f, const char* b) { REAL(symlinkat); char buffer[PATH_MAX]; point("symlinkat", AT(f, b)); return real_symlinkat(a, f, b); }
ssize_t write(int fd, const void* data, size_t n) { REAL(write); char buffer[PATH_MAX]; point("write", of_descriptor(fd, buffer)); return real_write(fd, data, n); }
ssize_t pwrite64(int fd, const void* data, size_t n, off_t at) { REAL(pwrite64); char buffer[PATH_MAX]; point("write", of_descriptor(fd, buffer)); return real_pwrite64(fd, data, n, at); }
ssize_t writev(int fd, const struct iovec* v, int n) { REAL(writev); char buffer[PATH_MAX]; point("write", of_descriptor(fd, buffer)); return real_writev(fd, v, n); }
ssize_t sendfile(int out, int in, off_t* at, size_t n) { REAL(sendfile); char buffer[PATH_MAX]; point("write", of_descriptor(out, buffer)); return real_sendfile(out, in, at, n); }
ssize_t copy_file_range(int in, off_t* a, int out, off_t* b, size_t n, unsigned flags) { REAL(copy_file_range); char buffer[PATH_MAX]; point("write", of_descriptor(out, buffer)); return real_copy_file_range(in, a, out, b, n, flags); }
int ftruncate(int fd, off_t n) { REAL(ftruncate); char buffer[PATH_MAX]; point("ftruncate", of_descriptor(fd, buffer)); return real_ftruncate(fd, n); }
int fsync(int fd) { REAL(fsync); char buffer[PATH_MAX]; point("fsync", of_descriptor(fd, buffer)); return real_fsync(fd); }
int fdatasync(int fd) { REAL(fdatasync); char buffer[PATH_MAX]; point("fsync", of_descriptor(fd, buffer)); return real_fdatasync(fd); }
"""


SERVER = r"""
import ctypes, json, os, signal, sys
library = ctypes.CDLL(sys.argv[1])
library.crash_points_configure.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_long, ctypes.c_char_p]
from paddle_vit import cli
from paddle_vit.cli import convert_weights, export, train  # the tools' imports, done once
def call(job):  # a function of a test's module: call:PATH:NAME
    import runpy
    _, path, function = job["tool"].split(":")
    return runpy.run_path(path)[function](job["argv"])
for line in sys.stdin:
    job = json.loads(line)
    if job.get("in_server"):  # a warm-up (ToolRunner.warm): run here, unwatched, so that every later fork has it
        import traceback
        try:
            call(job)
            code = 0
        except BaseException:
            with open(job["output"], "w") as stream:
                traceback.print_exc(file=stream)
            code = 99
        print(json.dumps({"code": code}), flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        output = os.open(job["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.chdir(job["cwd"])
        library.crash_points_configure(job["watch"].encode(), (job["log"] or "").encode(), job["kill"],
                                       ",".join(map(str, job["stops"])).encode())
        try:
            if job["tool"].startswith("call:"):
                code = call(job)
            else:
                code = cli.entry(job["tool"], job["argv"], in_process=True)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 99
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            break
        print(json.dumps({"stopped": True}), flush=True)  # at a stop point: the test looks, then says go on
        if not sys.stdin.readline():  # the test went away
            os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    print(json.dumps({"code": code}), flush=True)
"""


class ToolRunner:
    """A process that has imported Paddle and the tools once, with the library preloaded; each run
    is a fork of it running one tool in-process (`paddle_vit.cli.entry`), a process of its own that
    a SIGKILL ends as it would end the tool run from the shell. Saves the seconds of start-up per
    kill point."""

    def __init__(self, library, folder):
        self.folder = folder
        environment = dict(os.environ)
        environment["LD_PRELOAD"] = library + (":" + environment["LD_PRELOAD"] if environment.get("LD_PRELOAD") else "")
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, library], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=environment, cwd=folder)

    def run(self, tool, argv, watched, kill=0, log=None, stops=(), at_stop=None):
        """(exit code, or -signal; the run's output) of `tool` (a command of `paddle_vit.cli`:
        train, export, convert; or ``call:PATH:FUNCTION``, a function of a Python file called with
        `argv`) with `argv`, watching `watched`, killed at its `kill`-th watched call (0: never),
        stopped as each watched call numbered in `stops` starts, `at_stop()` called while it is."""
        output = os.path.join(self.folder, "run.out")
        code = self._request(dict(tool=tool, argv=[str(argument) for argument in argv], watch=os.path.abspath(watched),
                                  kill=kill, log=log, stops=sorted(stops), output=output, cwd=self.folder), at_stop)
        with open(output, errors="replace") as stream:
            return code, stream.read()

    def _request(self, job, at_stop=None):
        """Send `job` to the runner and return the exit code it replies; `at_stop()` at each stop."""
        self._send(json.dumps(job))
        failure = None
        while True:
            reply = self.process.stdout.readline()
            assert reply, "the tool runner died"
            reply = json.loads(reply)
            if not reply.get("stopped"):
                if failure is not None:
                    raise failure
                return reply["code"]
            if failure is None:  # after a failure the run goes on to its end unlooked at, then it is raised
                try:
                    at_stop()
                except BaseException as error:
                    failure = error
            self._send("go on")

    def _send(self, line):
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def warm(self, path, function, argv):
        """Call `function` of the Python file `path` with `argv` in the runner's own process, before
        the runs it forks: whatever it loads or caches, every later run starts with. Asserts success."""
        output = os.path.join(self.folder, "warm.out")
        if self._request(dict(tool=f"call:{path}:{function}", argv=[str(argument) for argument in argv],
                              in_server=True, output=output)) != 0:
            with open(output, errors="replace") as stream:
                raise AssertionError(f"warming the tool runner failed: {stream.read()[-3000:]}")

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


@dataclasses.dataclass(frozen=True)
class KillPoint:
    count: int  # the watched calls made before it, plus one
    call: str
    path: str

    def __str__(self):
        return f"#{self.count} {self.call} {os.path.basename(self.path.rstrip('/'))}"


def available():
    """A C compiler to build the library with, on Linux (the crash tests skip otherwise)."""
    return sys.platform.startswith("linux") and shutil.which("cc") is not None


def build_library(folder):
    """The preloaded library, compiled into `folder`; returns its path."""
    source, library = os.path.join(folder, "crash_points.c"), os.path.join(folder, "crash_points.so")
    with open(source, "w") as stream:
        stream.write(SHIM_SOURCE)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", library, source, "-ldl"], check=True,
                   capture_output=True)
    return library


def calls(runner, tool, argv, watched):
    """Every watched call of an unbroken run, as KillPoints in order; the run must succeed."""
    log = os.path.join(runner.folder, "calls.log")
    if os.path.exists(log):
        os.remove(log)
    code, output = runner.run(tool, argv, watched, log=log)
    assert code == 0, f"the unbroken run failed ({code}): {output[-3000:]}"
    points = []
    if os.path.exists(log):
        with open(log) as lines:
            for line in lines:
                count, call, path = line.rstrip("\n").split(" ", 2)
                points.append(KillPoint(int(count), call, path))
    return points


def kill_points(points, watched):
    """Of the calls of a run that writes `watched`, the ones to kill at.

    - While the writer fills a hidden staging folder (beside `watched`, or inside it) and has
      not yet touched anything else, a kill leaves the output as it was and a partial staging
      folder, which differ only in how much of it exists: the first call on each entry of the
      staging folder, and the last call of that phase.
    - From the first call outside the staging folder on (the swap, the moves, the removal of the
      old output; every call of a writer without one): every call but the writes, and of the
      writes to one file the first and the last (the writes between leave the same state: the
      file partly written).
    """
    watched = os.path.abspath(watched)
    staging_phase = list(itertools.takewhile(lambda point: _staging_entry(point, watched) is not None, points))
    chosen, entries = [], set()
    for point in staging_phase:
        entry = _staging_entry(point, watched)
        if entry not in entries:
            entries.add(entry)
            chosen.append(point)
    if staging_phase and staging_phase[-1] not in chosen:
        chosen.append(staging_phase[-1])
    writes = collections.defaultdict(list)
    for point in points[len(staging_phase):]:
        (writes[point.path] if point.call == "write" else chosen).append(point)
    for each in writes.values():
        chosen.extend({each[0], each[-1]})
    return sorted(chosen, key=lambda point: point.count)


def points_to_kill_for_real(points, watched):
    """Of the kill points of a run writing `watched`, the ones the crash tests also kill at for
    real, to compare with the stopped run's copies: the first, the first after the staging
    phase (the swap of a staged writer, where the output changes), the last."""
    watched = os.path.abspath(watched)
    after_staging = next((point for point in points if _staging_entry(point, watched) is None), points[-1])
    return sorted({points[0], after_staging, points[-1]}, key=lambda point: point.count)


def _staging_entry(point, watched):
    """(staging folder, its entry) when the call of `point` is on a hidden staging folder of
    `watched` (a sibling ``.NAME...``, or a hidden folder inside it: made by mkdir, or holding the
    path) or on something in one; else None."""
    parent, name = os.path.split(watched)
    relative = os.path.relpath(point.path, parent).split(os.sep)
    if relative[0] == name:  # inside the folder: a hidden folder there is a staging folder
        relative = relative[1:]
        if not relative or not relative[0].startswith(".") or (len(relative) == 1 and point.call != "mkdir"):
            return None
    elif not relative[0].startswith("." + name):
        return None
    elif len(relative) > 1 and relative[1] == name:  # the new output built as NAME inside the staging folder
        return tuple(relative[:3])
    return tuple(relative[:2])


def kill(runner, tool, argv, watched, point):
    """Run the tool and kill it as the call of `point` starts (asserted: it was reached)."""
    code, output = runner.run(tool, argv, watched, kill=point.count)
    assert code == -signal.SIGKILL, f"not killed at {point} ({code}): {output[-3000:]}"


def stopped_states(runner, tool, argv, watched, points, into):
    """What a kill at each of `points` leaves, from one run: {point: a folder of `into` holding a
    copy of `watched` and its hidden siblings as they were when the run reached the point}.

    A SIGKILL as a call starts leaves on disk exactly what the calls before it made; a process
    stopped there (SIGSTOP, every thread at once) holds the file system in that state until it is
    continued, so a copy taken meanwhile is the kill's result, at one run's cost instead of one run
    per point. (A copy's files hold no flock, as a killed process's no longer do.) Asserts that
    the run stops at each point, the same call as in the listing run, and succeeds."""
    log = os.path.join(runner.folder, "stops.log")
    if os.path.exists(log):
        os.remove(log)
    states, pending = {}, list(points)

    def copy_at_stop():
        with open(log) as lines:
            count, call, _ = lines.readlines()[-1].rstrip("\n").split(" ", 2)
        point = pending.pop(0)
        assert (int(count), call) == (point.count, point.call), f"stopped at #{count} {call}, not at {point}"
        states[point] = os.path.join(into, str(point.count))
        copy_state(watched, states[point])

    code, output = runner.run(tool, argv, watched, log=log, stops=[point.count for point in points],
                              at_stop=copy_at_stop)
    assert code == 0 and not pending, f"the stopped run failed ({code}) or missed {pending}: {output[-3000:]}"
    return states


def _entries(watched):
    """The paths of `watched` and of its hidden siblings (``.NAME...``) that exist."""
    parent, name = os.path.split(os.path.abspath(watched))
    return [os.path.join(parent, entry) for entry in sorted(os.listdir(parent) if os.path.isdir(parent) else ())
            if entry == name or entry.startswith("." + name)]


def _copy(source, target):
    if os.path.isdir(source) and not os.path.islink(source):
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target, follow_symlinks=False)


def copy_state(watched, into):
    """Copy `watched` and its hidden siblings into the new folder `into` (times, modes and
    symlinks kept)."""
    os.makedirs(into)
    for path in _entries(watched):
        _copy(path, os.path.join(into, os.path.basename(path)))


def remove_state(watched):
    """Remove `watched` and its hidden siblings: nothing of a writer's output or its leftovers."""
    for path in _entries(watched):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def restore_state(state, watched):
    """Make `watched` and its hidden siblings what `copy_state` copied into `state`."""
    remove_state(watched)
    parent = os.path.dirname(os.path.abspath(watched))
    os.makedirs(parent, exist_ok=True)
    for entry in sorted(os.listdir(state)):
        _copy(os.path.join(state, entry), os.path.join(parent, entry))


def layout(watched):
    """What is under `watched` and its hidden siblings, as two runs of the same writer would both
    leave it at the same point: each entry's path and kind (a folder, a file, a symlink and its
    target), a hidden entry's random part (a temporary name's letters, a process id) left out."""
    found = []
    for top in _entries(watched):
        for where, folders, files in os.walk(top):
            for entry in folders + files:
                path = os.path.join(where, entry)
                kind = ("-> " + os.readlink(path) if os.path.islink(path)
                        else "folder" if os.path.isdir(path) else "file")
                found.append((_without_random_parts(os.path.relpath(path, os.path.dirname(top))), kind))
        found.append((_without_random_parts(os.path.basename(top)), "folder" if os.path.isdir(top) else "file"))
    return sorted(found)


def _without_random_parts(path):
    """`path` with each hidden component's random part replaced: ``.model.safetensors.k2j4h1x9.tmp``
    becomes ``.model.safetensors.*.tmp``, ``.export-staging-3kd9x`` ``.export-staging-*``, a
    process id ``*``."""
    parts = []
    for part in path.split(os.sep):
        if part.startswith("."):
            part = re.sub(r"(?<=[.\-_])[A-Za-z0-9_]{5,}(?=\.tmp$|$)", "*", part)
            part = re.sub(r"\d+", "*", part)
        parts.append(part)
    return os.sep.join(parts)

"""How a multi-process run ends when one of its processes does, or the launcher stops it.

`python -m paddle.distributed.launch` watches its processes. When one ends with an error (or
a peer node reports one, or the launcher itself gets Ctrl-C/SIGTERM) it sends every process of
the job SIGTERM three times, 0.2 s apart, and SIGKILL 3 s later. A surviving rank is then
usually blocked inside a collective (the gradient all-reduce of the backward pass), where a
Python signal handler cannot run; with gloo it may instead be aborted (SIGABRT) by gloo's own
error on the lost connection. Either way nothing Python-level would be said before the kill.

`install(rank, describe_checkpoint)` makes such a stop one line on every surviving rank:
- SIGTERM / SIGINT: the interpreter's C-level handler writes the signal number to a wakeup
  pipe, which a watcher thread reads even while the main thread waits in C++; the thread prints
  the line and ends the process at once (exit code 128 + signal). No checkpoint is written then:
  ranks stop at different steps, and a save would wait on a collective that never completes.
  Every checkpoint is written atomically, so the last whole one is what `train.resume=auto`
  continues from.
- SIGABRT (gloo's lost connection): a C-level handler says so before the process ends (134).
- a collective called from Python (the loss all-reduce) that raises gloo's error instead:
  `exit_for_lost_peer`, called by the trainer, says so (exit code 1).
"""
import ctypes
import os
import signal
import sys
import threading
import time

_ABORT_HANDLER = None  # kept alive: the C library holds a pointer to it
_STOPPING = threading.Lock()  # one line, even when a signal and an abort come together


def _say_and_exit(text, code):
    """Write `text` as this process's last line and end it; only the first caller writes."""
    if not _STOPPING.acquire(blocking=False):
        time.sleep(2)  # the other caller is writing the line and ending the process
        os._exit(code)
    _write_line(text)
    sys.stdout.flush()
    os._exit(code)


def _write_line(text):
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


PEER_LOST = "another process of the run has ended or lost its connection"
# how gloo's and NCCL's failures read when a collective called from Python raises them
COMMUNICATION_ERROR_WORDS = ("gloo", "nccl", "pair_rank", "connection reset", "connection closed", "socket",
                             "processgroup")


def stop_line(rank, signum, last_checkpoint):
    """The line a rank prints when a signal stops it."""
    name = signal.Signals(signum).name
    if signum == signal.SIGABRT:
        cause = f"aborted (SIGABRT) in a collective: {PEER_LOST}"
    else:
        cause = (f"stopped by {name} (the launcher sends it to every process when one of them fails or the job "
                 f"is stopped)")
    return f"error: rank {rank}: {cause}; {last_checkpoint}"


def is_communication_error(error):
    """True for the RuntimeError a collective raises when a peer is gone (gloo: "... TIMEOUT
    self_rank = 0 pair_rank = 1", "Read error ...: Connection reset by peer")."""
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(word in text for word in COMMUNICATION_ERROR_WORDS)


def exit_for_lost_peer(rank, error, last_checkpoint):
    """End this rank in one line after a collective failed (exit code 1). Not raised as an error:
    the launcher's SIGTERM follows within a second and would cut a traceback or line short."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    _say_and_exit(f"error: rank {rank}: a collective failed ({first[-160:]}): {PEER_LOST}; {last_checkpoint}", 1)


def install(rank, describe_checkpoint):
    """Make a signal stop this rank at once with one line; `describe_checkpoint()` names the last
    whole checkpoint and how to continue. Returns a function that undoes it."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # signals reach the main thread only: leave them alone
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = {signum: signal.signal(signum, lambda *_: None) for signum in (signal.SIGINT, signal.SIGTERM)}
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    done = threading.Event()

    def watch():
        data = os.read(read_end, 1)
        if done.is_set() or not data:
            return
        _say_and_exit(stop_line(rank, data[0], describe_checkpoint()), 128 + data[0])

    threading.Thread(target=watch, name="paddle_vit-stop-watcher", daemon=True).start()
    restore_abort = _install_abort_line(rank, describe_checkpoint)

    def uninstall():
        done.set()
        restore_abort()
        signal.set_wakeup_fd(previous_fd)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.write(write_end, b"\0")  # let the watcher return
        os.close(write_end)

    return uninstall


def _install_abort_line(rank, describe_checkpoint):
    """A C-level SIGABRT handler (through ctypes) that prints the stop line and ends the process:
    gloo aborts from C++ when a peer's connection is lost, where no Python handler runs. The
    handler runs Python in signal context, which is safe enough here only because it ends the
    process at once; it is installed for the training loop alone. Returns its undo."""
    global _ABORT_HANDLER
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return lambda: None

    @ctypes.CFUNCTYPE(None, ctypes.c_int)
    def on_abort(signum):
        _say_and_exit(stop_line(rank, signum, describe_checkpoint()), 128 + signum)

    _ABORT_HANDLER = on_abort
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    previous = libc.signal(signal.SIGABRT, ctypes.cast(on_abort, ctypes.c_void_p))

    def restore():  # Paddle's own handler (or the default) again once the run is over
        libc.signal(signal.SIGABRT, previous)
    return restore

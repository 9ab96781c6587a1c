"""Bytes shared with DataLoader worker processes (bad-image flags, an error report)."""
import ctypes
import multiprocessing
from multiprocessing import context

import numpy as np


class SharedBytes:
    """A fixed-size byte buffer in shared memory that forked or spawned workers write to.

    Pickling while a worker is being spawned passes the shared memory itself; any other pickle
    or deepcopy gets a private copy of the contents (a raw shared array cannot be pickled).
    """

    def __init__(self, size):
        self._array = multiprocessing.RawArray(ctypes.c_uint8, max(1, int(size)))

    @property
    def view(self):
        """A writable numpy uint8 view of the shared bytes."""
        return np.frombuffer(self._array, dtype=np.uint8)

    def write_message(self, text):
        """Store `text` (UTF-8, truncated to fit) as a zero-terminated message."""
        data = text.encode("utf-8")[:len(self._array) - 1]
        view = self.view
        view[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        view[len(data)] = 0

    def read_message(self):
        """The stored message ('' for none), read from one copy of the bytes: the buffer may be
        written or cleared by another thread while it is read."""
        data = self.view.tobytes()
        end = data.find(b"\0")
        return data[:end if end >= 0 else len(data)].decode("utf-8", errors="replace")

    def clear(self):
        self.view[:] = 0

    def __getstate__(self):
        if context.get_spawning_popen() is not None:
            return {"array": self._array}
        return {"copy": self.view.tobytes()}

    def __setstate__(self, state):
        if "array" in state:
            self._array = state["array"]
        else:
            self._array = multiprocessing.RawArray(ctypes.c_uint8, len(state["copy"]))
            self.view[:] = np.frombuffer(state["copy"], dtype=np.uint8)

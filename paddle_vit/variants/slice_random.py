"""Dropout and drop path that draw from a seed of their own while a slice of a batch is stepped in
a thread (batch_threads.py), and exactly as the walkthrough's modules elsewhere.

Why: threads that both draw from Paddle's one global generator take its numbers in an order that
changes from run to run, so a run with dropout would not be reproducible, nor resumable to the
result of an unbroken one. Inside `slice_stream(base, index)` each random layer call takes the
next seed of its slice's stream, mixed from (base, slice index, call number), and Paddle's dropout
kernel draws from that seed alone (its fix_seed mode: the global generator is left as it was).
`base` is drawn from the global generator once per step on the main thread, so the masks follow
the run's seed as before, though not the same masks as one thread would draw.
"""
import contextlib
import threading

import paddle
import paddle.nn as nn

from ..models.encoder import DropPath
from ..paddle_versions import SEEDED_DROPOUT, applies

_STREAM = threading.local()  # .base, .index, .calls while this thread steps a slice
SEED_RANGE = 2 ** 31 - 1


def _mix(*values):
    """A 64-bit hash of the integers `values` (splitmix64's finaliser, chained)."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (value & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        state = (state ^ (state >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        state ^= state >> 31
    return state


@contextlib.contextmanager
def slice_stream(base, index):
    """While the body runs on this thread, random layers draw from seeds of (base, index)."""
    _STREAM.base, _STREAM.index, _STREAM.calls = base, index, 0
    try:
        yield
    finally:
        _STREAM.base = None


def next_seed():
    """The next seed of this thread's slice stream (1 .. 2^31 - 1), or None outside one."""
    base = getattr(_STREAM, "base", None)
    if base is None:
        return None
    _STREAM.calls += 1
    return _mix(base, _STREAM.index, _STREAM.calls) % (SEED_RANGE - 1) + 1


def draw_base_seed():
    """One number from Paddle's global generator (on the calling thread), the base of a step's streams."""
    return int(paddle.randint(0, SEED_RANGE, [1]).item())


def seeded_dropout(x, rate, mode, seed):
    """Paddle's dropout of `x` with its own `seed` (the global generator untouched)."""
    return paddle._C_ops.dropout(x, None, rate, False, mode, seed, True)


class SeededDropout(nn.Dropout):
    """`nn.Dropout` that, inside a slice stream, draws its mask from the stream's next seed."""

    variant_of = nn.Dropout

    def seeded(self):
        """Whether it draws from its slice's stream in its current mode (Paddle's seeded kernel has
        no axis; a Paddle release it was written for: paddle_versions.py)."""
        return self.training and self.p > 0 and self.axis is None and applies(SEEDED_DROPOUT)

    def forward(self, x):
        seed = next_seed() if self.seeded() else None
        if seed is None:
            return super().forward(x)
        return seeded_dropout(x, self.p, self.mode, seed)


class SeededDropPath(DropPath):
    """`DropPath` that, inside a slice stream, draws its per-sample coins from the stream's next
    seed: dropout of a [B, 1, 1] tensor of ones is the mask 0 or 1 / keep_prob."""

    variant_of = DropPath

    def seeded(self):
        return self.training and self.drop_prob > 0 and applies(SEEDED_DROPOUT)

    def forward(self, x):
        seed = next_seed() if self.seeded() else None
        if seed is None:
            return super().forward(x)
        coins = paddle.ones([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype)  # [B, 1, 1]: one per sample
        return x * seeded_dropout(coins, self.drop_prob, "upscale_in_train", seed)


def draws_seeded(layer):
    """Whether `layer` draws from its slice's stream in its current mode."""
    return isinstance(layer, (SeededDropout, SeededDropPath)) and layer.seeded()


def draws_unseeded(layer):
    """Whether `layer` in its current mode draws random numbers from the global generator even
    inside a slice stream."""
    if not layer.training or draws_seeded(layer):
        return False
    if isinstance(layer, (nn.Dropout, nn.Dropout2D, nn.Dropout3D, nn.AlphaDropout)):
        return layer.p > 0
    return isinstance(layer, DropPath) and layer.drop_prob > 0

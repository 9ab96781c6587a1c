"""The random numbers of a run: its seeds, and the process's own generators given back after it.

A run seeds Paddle's and numpy's global generators (and, when `train.deterministic` on a GPU,
asks cuDNN for deterministic kernels) so that it draws the same weights and masks wherever it
runs. Those are the process's settings, not the run's: a notebook or a test that trains a model
and then draws its own random numbers must draw what it would have drawn without the run.
`ProcessRandomState.capture()` is taken before the run seeds anything and `restore()` puts it
back when the run ends.
"""
import dataclasses

import numpy as np
import paddle

DETERMINISTIC_FLAG = "FLAGS_cudnn_deterministic"


def step_seed(seed, epoch, batch, rank=0):
    """A seed for one training step, the same however the run was interrupted and resumed. Each
    rank gets its own (rank 0's is a single process's): the ranks' dropout and drop-path masks
    must be independent draws, not one mask repeated on every rank's share of the step."""
    words = [seed, epoch, batch] + ([rank] if rank else [])
    return int(np.random.SeedSequence(words).generate_state(1)[0] % (2 ** 31))


def _seeded_devices():
    """The devices whose generators `paddle.seed` sets: the CPU's always, every GPU's (or
    XPU's) in a build that has them."""
    devices = ["cpu"]
    if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        devices.append("gpu")
    elif paddle.device.is_compiled_with_xpu() and paddle.device.xpu.device_count() > 0:
        devices.append("xpu")
    return devices


def _read_flag(name):
    """A Paddle flag's value, or None where this build does not let it be read (a CPU build
    keeps the cuDNN flags private)."""
    try:
        return paddle.get_flags([name])[name]
    except ValueError:
        return None


@dataclasses.dataclass
class ProcessRandomState:
    """Paddle's global generators (per device), numpy's global generator and cuDNN's
    determinism flag, as they were."""
    paddle_states: dict  # device name -> [GeneratorState], as paddle.get_rng_state(device) gives
    numpy_state: tuple
    deterministic_flag: object  # None where the flag cannot be read

    @classmethod
    def capture(cls):
        return cls({device: paddle.get_rng_state(device) for device in _seeded_devices()}, np.random.get_state(),
                   _read_flag(DETERMINISTIC_FLAG))

    def restore(self):
        for device, states in self.paddle_states.items():
            paddle.set_rng_state(states, device)
        np.random.set_state(self.numpy_state)
        if self.deterministic_flag is not None and _read_flag(DETERMINISTIC_FLAG) != self.deterministic_flag:
            paddle.set_flags({DETERMINISTIC_FLAG: self.deterministic_flag})


def seed_process(train, place):
    """Seed the global generators for a run (the model's initial weights come from Paddle's);
    cuDNN's deterministic kernels where `train.deterministic` asks for them on a GPU."""
    if train.deterministic and place.startswith("gpu"):
        paddle.set_flags({DETERMINISTIC_FLAG: True})
    paddle.seed(train.seed)
    np.random.seed(train.seed)

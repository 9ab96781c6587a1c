"""The timm side of the benchmark: timm's model of the same configuration, timed in another Python
(one with torch and timm) by timm_worker.py, which this process drives over its stdin and stdout."""
import dataclasses
import json
import os
import subprocess

from .. import runtime
from ..config import OptimizerConfig
from ..errors import ConfigError, PaddleVitError
from .timm_worker import PROTOCOL_PREFIX


# the timm side of --compare timm, found beside this module so that any install of the package has it
TIMM_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "timm_worker.py")


class ReferenceProcess:
    """timm's model of the same configuration, timed in `torch_python` by `worker_script`
    (`TIMM_WORKER`), one round per `timed(n)` call."""

    def __init__(self, settings, vit_config, torch_python, worker_script=TIMM_WORKER):
        if not torch_python or not os.path.exists(torch_python):
            raise ConfigError(f"--compare timm needs a Python with torch and timm installed; --torch-python "
                              f"{torch_python!r} does not exist (pass --torch-python /path/to/venv/bin/python "
                              f"or set PADDLE_VIT_TORCH_PYTHON)")
        if not os.path.isfile(torch_python) or not os.access(torch_python, os.X_OK):
            kind = "a folder" if os.path.isdir(torch_python) else "not an executable file"
            raise ConfigError(f"--torch-python {torch_python} is {kind}; expected a Python with torch and timm "
                              f"installed, such as /path/to/venv/bin/python")
        if not os.path.isfile(worker_script):
            raise ConfigError(f"--compare timm: the worker script {worker_script} is missing (reinstall paddle-vit)")
        self.python = torch_python
        request = {"mode": settings.mode, "dtype": settings.dtype, "device": settings.device,
                   "batch_size": settings.batch_size, "warmup": settings.warmup,
                   "threads": settings.resolved_threads(), "seed": settings.seed,
                   "vit": dataclasses.asdict(vit_config), "optimizer": None}
        if settings.mode == "train":
            request["optimizer"] = dataclasses.asdict(OptimizerConfig())
        # started as the user started us: without the tcmalloc our relaunch added (runtime.py)
        environment = dict(runtime.environment_without_relaunch(), OMP_NUM_THREADS=str(settings.resolved_threads()),
                           MKL_NUM_THREADS=str(settings.resolved_threads()))
        try:
            self.process = subprocess.Popen([torch_python, worker_script, "benchmark", json.dumps(request)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True, env=environment)
        except OSError as error:  # not a program this system can run (no interpreter line, another machine's)
            raise ConfigError(f"--torch-python {torch_python} cannot be run: {error.strerror or error}; expected a "
                              f"Python with torch and timm installed") from None
        ready = self._read()
        self.num_parameters = ready["num_parameters"]
        self.threads = ready["threads"]
        self.versions = ready["versions"]
        self.peak_rss_mb, self.gpu_max_allocated_mb = None, None

    def _read(self):
        for line in self.process.stdout:
            if line.startswith(PROTOCOL_PREFIX):
                message = json.loads(line[len(PROTOCOL_PREFIX):])
                if "error" in message:
                    self.close()
                    raise ConfigError(f"--compare timm: the PyTorch side failed: {message['error']}"
                                      f"{self._hint(message['error'])}")
                return message
        self.process.wait()
        stderr = self.process.stderr.read().strip().splitlines()
        last = stderr[-1] if stderr else f"exit code {self.process.returncode}"
        raise ConfigError(f"--compare timm: the PyTorch worker stopped: {last}{self._hint(last)}")

    def _hint(self, message):
        if "No module named" in message:
            return f" in {self.python} (pass --torch-python PATH to a Python with torch and timm installed)"
        return ""

    def timed(self, iterations):
        self.process.stdin.write(f"run {iterations}\n")
        self.process.stdin.flush()
        return self._read()["seconds"]

    def profiled(self, iterations):
        """Where `iterations` more steps of timm's time goes, op by op (torch.profiler)."""
        self.process.stdin.write(f"profile {iterations}\n")
        self.process.stdin.flush()
        return self._read()["operators"]

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.flush()
                final = self._read()
                self.peak_rss_mb = final["peak_rss_mb"]
                self.gpu_max_allocated_mb = final["gpu_max_allocated_mb"]
            except (OSError, ValueError, PaddleVitError):
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

"""Importing the library changes nothing outside it: the environment, Paddle's flags and the
warning filters are as they were after `import paddle_vit` and a model built and run; the
process-wide settings come from one explicit call, `paddle_vit.runtime.configure()`, and each of
its settings can be switched off."""
import json
import os
import subprocess
import sys

from repo_paths import REPO

# a fresh interpreter: Paddle's own import is the baseline (it sets things of its own)
PROBE = """
import json, os, sys, warnings
import paddle

def state():
    flags = paddle.base.core.globals()
    return {"environ": dict(os.environ), "filters": [repr(f) for f in warnings.filters],
            "flags": {name: str(flags[name]) for name in flags.keys()}, "argv": list(sys.argv),
            "default_dtype": paddle.get_default_dtype()}

before = state()
import paddle_vit
model = paddle_vit.create_model("vit_walkthrough", image_size=28, patch_size=7, num_classes=3)
logits = model(paddle.randn([2, 3, 28, 28]))
model.train()
model(paddle.randn([2, 3, 28, 28])).sum().backward()
after = state()
from paddle_vit import runtime
changed = {part: sorted(key for key in set(before[part]) | set(after[part])
                         if before[part].get(key) != after[part].get(key))
           for part in ("environ", "flags")}
print(json.dumps({"changed": changed, "filters_same": before["filters"] == after["filters"],
                  "argv_same": before["argv"] == after["argv"], "applied": runtime.APPLIED,
                  "logits": list(logits.shape)}))
if "--configure" in sys.argv:
    applied = runtime.configure()
    print(json.dumps({"applied": sorted(applied), "stride": paddle.get_flags(["FLAGS_use_stride_kernel"])}))
"""


def probe(*arguments, **environ):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PADDLE_VIT_", "GLOG_", "MKL_DEBUG")) and key != "FLAGS_use_stride_kernel"}
    env.update(environ)
    result = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True,
                            timeout=300, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_import_and_a_model_run_leave_the_process_as_it_was():
    (report,) = probe()
    assert report["logits"] == [2, 3]
    assert report["changed"] == {"environ": [], "flags": []}, report["changed"]
    assert report["filters_same"] and report["argv_same"]
    assert report["applied"] == {}  # no process-wide setting was made


def test_configure_is_the_one_call_that_makes_them_and_each_can_be_switched_off():
    report, configured = probe("--configure")
    assert report["changed"] == {"environ": [], "flags": []}
    assert "FLAGS_use_stride_kernel" in configured["applied"] and "warning_filters" in configured["applied"]
    assert configured["stride"] == {"FLAGS_use_stride_kernel": False}
    _, kept = probe("--configure", PADDLE_VIT_STRIDE_KERNELS="1", PADDLE_VIT_MALLOC_TUNING="0")
    assert "FLAGS_use_stride_kernel" not in kept["applied"] and "mallopt" not in kept["applied"]
    assert kept["stride"] == {"FLAGS_use_stride_kernel": True}

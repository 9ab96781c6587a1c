"""Importing the library changes nothing outside it: the environment, Paddle's flags and the
warning filters are as they were after `import paddle_vit`, and after a model built as the
walkthrough builds it and run. `create_model` on a CPU makes the settings that change no result
(MKL's kernels on AMD, glibc's malloc) once, and nothing else; the others come from one explicit
call, `paddle_vit.runtime.configure()`; each of them can be switched off."""
import json
import os
import subprocess
import sys

import pytest
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

def changes(before, after):
    return {part: sorted(key for key in set(before[part]) | set(after[part])
                         if before[part].get(key) != after[part].get(key))
            for part in ("environ", "flags")}

before = state()
import paddle_vit
from paddle_vit import runtime
imported = state()
if "--cpu" in sys.argv:  # another CPU than this machine's, for every branch that reads the CPU
    vendor, flags = sys.argv[sys.argv.index("--cpu") + 1].split(":")
    runtime.cpu_vendor_and_flags = lambda cpuinfo_path=None: (vendor, set(flags.split(",")))
imported_applied = dict(runtime.APPLIED)
if "--walkthrough" in sys.argv:  # the walkthrough's way: the class itself
    model = paddle_vit.ViT(image_size=28, patch_size=7, num_classes=3)
else:
    model = paddle_vit.create_model("vit_walkthrough", image_size=28, patch_size=7, num_classes=3)
attention_class = type(model.encoder.layers[0].attn).__name__
logits = model(paddle.randn([2, 3, 28, 28]))
model.train()
model(paddle.randn([2, 3, 28, 28])).sum().backward()
after = state()
print(json.dumps({"import_changed": changes(before, imported), "import_applied": imported_applied,
                  "changed": changes(before, after), "filters_same": before["filters"] == after["filters"],
                  "argv_same": before["argv"] == after["argv"], "applied": runtime.APPLIED,
                  "attention": attention_class, "logits": list(logits.shape)}))
if "--configure" in sys.argv:
    applied = runtime.configure()
    print(json.dumps({"applied": sorted(applied), "stride": paddle.get_flags(["FLAGS_use_stride_kernel"])}))
"""


def probe(*arguments, **environ):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PADDLE_VIT_", "GLOG_", "MKL_DEBUG", "OMP_NUM_THREADS"))
           and key not in ("FLAGS_use_stride_kernel", "LD_PRELOAD")}
    env.update(environ)
    result = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True,
                            timeout=300, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


# each vendor's branch of the settings, on any machine: the CPU the probe's library sees, and the
# variables its settings then change (MKL_DEBUG_CPU_TYPE=5 only on an AMD CPU with AVX2)
VENDORS = {"AuthenticAMD:sse2,avx,avx2,fma": ["MKL_DEBUG_CPU_TYPE"],
           "AuthenticAMD:sse2,avx": [],
           "GenuineIntel:sse2,avx2,fma,avx512f": []}


@pytest.mark.slow  # 3-6 s (a subprocess, a tool run or a traced graph): out of the fast loop
def test_import_and_a_walkthrough_model_run_leave_the_process_as_it_was():
    (report,) = probe("--walkthrough")
    assert report["logits"] == [2, 3] and report["attention"] == "Attention"
    assert report["import_changed"] == report["changed"] == {"environ": [], "flags": []}, report["changed"]
    assert report["filters_same"] and report["argv_same"]
    assert report["import_applied"] == report["applied"] == {}  # no process-wide setting was made


@pytest.mark.slow  # 3-6 s (a subprocess, a tool run or a traced graph): out of the fast loop
@pytest.mark.parametrize("cpu", VENDORS)
def test_create_model_on_a_cpu_computes_fast_and_makes_only_the_settings_that_change_no_result(cpu):
    (report,) = probe("--cpu", cpu)
    assert report["logits"] == [2, 3] and report["attention"] == "FastCpuAttention"
    assert report["import_changed"] == {"environ": [], "flags": []} and report["import_applied"] == {}
    mkl = VENDORS[cpu]
    assert report["changed"] == {"environ": mkl, "flags": []}, report["changed"]  # stride kernels untouched
    assert report["filters_same"] and report["argv_same"]
    cores = len(os.sched_getaffinity(0))
    expected = set(mkl) | {"mallopt"} | ({"math_threads"} if cores > 1 else set())
    assert set(report["applied"]) == expected, report["applied"]
    assert report["applied"].get("math_threads", cores) == cores  # every core, where Paddle's default is one
    (opted_out,) = probe("--cpu", cpu, PADDLE_VIT_MALLOC_TUNING="0", PADDLE_VIT_MKL_AVX2="0",
                         PADDLE_VIT_MATH_THREADS="0")
    assert opted_out["applied"] == {} and opted_out["changed"] == {"environ": [], "flags": []}


@pytest.mark.slow  # 3-6 s (a subprocess, a tool run or a traced graph): out of the fast loop
@pytest.mark.parametrize("cpu", ["AuthenticAMD:sse2,avx,avx2,fma", "GenuineIntel:sse2,avx2,fma,avx512f"])
def test_configure_is_the_one_call_that_makes_them_and_each_can_be_switched_off(cpu):
    report, configured = probe("--cpu", cpu, "--configure")
    assert report["changed"] == {"environ": VENDORS[cpu], "flags": []}  # create_model's, before configure
    assert "FLAGS_use_stride_kernel" in configured["applied"] and "warning_filters" in configured["applied"]
    assert configured["stride"] == {"FLAGS_use_stride_kernel": False}
    _, kept = probe("--cpu", cpu, "--configure", PADDLE_VIT_STRIDE_KERNELS="1", PADDLE_VIT_MALLOC_TUNING="0")
    assert "FLAGS_use_stride_kernel" not in kept["applied"] and "mallopt" not in kept["applied"]
    assert kept["stride"] == {"FLAGS_use_stride_kernel": True}


def test_the_math_threads_follow_the_users_choice_and_paddles_own_one_is_no_choice():

    from paddle_vit import runtime
    from paddle_vit.errors import ConfigError

    cores = len(os.sched_getaffinity(0))
    every_core = cores if cores > 1 else None
    assert runtime.math_threads_wanted({}) == every_core
    assert runtime.math_threads_wanted({"OMP_NUM_THREADS": "1"}) == every_core  # what Paddle's import sets
    assert runtime.math_threads_wanted({"OMP_NUM_THREADS": "3"}) is None  # the user's: Paddle reads it
    assert runtime.math_threads_wanted({"PADDLE_TRAINERS_NUM": "2"}) is None  # ranks share the machine
    assert runtime.math_threads_wanted({"PADDLE_VIT_MATH_THREADS": "0"}) is None
    assert runtime.math_threads_wanted({"PADDLE_VIT_MATH_THREADS": "1", "OMP_NUM_THREADS": "3"}) == 1
    for bad in ("abc", "-1", "inf", str(cores + 1)):
        with pytest.raises(ConfigError, match="PADDLE_VIT_MATH_THREADS"):
            runtime.math_threads_wanted({"PADDLE_VIT_MATH_THREADS": bad})

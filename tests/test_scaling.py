"""The on-paper scaling estimate (paddle_vit/experiments/scaling.py) against published numbers."""
import json
import subprocess
import sys

import pytest

from paddle_vit.cli import run
from paddle_vit.models import get_model_config
from paddle_vit.experiments.scaling import (activation_bytes_per_image, allreduce_bytes_per_gpu, estimate,
                                            forward_macs_per_image, parameter_count, state_bytes_per_gpu)

from repo_paths import REPO, load_tool

PAPER_TABLE_1 = {"vit_tiny_patch16_224": 5_717_416, "vit_small_patch16_224": 22_050_664,
                 "vit_base_patch16_224": 86_567_656, "vit_base_patch32_224": 88_224_232,
                 "vit_large_patch16_224": 304_326_632, "vit_large_patch32_224": 306_535_400,
                 "vit_huge_patch14_224": 632_045_800}


@pytest.mark.parametrize("name", sorted(PAPER_TABLE_1))
def test_the_parameter_formula_gives_the_published_counts(name):
    assert parameter_count(get_model_config(name)) == PAPER_TABLE_1[name]


def test_forward_multiply_adds_match_the_published_gmacs():
    # timm's model cards: B/16 17.6, L/16 61.6, H/14 167.4 GMACs per 224 image
    for name, gmacs in (("vit_base_patch16_224", 17.6), ("vit_large_patch16_224", 61.6),
                        ("vit_huge_patch14_224", 167.4)):
        assert forward_macs_per_image(get_model_config(name)) / 1e9 == pytest.approx(gmacs, abs=0.15)  # theirs count norms too


def test_model_state_per_gpu_is_the_zero_papers_figure_1():
    """ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters on 64 GPUs with mixed-precision
    Adam take 120 GB each unsharded, 31.4 GB (stage 1), 16.6 GB (stage 2), 1.9 GB (stage 3)."""
    for sharding, gigabytes in ((None, 120.0), ("os", 31.4), ("os_g", 16.6), ("p_g_os", 1.9)):
        assert state_bytes_per_gpu(7.5e9, 64, sharding) / 1e9 == pytest.approx(gigabytes, abs=0.05)


def test_activations_and_all_reduce_by_hand():
    b16 = get_model_config("vit_base_patch16_224")
    # 12 layers x 197 tokens x 768 x (34 + 5 x 12 x 197 / 768) bytes; recomputed: 12 x 2 x 197 x 768
    assert activation_bytes_per_image(b16) == pytest.approx(12 * 197 * 768 * (34 + 5 * 12 * 197 / 768))
    assert activation_bytes_per_image(b16, recompute=True) == 12 * 2 * 197 * 768
    assert allreduce_bytes_per_gpu(1000, 1) == 0
    assert allreduce_bytes_per_gpu(1000, 8) == pytest.approx(2 * 7 / 8 * 2000)  # bf16 gradients


def test_an_estimate_row_keeps_the_global_batch_and_costs_recompute_a_forward():
    b16 = get_model_config("vit_base_patch16_224")
    plain, recomputed = (estimate(b16, 8, 128, 4096, recompute=r) for r in (False, True))
    assert plain["accumulate_steps"] == 4  # 8 GPUs x 128 x 4 = 4096
    assert plain["images_per_sec_per_gpu"] / recomputed["images_per_sec_per_gpu"] == pytest.approx(4 / 3)
    assert recomputed["activation_gib"] < plain["activation_gib"] / 20


def test_the_tool_prints_b16_and_h14_on_1_8_and_64_gpus(capsys):
    assert run(load_tool("scaling_estimate").main, ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["models"]) == {"vit_base_patch16_224", "vit_huge_patch14_224"}
    assert sorted({row["gpus"] for row in result["models"]["vit_huge_patch14_224"]}) == [1, 8, 64]
    assert run(load_tool("scaling_estimate").main, ["--mfu", "1.5"]) == 2
    assert capsys.readouterr().err.strip() == "error: --mfu is a fraction of the peak, in (0, 1]; got 1.5"


def test_every_row_multiplies_out_to_the_global_batch_or_the_batch_is_refused(capsys):
    """GPUs x micro-batch x accumulation is the global batch in every row: --gpus 3 once showed
    128 x 10 (3,840 images) under "global batch 4096"; a default micro-batch steps down to a
    divisor, a given one that does not divide is refused; a value given twice is one row."""
    tool = load_tool("scaling_estimate").main
    assert run(tool, ["vit_base_patch16_224", "vit_base_patch16_224", "--gpus", "1", "8", "8", "40",
                      "--global-batch", "1000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["models"]["vit_base_patch16_224"]
    assert [row["gpus"] for row in rows] == [1] * 2 + [8] * 4 + [40] * 4
    for row in rows:
        assert row["gpus"] * row["micro_batch"] * row["accumulate_steps"] == 1000
    # one GPU: 1000 images, 128 does not divide them, 125 does; 1000 / 8 = 125 <= 128; 1000 / 40 = 25
    assert {row["micro_batch"] for row in rows} == {125, 25}
    for argv, message in ((["--gpus", "3"], "--global-batch 4096 is not a multiple of --gpus 3"),
                          (["--gpus", "8", "--micro-batch", "48"], "--micro-batch 48 does not divide the 512")):
        assert run(tool, argv) == 2
        assert capsys.readouterr().err.startswith(f"error: {message}")


def test_the_estimate_imports_no_paddle():
    """Arithmetic on a config: importing it through its package (experiments/, whose data-size
    experiment trains with Paddle) brings in no Paddle."""
    probe = "import sys, paddle_vit.experiments.scaling; assert 'paddle' not in sys.modules, 'paddle imported'"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr

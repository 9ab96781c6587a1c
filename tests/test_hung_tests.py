"""The suite's guard against a test that never ends (conftest.end_a_hung_test)."""
import os
import subprocess
import sys
import time

import pytest

from conftest import hung_test_report_path

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_a_hung_test_ends_its_process_and_leaves_every_threads_stack(tmp_path):
    target = tmp_path / "test_hangs.py"
    target.write_text("import time\n\n\ndef test_never_ends():\n    time.sleep(600)\n")
    environment = dict(os.environ, PADDLE_VIT_HUNG_TEST_SECONDS="3",
                       PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                            "-n", "0", str(target)], cwd=tmp_path, env=environment,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = run.communicate(timeout=300)
    report = hung_test_report_path(run.pid)
    try:
        assert run.returncode == 1, output
        assert time.monotonic() - started < 120  # not the 600 s of the test
        with open(report) as stacks:
            text = stacks.read()
        assert "Timeout (0:00:03)!" in text and 'test_hangs.py", line 5 in test_never_ends' in text
    finally:
        if os.path.exists(report):
            os.remove(report)


def test_a_test_that_ends_leaves_no_report_behind(tmp_path):
    target = tmp_path / "test_ends.py"
    target.write_text("def test_ends():\n    pass\n")
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                            "-n", "0", str(target)], cwd=tmp_path, env=environment,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = run.communicate(timeout=300)
    assert run.returncode == 0 and "1 passed" in output, output
    assert not os.path.exists(hung_test_report_path(run.pid))

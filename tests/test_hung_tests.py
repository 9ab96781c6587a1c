"""The suite's guard against a test that never ends (conftest.end_a_hung_test)."""
import os
import subprocess
import sys
import time

import pytest

from conftest import hung_test_report_path

TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_with_our_conftest(target, **environment):
    """Run pytest on the file `target` with this suite's conftest as a plugin: (returncode, output, pid)."""
    environment = dict(os.environ, **environment,
                       PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                            "-n", "0", str(target)], cwd=target.parent, env=environment,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = run.communicate(timeout=300)
    return run.returncode, output, run.pid


@pytest.mark.slow
def test_a_hung_test_ends_its_process_and_leaves_every_threads_stack(tmp_path):
    target = tmp_path / "test_hangs.py"
    target.write_text("import time\n\n\ndef test_never_ends():\n    time.sleep(600)\n")
    started = time.monotonic()
    returncode, output, pid = pytest_with_our_conftest(target, PADDLE_VIT_HUNG_TEST_SECONDS="3")
    report = hung_test_report_path(pid)
    try:
        assert returncode == 1, output
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
    returncode, output, pid = pytest_with_our_conftest(target)
    assert returncode == 0 and "1 passed" in output, output
    assert not os.path.exists(hung_test_report_path(pid))

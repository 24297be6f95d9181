"""A Ctrl-C in the command line's first second (while it imports, installs
its handlers, parses its arguments) ends it as one later does: one line,
status 130, no traceback and no click "Aborted!"."""

import os
import signal
import subprocess
import sys
import time

import pytest

# the console script's code; the delays count from its call of ``main``
# (the interpreter's start and the script's one import are beyond reach)
STARTED = (
    "import sys; from storebench.__main__ import main; sys.argv[0] = 'storebench'; "
    "print('started', file=sys.stderr, flush=True); main()"
)


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2])
def test_an_early_ctrl_c_ends_with_one_line_and_status_130(tmp_path, delay):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            STARTED,
            "run",
            "crud",
            "--store",
            "memory",
            "--set",
            "n=100",
            "--dry-run",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr.readline() == "started\n"
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if "dry run: nothing started" in out:  # over before the signal: it met the exit
        assert proc.returncode in (0, 130, -signal.SIGINT), err
        return
    if "storebench" not in err and err.strip().endswith("KeyboardInterrupt"):
        # it landed in this test's own line, between its print and the call of main
        assert 'File "<string>", line 1, in <module>' in err
        return
    assert (proc.returncode, err.strip().splitlines()[-1:]) == (130, ["storebench: interrupted"]), (
        err
    )
    assert "Traceback" not in err and "Aborted" not in err

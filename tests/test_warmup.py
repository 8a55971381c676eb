"""python -m ssmpde.warmup: a kernel compiled by the warm-up is loaded from numba's cache by a
later process, which compiles nothing of it."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ssmpde import warmup

#: In a fresh process: run one warm-up job in process and print the numba functions compiled.
PROBE = """
import json, sys
from ssmpde import warmup
compiled = warmup.compile_log()
warmup.JOBS[sys.argv[1]][0]()
print(json.dumps([name.rsplit(".", 1)[-1] for name, *_ in compiled]))
"""


def _compiled(job, env):
    done = subprocess.run([sys.executable, "-c", PROBE, job], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.e2e
def test_a_warmed_kernel_is_loaded_not_compiled(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    cold = _compiled("ssd-float32", env)
    assert {"_forward", "_backward"} <= cold  # an empty cache compiles the SSD kernels
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "warmed")
    done = subprocess.run([sys.executable, "-m", "ssmpde.warmup", "--processes", "1",
                           "--jobs", "ssd-float32"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 kernel families" in done.stdout
    assert not {"_forward", "_backward"} & _compiled("ssd-float32", env)


def test_unknown_jobs_and_process_counts_are_refused(capsys):
    with pytest.raises(ValueError, match="unknown warm-up jobs.*'nope'"):
        warmup.warm(1, ["nope"])
    with pytest.raises(SystemExit) as stop:
        warmup.main(["--processes", "0"])
    assert stop.value.code == 2
    assert "--processes must be at least 1" in capsys.readouterr().err


def test_every_job_is_timed_and_named():
    assert all(callable(run) and seconds > 0 for run, seconds in warmup.JOBS.values())
    assert {"scan-1d-float32", "scan-2d-float64", "euler"} <= set(warmup.JOBS)


def test_the_makefiles_warm_up_commands_parse():
    """make test and test-e2e run the warm-up first: an option or job name the warm-up does
    not know would stop them (argparse exits 2)."""
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    commands = [shlex.split(line.split("-m ssmpde.warmup", 1)[1])
                for line in makefile.splitlines() if "-m ssmpde.warmup" in line]
    assert len(commands) >= 2
    for argv in commands:
        assert warmup.parser().parse_args(argv).processes == 2

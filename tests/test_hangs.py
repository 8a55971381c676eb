"""Nothing hangs, and Ctrl-C is one line: every run below is a real ``python -m ssmpde``
process in a session of its own, killed (with all its processes) if it outlives a hard
timeout.

* bad ``--scheduler`` addresses (malformed, unknown scheme, no port, tls:// without TLS
  configuration, a port where something listens but never answers) end the process with one
  line, exit 2, in seconds: a dask client built half-way from such an address used to block
  the interpreter's exit for minutes, or for ever;
* a worker killed for exceeding its memory limit stops the run with one line naming the batch
  and the memory, instead of being restarted for ever;
* SIGINT sent to the whole process group (what Ctrl-C in a terminal does) at ~0.2 s, ~1 s and
  in the middle of a run on a local cluster of two workers: exit 130, one line on stderr, no
  traceback from the driver or its workers, no process left behind.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ssmpde.generation import generate
from ssmpde.surrogates.checkpoint import STATE_JSON
from ssmpde.surrogates.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]
NS = ["--resolution", "16", "--simulation-resolution", "16", "--time", "0.4",
      "--record-interval", "0.1", "--time-step", "0.01", "--viscosity", "1e-3"]

# Rollout steps of the solver alone that take minutes on the tiny grid.
ROLLOUT_STEPS = 20000

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups, RLIMIT_RSS")


def start(arguments: list[str], *, code: str | None = None, env: dict | None = None,
          **kwargs) -> subprocess.Popen:
    """``python -m ssmpde ARGUMENTS`` (or ``python -c CODE ARGUMENTS``) in a new session.

    With ``code=None`` the child first writes ``started`` to stdout, then runs ``ssmpde`` as
    ``-m`` does: the test times its signals from the moment this package's code can run
    (an interpreter still starting up on a loaded machine is not ours to make quiet).
    """
    if code is None:
        code = ("import runpy, sys; print('started', flush=True); sys.argv[0] = 'ssmpde'; "
                "runpy.run_module('ssmpde', run_name='__main__', alter_sys=True)")
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    before = kwargs.pop("preexec_fn", None)

    def prepare() -> None:
        # A test run started in the background of a script (`pytest &`) ignores SIGINT, and
        # its children inherit that: give them the disposition of a terminal's foreground.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if before is not None:
            before()

    return subprocess.Popen([sys.executable, "-c", code, *map(str, arguments)], cwd=ROOT,
                            env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=prepare, **kwargs)


def finish(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """Wait for ``process``; past ``timeout`` seconds, kill its whole group and fail. Then
    wait (a few seconds at most) for every process of the group to be gone."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate()
        pytest.fail(f"ran past {timeout} s and was killed; stderr ends: {err[-3000:]}")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return out, err
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail(f"processes of the run outlived it (a dask worker?); stderr: {err[-3000:]}")


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hangs")
    ns = root / "ns.nc"
    generate("navier-stokes", num_samples=3, seed=0, out=ns, progress=False,
             resolution=16, simulation_resolution=16, final_time=0.4, record_interval=0.1,
             time_step=0.01, viscosity=1e-3)
    train("geomano", ns, out=root / "ns-run", preset="navier-stokes",
          model_overrides=dict(width=8, depth=1, state_size=4),
          config=TrainConfig(epochs=1, batch_size=2, window=2), progress=False)
    return {"ns": ns, "run": root / "ns-run", "root": root}


# ------------------------------------------------------------------------------------------
# Scheduler addresses: one line, exit 2, and the process ends
# ------------------------------------------------------------------------------------------

MAINS = """
    import json, sys, time
    from ssmpde.cli import main

    # The imports of the first command, outside the timings.
    import ssmpde.coupling.run, ssmpde.generation.generate, ssmpde.surrogates.train, distributed
    from ssmpde.cli import _build_parser
    _build_parser()

    results = []
    for argv in json.loads(sys.argv[1]):
        started = time.monotonic()
        results.append([main(argv), time.monotonic() - started])
    print(json.dumps(results), flush=True)
"""


def serve(reply: bytes):
    """A TCP port on 127.0.0.1 that accepts connections and sends ``reply`` (maybe
    nothing), never a word of dask's protocol; a generator: yields the port, then closes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = []

    def accept():
        while True:
            try:
                connection = server.accept()[0]
            except OSError:
                return
            accepted.append(connection)
            if reply:
                connection.sendall(reply)

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for connection in accepted:
        connection.close()


@pytest.fixture
def silent_port():
    yield from serve(b"")


@pytest.fixture
def http_port():
    yield from serve(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 64)


def test_bad_scheduler_addresses_end_the_process_in_seconds(tmp_path, silent_port,
                                                           http_port):
    refused = socket.socket()  # bound, never listening: connections are refused
    refused.bind(("127.0.0.1", 0))
    addresses = ["http://localhost:8786", "tcp://localhost", "tls://localhost:8786",
                 "inproc://x", "bogus", "", f"tcp://127.0.0.1:{silent_port}",
                 f"tcp://127.0.0.1:{http_port}", f"tcp://127.0.0.1:{refused.getsockname()[1]}"]
    generate_argv = ["generate", "darcy", "--samples", "2", "--resolution", "9",
                     "--simulation-resolution", "17", "--no-progress", "--out",
                     str(tmp_path / "d.zarr")]
    rollout_argv = ["rollout", "--checkpoint", str(tmp_path / "run"), "--steps", "2",
                    "--schedule", "parareal:2"]
    argvs = [[*generate_argv, "--scheduler", a] for a in addresses] + \
        [[*rollout_argv, "--scheduler", a] for a in ("bogus", "", f"tcp://127.0.0.1:"
                                                     f"{silent_port}")]
    started = time.monotonic()
    process = start([json.dumps(argvs)], code=textwrap.dedent(MAINS),
                    env={"SSMPDE_SCHEDULER_TIMEOUT": "1"})
    out, err = finish(process, timeout=90)
    refused.close()
    total = time.monotonic() - started
    assert process.returncode == 0, err
    results = json.loads(out.strip().splitlines()[-1])
    messages = lines(err)
    assert "Traceback" not in err and len(messages) == len(argvs), err
    for argv, (status, seconds), message in zip(argvs, results, messages):
        assert status == 2, (argv, message)
        assert message.startswith("ssmpde: error:") and "scheduler" in message, message
        assert "Traceback" not in message and "unpack" not in message, message
        assert seconds < 10, (argv, seconds)  # the 1 s handshake deadline, not dask's 30 s
        if argv[-1]:
            assert repr(argv[-1]) in message, message
    # Exit took seconds, not the minutes a half-built client's close used to block it for.
    assert total - sum(seconds for _, seconds in results) < 30, total
    assert not (tmp_path / "d.zarr").exists()


def test_a_workers_address_is_not_taken_for_the_schedulers():
    from distributed import LocalCluster

    from ssmpde.cluster import connect

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
        with connect(cluster.scheduler_address, timeout=10) as client:
            assert len(client.nthreads()) == 1
        worker = next(iter(cluster.scheduler.workers))
        with pytest.raises(OSError, match=f"'{worker}' answered, but not as a dask scheduler "
                                          r"\(it is a dask Worker\)"):
            with connect(worker, timeout=10):
                pass


# ------------------------------------------------------------------------------------------
# A worker over its memory limit: the run stops with one line
# ------------------------------------------------------------------------------------------

HOG = """
    import resource, sys, time
    import numpy as np
    from ssmpde.generation import generate
    from ssmpde.solvers import get_solver

    Darcy = type(get_solver("darcy"))

    class Hog(Darcy):
        '''Darcy whose batches take 600 MiB more than their estimate.'''

        def solve_batch(self, inputs, progress=None):
            hog = np.ones(600 * 2 ** 20 // 8)
            time.sleep(5)  # the nanny looks every 0.1 s
            return super().solve_batch(inputs, progress=progress)

    try:
        generate(Hog(resolution=9, simulation_resolution=17), num_samples=2, batch_size=2,
                 out=sys.argv[1], workers=1, progress=False)
    except MemoryError as error:
        print(f"MemoryError: {error}", file=sys.stderr)
        sys.exit(2)
"""


def test_a_worker_over_its_memory_limit_stops_the_run_in_one_line(tmp_path):
    def limit_memory():  # what dask reads as this machine's memory (the kernel ignores it)
        import resource

        resource.setrlimit(resource.RLIMIT_RSS, (500 * 2 ** 20, 500 * 2 ** 20))

    out = tmp_path / "hog.zarr"
    process = start([out], code=textwrap.dedent(HOG), preexec_fn=limit_memory,
                    env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})
    _, err = finish(process, timeout=90)
    assert process.returncode == 2, err
    assert len(lines(err)) == 1 and "Traceback" not in err, err
    line = lines(err)[0]
    assert line.startswith("MemoryError: samples 0..1 failed: the worker running this task "
                           "was restarted 1 time for using more than its memory limit of "
                           "500 MiB"), line
    assert "estimated to need about" in line and "lower --batch-size or --workers" in line
    assert "rerun the same command to resume" in line


# ------------------------------------------------------------------------------------------
# Ctrl-C: one line and exit 130 at any moment
# ------------------------------------------------------------------------------------------

def interrupt(arguments: list[str], delay: float, *, ready=None) -> tuple[int, list[str]]:
    """Run ``ssmpde ARGUMENTS``, Ctrl-C its process group ``delay`` s after it started (or
    after ``ready(process)()`` holds), and return its exit status and stderr lines."""
    process = start(arguments)
    assert process.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 120
    check = ready(process) if ready is not None else None
    while check is not None and not check():
        assert time.monotonic() < deadline and process.poll() is None, "never got ready"
        time.sleep(0.05)
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGINT)
    _, err = finish(process, timeout=60)
    return process.returncode, lines(err)


def long_run(command: str, files, tmp_path) -> list:
    """A command of each kind that runs for minutes."""
    return {
        "generate": ["generate", "darcy", "--samples", "200000", "--resolution", "9",
                     "--simulation-resolution", "17", "--out", tmp_path / "d.nc",
                     "--no-progress"],
        "train": ["train", "geomano", "--data", files["ns"], "--out", tmp_path / "run",
                  "--preset", "navier-stokes", "--epochs", "100000", "--window", "2",
                  "--model-option", "width=8", "--model-option", "depth=1", "--no-progress"],
        "rollout": ["rollout", "--checkpoint", files["run"], "--steps", ROLLOUT_STEPS,
                    "--schedule", "solver", "--coarse", "none"],
    }[command]


@pytest.mark.parametrize("delay", [0.2, 1.0])
@pytest.mark.parametrize("command", ["generate", "train", "rollout"])
def test_ctrl_c_in_the_first_second_is_one_line(files, tmp_path, command, delay):
    status, messages = interrupt(long_run(command, files, tmp_path), delay)
    assert status == 130, messages
    assert len(messages) == 1 and messages[0].startswith("ssmpde: interrupted"), messages
    if command == "generate" and "resume" not in messages[0]:
        assert messages[0].endswith("nothing to resume")
        assert not (tmp_path / "d.nc").exists()


def workers_starting(process: subprocess.Popen) -> Callable[[], bool]:
    """Whether ``process`` has begun to spawn its dask worker processes."""
    def ready() -> bool:
        try:
            return any("spawn_main" in " ".join(child.cmdline())
                       for child in psutil.Process(process.pid).children(recursive=True))
        except psutil.Error:
            return False
    return ready


@pytest.mark.parametrize("moment", ["workers-starting", "mid-run"])
def test_ctrl_c_on_two_workers_is_one_line(tmp_path, moment):
    # While the workers start (they import for a second or more), a Ctrl-C used to give a
    # KeyboardInterrupt traceback from each; mid-run, the cluster's shutdown logged warnings.
    out = tmp_path / "ns.zarr"
    status, messages = interrupt(
        ["generate", "navier-stokes", "--samples", "64", "--batch-size", "1", *NS, "--out",
         out, "--workers", "2", "--no-progress"], 0.0 if moment == "workers-starting" else 1.0,
        ready=workers_starting if moment == "workers-starting" else lambda _: out.exists)
    assert status == 130, messages
    assert len(messages) == 1 and messages[0].startswith("ssmpde: interrupted"), messages
    if moment == "mid-run":
        assert "again to resume" in messages[0], messages


def test_ctrl_c_after_a_saved_epoch_says_how_to_resume(files, tmp_path):
    run = tmp_path / "run"
    status, messages = interrupt(long_run("train", files, tmp_path), 0.3,
                                 ready=lambda _: (run / STATE_JSON).is_file)
    assert status == 130, messages
    assert messages == [f"ssmpde: interrupted: the run in '{run}' keeps its last finished "
                        "epoch; add --resume to the same command to go on from it"], messages

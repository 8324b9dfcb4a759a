"""`gnnmesh train --nproc N`: real local ranks started by the elastic launcher."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.forked import run_cli

SBM = "sbm:nodes=400,classes=3,features=12"


def gnnmesh(*args, timeout=180, env=None):
    """The launcher forked from the tests' preloaded server (its ranks are new interpreters)."""
    return run_cli(*args, env=env, timeout=timeout)


def losses(path):
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_nproc_run_equals_single_process(tmp_path):
    common = ["train", "--dataset", SBM, "--epochs", "10", "--quiet"]
    single = gnnmesh(*common, "--metrics", str(tmp_path / "single.jsonl"))
    assert single.returncode == 0, single.stderr
    dist = gnnmesh(*common, "--nproc", "2", "--strategy", "partition", "--partitioner", "rp",
                   "--metrics", str(tmp_path / "dist.jsonl"))
    assert dist.returncode == 0, dist.stderr
    a, b = losses(tmp_path / "dist.jsonl"), losses(tmp_path / "single.jsonl")
    assert len(a) == 10 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b))
    record = json.loads((tmp_path / "dist.jsonl").read_text().splitlines()[-1])
    assert record["halo_bytes"] > 0 and record["comm_time_max"] >= record["comm_time_min"] >= 0
    assert dist.stdout.count("done:") == 1  # only rank 0 prints


RANK_0_LATE = """
    import os, time
    if os.environ.get("RANK") == "0":  # rank 0 still starting when rank 1 stops on the bad input
        time.sleep(90)
"""


@pytest.mark.timeout(120)
def test_bad_input_in_ranks_gives_one_line_and_status_2(tmp_path):
    """One line whichever rank stops first. The agent stops the other ranks when one exits, so
    a rank 0 still starting never printed its line: status 2 and nothing on stderr. The job
    leaves nothing in the temporary folder (torch's agent would leave its ranks' error files)."""
    hook, scratch = tmp_path / "hook", tmp_path / "tmp"
    hook.mkdir()
    scratch.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(RANK_0_LATE))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
               TMPDIR=str(scratch))
    made = gnnmesh("partition", "--dataset", "sbm:nodes=100,classes=2,features=4", "--parts", "2",
                   "--method", "contiguous", "--write-parts", str(tmp_path / "p"))
    assert made.returncode == 0, made.stderr
    # the strategy comes from the parts, so each rank finds the flag misplaced once it opens them
    result = gnnmesh("train", "--parts", str(tmp_path / "p"), "--nproc", "2", "--epochs", "1", "--chunk-size", "8",
                     env=env)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "'chunk_size' (--chunk-size) applies only to --strategy tensor" in lines[0], \
        result.stderr
    assert not list(scratch.iterdir())


def test_the_launcher_prints_the_bad_input_line_of_the_lowest_rank(tmp_path, monkeypatch, capsys):
    from gnnmesh import launch
    monkeypatch.setenv(launch.BAD_INPUT_ENV, str(tmp_path))
    monkeypatch.setenv(launch.LAUNCHER_ENV, "1")
    monkeypatch.setenv("WORLD_SIZE", "12")
    assert launch._say_bad_input() is False and capsys.readouterr().err == ""
    for rank in (10, 2, 7):  # in the order they stopped; rank 10 before rank 2 by name
        monkeypatch.setenv("RANK", str(rank))
        assert launch.leave_bad_input(f"gnnmesh: error: as rank {rank} read it")
    assert launch._say_bad_input() is True
    assert capsys.readouterr().err == "gnnmesh: error: as rank 2 read it\n"
    monkeypatch.delenv(launch.LAUNCHER_ENV)  # a rank torchrun started: it prints, or not, itself
    assert not launch.leave_bad_input("gnnmesh: error: not left")


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_more_ranks_than_nodes_is_refused():
    result = gnnmesh("train", "--dataset", "sbm:nodes=3,classes=1,features=2,avg_degree=1", "--nproc", "4",
                     "--strategy", "partition", "--partitioner", "rp")
    assert result.returncode == 2
    assert "4 ranks for a graph of 3 nodes" in result.stderr


def test_the_killed_rank_is_named_over_a_peer_that_failed_on_its_loss(monkeypatch, capsys):
    """A peer that sees the killed rank's connection close may exit first, with an earlier
    failure time than the agent gives the killed rank: the job names the killed one."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from gnnmesh import launch

    peer = ProcessFailure(local_rank=0, pid=11, exitcode=1, error_file="")
    killed = ProcessFailure(local_rank=1, pid=12, exitcode=-signal.SIGKILL, error_file="")
    peer.timestamp, killed.timestamp = 100, 101

    def fail(*args):
        raise ChildFailedError("gnnmesh", {0: peer, 1: killed})

    monkeypatch.setattr(launch, "_run_ranks", fail)
    monkeypatch.setattr(launch, "_say_bad_input", lambda: False)
    assert launch._run_job(["train"], 2, 0, 2, "") == 1
    assert "rank 1 failed (exit code -9)" in capsys.readouterr().err


@pytest.mark.slow  # fault injection on two ranks, with the fault tests
@pytest.mark.timeout(180)
def test_a_killed_rank_stops_the_job_and_is_named():
    proc = subprocess.Popen([sys.executable, "-m", "gnnmesh", "train", "--dataset", SBM, "--epochs", "100000",
                             "--log-every", "1", "--nproc", "3", "--strategy", "partition", "--partitioner", "rp"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # wait until training runs
            if line.startswith("epoch"):
                break
        victim = next(p for p in psutil.Process(proc.pid).children(recursive=True)
                      if p.environ().get("RANK") == "1" and "gnnmesh" in " ".join(p.cmdline()))
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=90)
        assert time.monotonic() - killed_at < 60
        assert proc.returncode not in (0, 2)
        assert "rank 1 failed" in err
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_partition_file_of_another_graph_is_refused(tmp_path):
    made = gnnmesh("partition", "--dataset", "sbm:nodes=50,classes=2,features=4", "--parts", "2",
                   "--method", "rp", "--cache-dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    stored = next(tmp_path.glob("partitions/*.npy"))
    result = gnnmesh("train", "--dataset", SBM, "--nproc", "2", "--strategy", "partition",
                     "--partition-file", str(stored))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and stored.name in lines[0], result.stderr


ENDING = """
import atexit, ctypes, sys, threading, time
from gnnmesh.launch import end_program

class Teardown:
    def __del__(self, open=open, path=sys.argv[1] + "/teardown"):  # freed by the teardown alone
        open(path, "w").close()

def later():
    time.sleep(0.3)
    open(sys.argv[1] + "/thread", "w").close()

kept = Teardown()
atexit.register(lambda: open(sys.argv[1] + "/atexit", "w").close())
if sys.argv[3] == "thread":
    threading.Thread(target=later).start()
sys.stdout.write("buffered, no newline")
sys.stderr.write("stderr too")
ctypes.CDLL(None).printf(b" and C's stdio")
end_program(eval(sys.argv[2]))
"""


def _end(tmp_path, status: str, thread: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "ending.py"
    script.write_text(ENDING)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script), str(tmp_path), status, thread or "-"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="C's printf through ctypes")
@pytest.mark.parametrize("status, code", [("3", 3), ("0", 0), ("None", 0)])
def test_a_finished_program_ends_without_the_teardown_and_loses_nothing(tmp_path, status, code):
    """Its status, its buffered output (Python's and C's) and its atexit handlers kept; the
    teardown that frees every object skipped."""
    done = _end(tmp_path, status)
    assert done.returncode == code, done.stderr
    assert done.stdout.startswith("buffered, no newline") and " and C's stdio" in done.stdout
    assert done.stderr == "stderr too"
    assert (tmp_path / "atexit").exists() and not (tmp_path / "teardown").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="C's printf through ctypes")
@pytest.mark.parametrize("status, thread, code", [("0", "thread", 0), ("'a message'", "", 1)])
def test_a_program_ends_the_usual_way_when_ending_early_could_lose_something(tmp_path, status, thread, code):
    """A thread still working is waited for; a status that is a message is printed."""
    done = _end(tmp_path, status, thread)
    assert done.returncode == code, done.stderr
    assert done.stdout.startswith("buffered, no newline")
    assert (tmp_path / "atexit").exists() and (tmp_path / "teardown").exists()
    assert (tmp_path / "thread").exists() == bool(thread)
    assert ("a message" in done.stderr) == (code == 1)

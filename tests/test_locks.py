"""Outputs a run owns are locked (``gnnmesh.locks``): two real processes given the same metrics
file, checkpoint, store directory, parts directory or prediction directory. Before, both ran and exited 0, and one
run's output was lost (the metrics file: one run appended to a file the other had replaced).
The second is refused in one line naming the output and the first process; the first goes
on and its output is intact; once it ends (normally or killed outright) a new run takes it.
Every subprocess has a timeout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from gnnmesh import locks
from gnnmesh.atomic import is_temporary, sweep_stale
from gnnmesh.errors import ConfigError

from tests.forked import run_cli

SBM = "sbm:nodes=300,classes=3,features=8"
LONG = ["train", "--dataset", SBM, "--epochs", "100000", "--quiet"]
SHORT = ["train", "--dataset", SBM, "--epochs", "2", "--quiet"]


def gnnmesh(*args, timeout=120):
    return run_cli(*args, timeout=timeout)


def start(*args, code=None) -> subprocess.Popen:
    """``gnnmesh args`` (or python running ``code`` with ``args``) in the background."""
    command = ["-c", textwrap.dedent(code)] if code else ["-m", "gnnmesh"]
    return subprocess.Popen([sys.executable, *command, *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))  # leave a core to the second


def wait_for(path, proc, timeout=120) -> None:
    """Until ``path`` exists and is not empty, while ``proc`` runs."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_size):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def refused(result, output, pid) -> None:
    """One line, status 2, naming ``output`` and the process ``pid`` that holds it."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gnnmesh: error:"), result.stderr
    assert str(output) in lines[0] and f"pid {pid} on host " in lines[0], lines[0]


def stop(proc, sig=signal.SIGTERM) -> int:
    proc.send_signal(sig)
    try:
        status = proc.wait(60)
    finally:
        proc.stderr.close()
    return status


def epochs(path) -> list:
    return [json.loads(line)["epoch"] for line in path.read_text().splitlines()]


def lock_file(output):
    return output.parent / f".{output.name}.lock"


@pytest.mark.slow  # two training runs
def test_a_second_run_is_refused_the_metrics_file(tmp_path, stopped):
    metrics = tmp_path / "m.jsonl"
    first = start(*LONG, "--metrics", metrics)
    stopped.append(first)
    wait_for(metrics, first)
    second = gnnmesh(*SHORT, "--metrics", metrics)
    refused(second, metrics, first.pid)
    written = len(epochs(metrics))
    assert first.poll() is None  # the first goes on
    assert stop(first) == 128 + signal.SIGTERM  # the one clean stop a signal makes
    got = epochs(metrics)  # every line the first wrote, each one strict JSON, and no other run's
    assert got == list(range(1, len(got) + 1)) and len(got) >= written
    assert not lock_file(metrics).exists()  # removed when the run ended
    from gnnmesh.train.metrics import MetricsFile
    taken = MetricsFile(metrics, len(got))  # a new run takes it, keeping every line
    taken.close()
    assert epochs(metrics) == got and not lock_file(metrics).exists()


def test_a_lock_dies_with_its_process(tmp_path, stopped):
    """A process killed outright leaves its lock file, which is re-lockable at once; while it
    runs, sweeping temporaries leaves the lock file alone."""
    output = tmp_path / "m.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from gnnmesh import locks; "
                               "locks.hold(sys.argv[1], 'metrics file'); print('held', flush=True); time.sleep(600)",
                               str(output)], stdout=subprocess.PIPE, text=True)
    stopped.append(holder)
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(ConfigError) as refusal:
        locks.hold(output, "metrics file")
    assert str(output) in str(refusal.value) and f"pid {holder.pid} on host " in str(refusal.value)
    assert not is_temporary(lock_file(output).name)
    sweep_stale(tmp_path)
    assert lock_file(output).exists()
    holder.kill()
    holder.wait(10)
    holder.stdout.close()
    assert lock_file(output).exists()  # left behind, stale
    with locks.hold(output, "metrics file"):
        assert json.loads(lock_file(output).read_text())["pid"] == os.getpid()
        with locks.hold(output, "metrics file"):  # this process may take it again
            pass
        assert lock_file(output).exists()
    assert not lock_file(output).exists()


def test_a_killed_holders_record_is_not_taken_for_the_new_holders(tmp_path, stopped):
    """Between locking a stale lock file and writing its own record, a new holder leaves the
    killed one's record in place: a refusal in that moment waits for the new record instead
    of naming a dead process (a peer rank was refused its own run's store that way)."""
    output = tmp_path / "store"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    lock_file(output).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "run": "old"}) + "\n")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import fcntl, json, os, socket, sys, time
        fd = os.open(sys.argv[1], os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print('locked', flush=True)
        time.sleep(0.3)  # the record written late
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps({"pid": os.getpid(), "host": socket.gethostname()}) + "\\n").encode(), 0)
        time.sleep(600)
        """), str(lock_file(output))], stdout=subprocess.PIPE, text=True)
    stopped.append(holder)
    assert holder.stdout.readline() == "locked\n"
    with pytest.raises(ConfigError) as refusal:
        locks.hold(output, "host store directory")
    holder.stdout.close()
    assert f"pid {holder.pid} on host " in str(refusal.value), str(refusal.value)


@pytest.mark.slow  # three training runs
def test_a_second_run_is_refused_the_checkpoint(tmp_path, stopped):
    checkpoint, mine = tmp_path / "run.pt", tmp_path / "first.jsonl"
    first = start(*LONG, "--checkpoint", checkpoint, "--checkpoint-every", "1", "--metrics", mine)
    stopped.append(first)
    wait_for(mine, first)
    other = tmp_path / "second.jsonl"
    refused(gnnmesh(*SHORT, "--checkpoint", checkpoint, "--metrics", other), checkpoint, first.pid)
    assert not other.exists()  # refused before its outputs were touched
    assert stop(first) == 128 + signal.SIGTERM
    from gnnmesh import checkpoint as checkpoints
    assert checkpoints.load(checkpoint)["epoch"] >= 1  # intact
    assert not lock_file(checkpoint).exists()
    resumed = gnnmesh("train", "--dataset", SBM, "--quiet", "--checkpoint", checkpoint, "--resume",
                      "--epochs", str(len(epochs(mine)) + 1))
    assert resumed.returncode == 0, resumed.stderr
    assert not lock_file(checkpoint).exists()


@pytest.mark.slow  # three training runs
def test_a_second_run_is_refused_the_store_directory(tmp_path, stopped):
    store = tmp_path / "store"
    offload = ["--strategy", "offload", "--host-store", "file", "--store-dir", store]
    mine = tmp_path / "first.jsonl"
    first = start(*LONG, *offload, "--metrics", mine)
    stopped.append(first)
    wait_for(mine, first)
    refused(gnnmesh(*SHORT, *offload, "--metrics", tmp_path / "second.jsonl"), store / "rank0", first.pid)
    assert stop(first) == 128 + signal.SIGTERM
    got = epochs(mine)
    assert got == list(range(1, len(got) + 1))
    assert not lock_file(store / "rank0").exists()
    again = gnnmesh(*SHORT, *offload, "--metrics", tmp_path / "third.jsonl")
    assert again.returncode == 0, again.stderr
    assert not lock_file(store / "rank0").exists()


SLOW_WRITER = """
import sys, time
from pathlib import Path
import gnnmesh.parallel.partition.parts as writer
from gnnmesh.cli import main

ready, go = Path(sys.argv[1]), Path(sys.argv[2])
save = writer.save_array

def slow_save(*args, **kwargs):  # the first array written, then wait: a long write, stopped midway
    if not ready.exists():
        ready.write_text("writing")
        while not go.exists():
            time.sleep(0.02)
    return save(*args, **kwargs)

writer.save_array = slow_save
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow  # three partition commands
def test_a_second_run_is_refused_the_parts_directory(tmp_path, stopped):
    parts, ready, go = tmp_path / "parts", tmp_path / "ready", tmp_path / "go"
    command = ["partition", "--dataset", SBM, "--nparts", "2", "--partitioner", "rp", "--write-parts", parts]
    first = start(ready, go, *command, code=SLOW_WRITER)
    stopped.append(first)
    wait_for(ready, first)
    refused(gnnmesh(*command), parts, first.pid)
    go.write_text("")
    assert first.wait(120) == 0, first.stderr.read()
    first.stderr.close()
    from gnnmesh.parts import open_parts
    assert open_parts(parts).parts == 2  # the first's parts, whole
    assert not lock_file(parts).exists()
    again = gnnmesh(*command)
    assert again.returncode == 0, again.stderr
    assert open_parts(parts).parts == 2 and not lock_file(parts).exists()


SLOW_PREDICTION = """
import sys, time
from pathlib import Path
import gnnmesh.predict.store as store
from gnnmesh.cli import main

ready, go = Path(sys.argv[1]), Path(sys.argv[2])
write = store._write_part

def slow_write(*args, **kwargs):  # the shard about to be written: wait, a long prediction stopped midway
    ready.write_text("writing")
    while not go.exists():
        time.sleep(0.02)
    return write(*args, **kwargs)

store._write_part = slow_write
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow  # a training run and three predictions
def test_a_second_run_is_refused_the_prediction_directory(tmp_path, stopped):
    """Two predictions into one --out both succeeded, and one was lost."""
    checkpoint, out, ready, go = tmp_path / "c.pt", tmp_path / "preds", tmp_path / "ready", tmp_path / "go"
    assert gnnmesh(*SHORT, "--checkpoint", checkpoint).returncode == 0
    command = ["predict", "--checkpoint", checkpoint, "--out", out, "--quiet"]
    first = start(ready, go, *command, "--output", "labels", code=SLOW_PREDICTION)
    stopped.append(first)
    wait_for(ready, first)
    refused(gnnmesh(*command), out, first.pid)
    go.write_text("")
    assert first.wait(120) == 0, first.stderr.read()
    first.stderr.close()
    from gnnmesh.predict import read
    assert read(out).manifest["output"] == "labels" and not lock_file(out).exists()  # the first's, whole
    again = gnnmesh(*command)
    assert again.returncode == 0, again.stderr
    assert read(out).manifest["output"] == "logits" and not lock_file(out).exists()


@pytest.mark.slow  # a two-rank run and two more
def test_rank_0_holds_a_multi_rank_runs_outputs_until_killed(tmp_path, stopped):
    """Rank 0 holds the metrics file; the ranks share --minibatch's store directory among
    themselves, not with another run. After SIGKILL to the launcher a new run takes both."""
    metrics, store = tmp_path / "m.jsonl", tmp_path / "store"
    mini = ["--minibatch", "--strategy", "gdp", "--fanouts", "5,5", "--host-store", "file", "--store-dir", store]
    first = start(*LONG, "--nproc", "2", *mini, "--metrics", metrics)
    stopped.append(first)
    wait_for(metrics, first)
    ranks = [p for p in psutil.Process(first.pid).children(recursive=True) if "gnnmesh" in " ".join(p.cmdline())]
    assert len(ranks) == 2
    holder = json.loads(lock_file(metrics).read_text())["pid"]
    assert holder == ranks[0].pid or holder == ranks[1].pid
    refused(gnnmesh(*SHORT, "--metrics", metrics), metrics, holder)
    refused(gnnmesh(*SHORT, "--nproc", "2", *mini, "--metrics", tmp_path / "other.jsonl"), store,
            json.loads(lock_file(store).read_text())["pid"])  # the rank that locked it for the run
    assert stop(first, signal.SIGKILL) == -signal.SIGKILL
    psutil.wait_procs(ranks, timeout=30)
    assert lock_file(metrics).exists()  # stale: its process is gone
    again = gnnmesh(*SHORT, "--nproc", "2", *mini, "--metrics", metrics)
    assert again.returncode == 0, again.stderr
    assert epochs(metrics) == [1, 2]
    assert not lock_file(metrics).exists() and not lock_file(store).exists()

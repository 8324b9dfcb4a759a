"""A job that survives losing a rank: ``--nproc P --max-restarts R`` (and torchrun's
``--max-restarts``) restart the job on the ranks that remain, which resume from the job's
last checkpoint and end with a single process's losses and parameters.

A rank process is killed with SIGKILL once the metrics file reaches a random epoch
(``GNNMESH_FAULT_SEED`` picks it and the rank, default 0, so that CI repeats itself). Every
process has a timeout, and every process of a job is gone when its test ends."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

from gnnmesh.config import Config
from tests.forked import run_cli
from tests.helpers import gnnmesh_in_process, one_error_line

DATA = "sbm:nodes=2000,classes=3,features=32"
EPOCHS, EVERY = 40, 5
RUN = ["train", "--dataset", DATA, "--hidden", "64", "--threads", "1", "--epochs", str(EPOCHS), "--quiet"]
PARTITION = ["--strategy", "partition", "--partitioner", "rp"]
SEED = int(os.environ.get("GNNMESH_FAULT_SEED", "0"))


def job_files(folder, name: str) -> list:
    return ["--checkpoint", str(folder / f"{name}.pt"), "--metrics", str(folder / f"{name}.jsonl")]


def records(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def epochs_written(path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.endswith("}") and '"restart"' not in line)
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The uninterrupted run on one process: its epoch records and final weights."""
    folder = tmp_path_factory.mktemp("single")
    done = run_cli(*RUN, *job_files(folder, "single"), timeout=240)
    assert done.returncode == 0, done.stderr
    return records(folder / "single.jsonl"), torch.load(folder / "single.pt", weights_only=True)["model"]


def descendants(pid: int) -> dict:
    try:
        return {p.pid: p for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return {}


def is_rank(process, rank: int) -> bool:
    try:
        return process.environ().get("RANK") == str(rank) and "gnnmesh" in " ".join(process.cmdline())
    except psutil.Error:  # ended meanwhile
        return False


def kill_a_rank(command: list, metrics, rank: int, after_epoch: int) -> tuple:
    """Run ``command``; SIGKILL its rank ``rank`` once ``metrics`` holds ``after_epoch``
    epochs; return (the finished process's status, its stderr, the epochs written before the
    kill). No process of the job outlives this call."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    family = {}
    try:
        deadline = time.monotonic() + 180
        while epochs_written(metrics) < after_epoch and proc.poll() is None and time.monotonic() < deadline:
            family.update(descendants(proc.pid))
            time.sleep(0.01)
        assert proc.poll() is None, f"the job ended before the kill: {proc.communicate()[1][-3000:]}"
        killed_at = epochs_written(metrics)
        victim = next(p for p in descendants(proc.pid).values() if is_rank(p, rank))
        victim.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
        return proc.returncode, err, killed_at
    finally:
        if proc.poll() is None:
            family.update(descendants(proc.pid))
            proc.kill()
            proc.wait(10)
        _, alive = psutil.wait_procs(list(family.values()), timeout=30)
        for p in alive:
            p.kill()
        assert alive == [], f"processes of the job left running: {alive}"


def check_the_job(folder, err: str, killed_at: int, ranks_after: int, single) -> dict:
    """The killed job against the single process: one restart line and record, at most
    EVERY epochs lost, every epoch's loss and the final weights equal to 1e-5."""
    reference, weights = single
    lines = [line for line in err.splitlines() if line.startswith("gnnmesh: restart")]
    assert len(lines) == 1, err
    written = records(folder / "job.jsonl")
    restarts = [r for r in written if "restart" in r]
    assert len(restarts) == 1, written
    restart = restarts[0]
    assert restart["restart"] == 1 and restart["ranks"] == ranks_after, restart
    assert restart["epoch"] % EVERY == 0 and restart["epoch"] >= killed_at - EVERY, (restart, killed_at)
    assert restart["checkpoint"] == str(folder / "job.pt") or restart["epoch"] == 0
    assert f"{ranks_after} ranks" in lines[0] and (f"from epoch {restart['epoch']}" in lines[0]
                                                   or restart["epoch"] == 0), lines[0]
    epochs = [r for r in written if "restart" not in r]
    assert [r["epoch"] for r in epochs] == list(range(1, EPOCHS + 1))
    for mine, theirs in zip(epochs, reference):
        assert abs(mine["loss"] - theirs["loss"]) <= 1e-5, (mine["epoch"], mine["loss"], theirs["loss"])
    final = torch.load(folder / "job.pt", weights_only=True)
    assert final["epoch"] == EPOCHS
    for name, value in weights.items():
        assert torch.allclose(final["model"][name], value, rtol=0, atol=1e-5), name
    return restart


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_job_that_loses_a_rank_finishes_on_the_ranks_that_remain(tmp_path, single):
    """Three ranks of a partition run, one killed at a random epoch: the job restarts on
    two, resumes from the last checkpoint by itself, and ends as the single process does."""
    rng = random.Random(SEED)
    rank, after = rng.randrange(3), rng.randint(EVERY + 1, EPOCHS - EVERY)
    command = [sys.executable, "-m", "gnnmesh", *RUN, *PARTITION, *job_files(tmp_path, "job"), "--nproc", "3",
               "--checkpoint-every", str(EVERY), "--max-restarts", "1"]
    status, err, killed_at = kill_a_rank(command, tmp_path / "job.jsonl", rank, after)
    assert status == 0, err
    restart = check_the_job(tmp_path, err, killed_at, 2, single)
    assert restart["failed"] == f"rank {rank} died of SIGKILL"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_a_torchrun_restart_resumes_from_the_jobs_checkpoint(tmp_path, single):
    """Under ``torchrun --max-restarts``, torch's agent restarts every rank; they see its
    restart count and resume from the checkpoint of their job (the same run id)."""
    rng = random.Random(SEED + 1)
    rank, after = rng.randrange(2), rng.randint(EVERY + 1, EPOCHS - EVERY)
    command = ["torchrun", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "-m", "gnnmesh", *RUN,
               *PARTITION, *job_files(tmp_path, "job"), "--checkpoint-every", str(EVERY)]
    status, err, killed_at = kill_a_rank(command, tmp_path / "job.jsonl", rank, after)
    assert status == 0, err[-3000:]
    restart = check_the_job(tmp_path, err, killed_at, 2, single)
    assert restart["failed"] is None  # torchrun does not say which rank failed
    assert "Traceback" not in err  # the rank that lost its peer leaves the report to the restart


@pytest.mark.parametrize("flags, fragment", [
    (["--nproc", "2", "--max-restarts", "1"], "'max_restarts' needs 'checkpoint_every'"),
    (["--max-restarts", "1", "--checkpoint-every", "1"], "'max_restarts' needs 'nproc' of 2 or more"),
    (["--nproc", "2", "--min-nproc", "1"], "'min_nproc' needs 'max_restarts'"),
    (["--nproc", "2", "--max-restarts", "1", "--checkpoint-every", "1", "--min-nproc", "3"],
     "'min_nproc': 3 is more than 'nproc' (2)"),
    (["--nproc", "4", "--max-restarts", "1", "--checkpoint-every", "1", "--strategy", "grid3d", "--grid", "1,2,2"],
     "a restart on 1 ranks would fail"),
])
def test_restarts_that_cannot_work_are_refused_before_training(tmp_path, flags, fragment):
    args = ["train", "--dataset", "sbm:nodes=60,classes=3,features=4", "--checkpoint", tmp_path / "c.pt", *flags]
    if "--strategy" not in flags:
        args += ["--strategy", "partition"]
    result = gnnmesh_in_process(*args)
    one_error_line(result, fragment)


def test_max_restarts_under_torchrun_is_refused_not_ignored(tmp_path):
    """Under torchrun the agent restarts the ranks, and only if torchrun is told to."""
    args = ["train", "--dataset", "sbm:nodes=60,classes=3,features=4", "--strategy", "partition", "--checkpoint",
            tmp_path / "c.pt", "--checkpoint-every", "1", "--max-restarts", "1"]
    result = gnnmesh_in_process(*args, env={"RANK": "0", "WORLD_SIZE": "2"})
    # (torch's error recorder, which a rank runs under, warns first when stderr is not a file)
    assert result.returncode == 2 and result.stderr.splitlines()[-1].startswith("gnnmesh: error:"), result.stderr
    assert "give --max-restarts to torchrun" in result.stderr


def test_a_job_on_parts_restarts_on_as_many_ranks(tmp_path):
    """Parts are written for one rank count: a restart on fewer could not open them."""
    args = ["train", "--parts", tmp_path / "parts", "--checkpoint", tmp_path / "c.pt", "--checkpoint-every", "1",
            "--nproc", "2", "--max-restarts", "1"]
    one_error_line(gnnmesh_in_process(*args), "parts are written for 2 ranks", "give --min-nproc 2")
    Config.of(parts=str(tmp_path / "parts"), checkpoint=str(tmp_path / "c.pt"), checkpoint_every=1, nproc=2,
              max_restarts=1, min_nproc=2)  # restarted on 2 ranks: accepted


"""Fault injection: runs killed (SIGKILL, SIGTERM, SIGINT) at random instants, then resumed.

Each trial starts a run with a fresh cache (so a kill can land in the cache fill, loading,
partitioning, training, a checkpoint or a metrics write), kills it, sometimes kills the
resumed run as well, then resumes it to the end. After every kill: no process of the run
is left, and every metrics line up to the checkpoint is there and parses. At the end: no
temporary file anywhere, metrics for every epoch, and losses and parameters identical to
an uninterrupted run.

The few trials CI runs each kill twice: first at a random time (mostly startup), then the
resumed run at a random epoch (training, checkpoint and metrics writes), so that every trial
reaches both phases whatever the draws. Trials asked for with ``GNNMESH_FAULT_TRIALS`` draw
how many kills (one or two) and when.

Trials per process count: ``GNNMESH_FAULT_TRIALS`` (default: a few, to fit CI's time);
``GNNMESH_FAULT_SEED`` picks the random instants (default 0, so CI repeats itself);
``GNNMESH_FAULT_REPORT`` names a file to which each test appends a JSON summary of its kills.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import psutil
import pytest
import torch

from gnnmesh.atomic import is_temporary
from tests.forked import run_cli

pytestmark = pytest.mark.slow

DATA = "sbm:nodes=2000,classes=3,features=32"
EPOCHS = 100
DEFAULT_TRIALS = {1: 2, 2: 1}
TRIALS = int(os.environ.get("GNNMESH_FAULT_TRIALS", "0"))
SEED = int(os.environ.get("GNNMESH_FAULT_SEED", "0"))
# Half the kills come at an instant drawn from [EARLIEST, WINDOW) seconds after the start,
# where startup (cache fill, loading, partitioning) takes most of the time; the other half
# once the metrics file reaches a random epoch, plus up to a few milliseconds, which lands
# in training, checkpoint and metrics writes. Before EARLIEST the interpreter may not have
# reached gnnmesh (~0.05 s), and signals have their default effect.
EARLIEST = 0.3
WINDOW = {1: 5.0, 2: 10.0}
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)


def command(nproc: int, folder, resume: bool) -> list:
    args = [sys.executable, "-m", "gnnmesh", "train", "--dataset", DATA, "--epochs", str(EPOCHS),
            "--hidden", "64", "--threads", "1", "--checkpoint", str(folder / "c.pt"),
            "--checkpoint-every", "1", "--metrics", str(folder / "m.jsonl"), "--quiet"]
    if nproc > 1:
        args += ["--nproc", str(nproc), "--strategy", "partition", "--partitioner", "rp"]
    return args + (["--resume"] if resume else [])


def run(nproc: int, folder, resume: bool = False) -> subprocess.CompletedProcess:
    """A run to its end, forked from the tests' preloaded server (the runs killed at random
    instants are new interpreters, whose start-up a kill may hit)."""
    env = dict(os.environ, GNNMESH_CACHE=str(folder / "cache"))
    return run_cli(*command(nproc, folder, resume)[3:], env=env, timeout=180)


def outcome(folder) -> tuple:
    losses = [json.loads(line)["loss"] for line in (folder / "m.jsonl").read_text().splitlines()]
    state = torch.load(folder / "c.pt", weights_only=False)
    return losses, state["model"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    results = {}
    for nproc in DEFAULT_TRIALS:
        folder = tmp_path_factory.mktemp(f"reference{nproc}")
        done = run(nproc, folder)
        assert done.returncode == 0, done.stderr
        results[nproc] = outcome(folder)
    return results


def kill_at_random(nproc: int, folder, resume: bool, rng: random.Random, mode=None) -> tuple:
    """Start a run, kill it at a random instant; return what happened (for messages) and
    the signal's name with the phase it hit. ``mode``: "time" (a random time after the start)
    or "epoch" (once the metrics reach a random epoch, if one is left); None draws one."""
    env = dict(os.environ, GNNMESH_CACHE=str(folder / "cache"))
    proc = subprocess.Popen(command(nproc, folder, resume), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    sig, first = rng.choice(SIGNALS), checkpoint_epoch(folder) + 1
    by_time = rng.random() < 0.5 if mode is None else mode == "time"
    if by_time or first >= EPOCHS:
        delay = rng.uniform(EARLIEST, WINDOW[nproc])
        when, reached = f"at {delay:.2f}s", lambda: time.monotonic() - start >= delay
    else:
        epoch = rng.randint(first, EPOCHS - 1)
        when, reached = f"in epoch {epoch + 1}", lambda: epochs_written(folder) >= epoch
    family = {}
    start = time.monotonic()
    try:
        for polls in range(10**6):
            if reached() or proc.poll() is not None or time.monotonic() - start > 120:
                break
            if polls % 20 == 0:
                family.update(descendants(proc.pid))
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.005))
        family.update(descendants(proc.pid))
        finished = proc.poll() is not None
        if not finished:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    what = f"{signal.Signals(sig).name} {when}{' (resumed run)' if resume else ''}"
    if finished:
        assert proc.returncode == 0, f"{what}: finished with {proc.returncode}: {err}"
        return what + ": had finished", (None, "finished")
    # 0: it finished between the last poll and the signal (Popen then sends nothing)
    allowed = {-signal.SIGKILL if sig == signal.SIGKILL else 128 + sig, 0}
    assert proc.returncode in allowed, f"{what}: exit status {proc.returncode}: {err}"
    if sig != signal.SIGKILL:
        assert err.strip() in ("", "gnnmesh: interrupted"), f"{what}: {err}"
    _, alive = psutil.wait_procs(list(family.values()), timeout=15)
    assert alive == [], f"{what}: processes left running: {alive}"
    return what, (signal.Signals(sig).name, check_metrics_up_to_checkpoint(folder, what))


def descendants(pid: int) -> dict:
    """Every process of the run, to check afterwards that none is left."""
    try:
        return {p.pid: p for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return {}


def checkpoint_epoch(folder) -> int:
    path = folder / "c.pt"
    return torch.load(path, weights_only=False)["epoch"] if path.exists() else 0


def epochs_written(folder) -> int:
    try:
        return (folder / "m.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def check_metrics_up_to_checkpoint(folder, what: str) -> str:
    """Check the metrics against the checkpoint; return the phase the kill hit."""
    checkpoint, metrics = folder / "c.pt", folder / "m.jsonl"
    if not checkpoint.exists():
        return "startup"  # interpreter, cache fill, loading, partitioning, first epoch
    epoch = torch.load(checkpoint, weights_only=False)["epoch"]
    lines = metrics.read_text().split("\n")
    complete = lines[:-1]  # the last is empty, or an append cut short by the kill
    epochs = [json.loads(line)["epoch"] for line in complete]
    assert epochs[:epoch] == list(range(1, epoch + 1)), f"{what}: metrics {epochs}, checkpoint at {epoch}"
    return "training" if epoch < EPOCHS else "finishing"


@pytest.mark.timeout(300 + 60 * (TRIALS or max(DEFAULT_TRIALS.values())))  # a 2-rank trial takes ~30 s
@pytest.mark.slow
@pytest.mark.parametrize("nproc", sorted(DEFAULT_TRIALS))
def test_kills_at_random_instants_then_resume(tmp_path, reference, nproc):
    rng = random.Random(SEED * 10 + nproc)
    trials = TRIALS or DEFAULT_TRIALS[nproc]
    tally = Counter()
    for trial in range(trials):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        history = []
        # the second kill hits the resumed run
        modes = [None] * rng.choice((1, 2)) if TRIALS else ["time", "epoch"]
        for kill, mode in enumerate(modes):
            what, (sig, phase) = kill_at_random(nproc, folder, (folder / "c.pt").exists(), rng, mode)
            history.append(what)
            tally[sig or "none"] += 1
            tally[phase + (" (resumed run)" if kill else "")] += 1
        done = run(nproc, folder, resume=(folder / "c.pt").exists())
        context = f"trial {trial} ({'; '.join(history)})"
        assert done.returncode == 0, f"{context}: {done.stderr}"
        losses, params = outcome(folder)
        want_losses, want_params = reference[nproc]
        assert losses == want_losses, context
        assert all(torch.equal(params[k], want_params[k]) for k in want_params), context
        left = [p for p in folder.rglob("*") if is_temporary(p.name)]
        assert left == [], f"{context}: temporaries left: {left}"
    report(nproc, trials, tally)


def report(nproc: int, trials: int, tally: Counter) -> None:
    summary = {"nproc": nproc, "trials": trials, "seed": SEED, **dict(sorted(tally.items()))}
    print(json.dumps(summary))
    if os.environ.get("GNNMESH_FAULT_REPORT"):
        with open(os.environ["GNNMESH_FAULT_REPORT"], "a") as fh:
            fh.write(json.dumps(summary) + "\n")

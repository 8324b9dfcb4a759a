"""The slow tier: host RAM and file tables agree with a numpy reference, count their bytes
exactly, refuse an unwritable directory up front, clean up, and keep memory bounded."""

import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from gnnmesh import host_store
from gnnmesh.atomic import is_temporary, temporary_prefix
from gnnmesh.comm import Comm
from gnnmesh.errors import ConfigError
from gnnmesh.host_store import HostStore

REPO = Path(__file__).resolve().parents[1]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))]
# (rows, width): width 1, widths that divide nothing, a row wider than the 256-byte window
SHAPES = {"one": (700, 1), "seven": (413, 7), "odd": (129, 33), "wide": (40, 100), "empty": (0, 5)}


def store(kind, tmp_path, device="cpu", **kw):
    kw.setdefault("window_bytes", 256)  # many windows per table, so spans get cut
    kw.setdefault("gap_bytes", 64)
    return HostStore(kind, device, str(tmp_path / "tier") if kind == "file" else None, **kw)


def random_rows(rng, n):
    """Row sets of every shape a caller may pass, with their positions as an array."""
    choice = rng.integers(7) if n else 6
    if choice == 0:  # scattered, some close enough to share a read
        rows = np.sort(rng.choice(n, size=rng.integers(1, n + 1), replace=False))
        return torch.from_numpy(rows), rows
    if choice == 1:  # clustered: runs with small and large gaps
        rows = np.unique(np.concatenate([np.arange(s, min(n, s + rng.integers(1, 30)))
                                         for s in rng.integers(0, n, size=4)]))
        return rows, rows
    if choice in (2, 3):  # a contiguous span
        lo = int(rng.integers(n))
        hi = int(rng.integers(lo, n + 1))
        return (range(lo, hi) if choice == 2 else slice(lo, hi)), np.arange(lo, hi)
    if choice == 4:  # every row, given as positions
        return torch.arange(n), np.arange(n)
    if choice == 5:  # a strided range
        step = int(rng.integers(2, 5))
        return range(1, n, step), np.arange(1, n, step)
    return torch.empty(0, dtype=torch.long), np.arange(0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["ram", "file"])
def test_agrees_with_numpy(kind, device, tmp_path):
    rng = np.random.default_rng(7)
    ref = {}
    with store(kind, tmp_path, device) as hs:
        for name, (n, w) in SHAPES.items():
            hs.create(name, n, w)
            ref[name] = np.zeros((n, w), np.float32)
        for _ in range(400):
            name = list(SHAPES)[rng.integers(len(SHAPES))]
            n, w = ref[name].shape
            op = rng.choice(["read", "read_out", "write", "accumulate", "zero", "create"],
                            p=[.25, .1, .3, .25, .05, .05])
            rows, pos = random_rows(rng, n)
            values = torch.from_numpy(rng.standard_normal((len(pos), w)).astype(np.float32))
            if op == "read":
                got = hs.read(name, rows)
                assert got.dtype == torch.float32 and got.device.type == device
                np.testing.assert_array_equal(got.cpu().numpy(), ref[name][pos])
            elif op == "read_out":
                out = torch.full((len(pos), w), 5.0, device=device)
                assert hs.read(name, rows, out=out) is out
                np.testing.assert_array_equal(out.cpu().numpy(), ref[name][pos])
            elif op == "write":
                if rng.integers(2):
                    values = values.double()  # cast to float32 on the way in
                hs.write(name, rows, values.to(device))
                ref[name][pos] = values.float().numpy()
            elif op == "accumulate":
                hs.accumulate(name, rows, values.to(device))
                ref[name][pos] += values.numpy()
            elif op == "zero":
                hs.zero(name)
                ref[name][:] = 0
            else:  # re-created: zeros again
                hs.create(name, n, w)
                ref[name][:] = 0
        for name in SHAPES:
            np.testing.assert_array_equal(hs.read(name, range(len(ref[name]))).cpu().numpy(), ref[name])
        assert hs.nbytes() == sum(n * w * 4 for n, w in SHAPES.values())


def test_read_into_out(tmp_path):
    with store("file", tmp_path) as hs:
        hs.create("t", 10, 3)
        hs.write("t", range(10), torch.arange(30.).reshape(10, 3))
        out = torch.empty(3, 3)
        assert hs.read("t", np.array([0, 4, 9]), out=out) is out
        assert out[:, 0].tolist() == [0.0, 12.0, 27.0]
        with pytest.raises(ValueError, match="out must be"):
            hs.read("t", range(3), out=torch.empty(2, 3))


@pytest.mark.parametrize("kind", ["ram", "file"])
def test_byte_counters(kind, tmp_path):
    with store(kind, tmp_path) as hs:
        hs.create("t", 100, 7)
        assert hs.take() == {"load_bytes": 0, "store_bytes": 0, "load_seconds": 0.0,
                             "store_seconds": 0.0, "accumulate_seconds": 0.0}
        hs.write("t", range(10, 30), torch.ones(20, 7))
        counts = hs.take()
        assert (counts["store_bytes"], counts["load_bytes"]) == (20 * 7 * 4, 0)
        assert counts["store_seconds"] > 0 and counts["accumulate_seconds"] == 0
        hs.accumulate("t", np.array([0, 3, 60, 99]), torch.ones(4, 7))
        counts = hs.take()
        assert (counts["store_bytes"], counts["load_bytes"]) == (4 * 7 * 4, 0)
        assert counts["accumulate_seconds"] > 0 and counts["store_seconds"] == 0
        hs.read("t", torch.tensor([1, 2, 50]))
        hs.read("t", range(0, 100))
        hs.read("t", range(5, 5))
        counts = hs.take()
        assert (counts["load_bytes"], counts["store_bytes"]) == ((3 + 100) * 7 * 4, 0)
        assert counts["load_seconds"] > 0
        assert hs.take()["load_bytes"] == 0


@pytest.mark.parametrize("kind", ["ram", "file"])
def test_bad_rows(kind, tmp_path):
    with store(kind, tmp_path) as hs:
        hs.create("feat", 10, 2)
        for rows in (torch.tensor([3, 10]), np.array([-1, 2]), range(5, 11), slice(-1, 3)):
            with pytest.raises(IndexError, match="feat"):
                hs.read("feat", rows)
        with pytest.raises(IndexError, match="feat"):
            hs.write("feat", torch.tensor([10]), torch.zeros(1, 2))
        with pytest.raises(ValueError, match="ascending"):
            hs.accumulate("feat", torch.tensor([3, 3]), torch.zeros(2, 2))
        with pytest.raises(ValueError, match="shape"):
            hs.write("feat", range(2), torch.zeros(2, 3))
        with pytest.raises(KeyError, match="nope"):
            hs.read("nope", range(0))
        assert hs.read("feat", []).shape == (0, 2)


def test_unwritable_directory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="a-file"):
        HostStore("file", "cpu", str(blocker / "tier"))
    with pytest.raises(ConfigError, match="directory"):
        HostStore("file", "cpu")
    with pytest.raises(ConfigError, match="kind"):
        HostStore("disk", "cpu", str(tmp_path))
    if os.geteuid() != 0:  # root writes through any mode bits
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="locked"):
            HostStore("file", "cpu", str(locked))


def test_close_removes_what_it_made(tmp_path):
    fresh = tmp_path / "new" / "tier"
    with HostStore("file", "cpu", str(fresh)) as hs:
        hs.create("a", 5, 3)
        hs.create("a", 8, 3)  # replaced, still one file
        hs.create("b/../c", 2, 1)  # names are not paths
        assert len(list(fresh.iterdir())) == 2
    assert not fresh.parent.exists() and tmp_path.exists()  # both folders were made by the store
    hs.close()  # again: nothing left to do

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "other").write_text("x")
    hs = HostStore("file", "cpu", str(kept))
    hs.create("a", 4, 4)
    hs.close()
    hs.close()
    assert [p.name for p in kept.iterdir()] == ["other"]


def test_files_are_never_mapped():
    tree = ast.parse(Path(host_store.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert "mmap" not in imported
    assert "np.memmap" not in Path(host_store.__file__).read_text()


MEMORY_SCRIPT = """
import json, numpy as np, os, sys, tempfile, torch
from gnnmesh.host_store import HostStore

def hwm_kib():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))

try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
except OSError as err:
    print(json.dumps({"skip": str(err)}))
    sys.exit()
rows, width, block = 65536, 1024, 1024            # 256 MiB table, 4 MiB blocks
with HostStore("file", "cpu", sys.argv[1], window_bytes=4 << 20) as hs:
    hs.create("t", rows, width)
    marks = torch.empty(2, width)
    for b, lo in enumerate(range(0, rows, block)):  # mark each block's first and last row
        hs.write("t", np.array([lo, lo + block - 1]), marks.fill_(b + 1))
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base, bad = hwm_kib(), []
    for b, lo in enumerate(range(0, rows, block)):
        x = hs.read("t", range(lo, lo + block))                # straight into the result
        if (x[0, 0], x[-1, -1], x[1, 0]) != (b + 1, b + 1, 0):
            bad.append(b)
        del x
        x = hs.read("t", np.arange(lo, lo + block, 2))        # through the window
        if x[0, 0] != b + 1 or x.shape != (block // 2, width):
            bad.append(b)
        del x
    print(json.dumps({"rise_kib": hwm_kib() - base, "bad": bad}))
"""


def test_reading_a_file_table_keeps_memory_bounded(tmp_path):
    # a fixed mmap threshold makes glibc hand freed blocks back at once; by default it raises
    # the threshold after the first free and keeps up to 8 MiB of freed heap resident
    env = dict(os.environ, PYTHONPATH=str(REPO), MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    done = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(tmp_path / "tier")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"cannot reset the peak resident memory: {result['skip']}")
    assert result["bad"] == []
    window, block, slack = 4 << 10, 4 << 10, 8 << 10  # KiB
    assert result["rise_kib"] <= window + block + slack, result
    assert not (tmp_path / "tier").exists()


# -- every store is cleaned up: at the end of a run, however it ends, and after a kill -9 by
#    the next store in that folder ----------------------------------------------------------

SBM = "sbm:nodes=300,classes=3,features=8"


def dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(30)
    return done.pid


def test_store_removes_the_folders_it_made_when_empty(tmp_path):
    hs = HostStore("file", "cpu", str(tmp_path / "a" / "b" / "rank0"))  # all three made
    hs.create("t", 3, 2)
    hs.close()
    assert list(tmp_path.iterdir()) == []

    hs = HostStore("file", "cpu", str(tmp_path / "a" / "b" / "rank0"))
    (tmp_path / "a" / "b" / "theirs").write_text("x")  # put there by something else
    hs.close()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "theirs"]

    given = tmp_path / "given"  # the user's folder, empty: it stays
    given.mkdir()
    HostStore("file", "cpu", str(given)).close()
    assert given.is_dir()


@pytest.mark.parametrize("first", ["maker", "other"])
def test_folders_two_ranks_made_together_go_with_the_last_store(tmp_path, first):
    """Rank 0 makes the shared folder, so rank 1 finds it there; whichever closes last removes
    it, as each knows the run made it (before, it stayed when the maker closed first)."""
    root = tmp_path / "a" / "store"
    shared = host_store.made_together(str(root), Comm(None))  # [store, a]: what both ranks saw missing
    maker = HostStore("file", "cpu", str(root / "rank0"), shared=shared)
    other = HostStore("file", "cpu", str(root / "rank1"), shared=shared)
    assert host_store._missing_dirs(str(root / "rank2")) == [str(root / "rank2")]  # found, not made
    maker.create("t", 2, 2)
    other.create("t", 2, 2)
    earlier, last = (maker, other) if first == "maker" else (other, maker)
    earlier.close()
    assert root.is_dir()  # the other rank's files are still in it
    last.close()
    assert list(tmp_path.iterdir()) == []


def test_store_sweeps_files_of_dead_processes(tmp_path):
    folder = tmp_path / "store" / "rank0"
    folder.mkdir(parents=True)
    dead = folder / (temporary_prefix("h0.f32").replace(f"-{os.getpid()}-", f"-{dead_pid()}-") + "abc")
    live = folder / (temporary_prefix("h0.f32") + "live")  # this process's: alive
    dead.write_bytes(b"0" * 64)
    live.write_bytes(b"0" * 64)
    with HostStore("file", "cpu", str(folder)) as hs:
        assert not dead.exists() and live.exists()
        hs.create("h1", 4, 2)
        assert all(is_temporary(p.name) for p in folder.iterdir())  # named with host and pid
    assert [p.name for p in folder.iterdir()] == [live.name]

    live.unlink()  # a folder holding only a dead run's files was that run's: it goes
    dead.write_bytes(b"0")
    HostStore("file", "cpu", str(folder)).close()
    assert [p.name for p in tmp_path.rglob("*")] == ["store"]


def _cli(args, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "gnnmesh", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kwargs)


def _wait_for_epoch(proc) -> None:
    for line in proc.stdout:
        if line.startswith("epoch"):
            return
    raise AssertionError(f"no epoch line; stderr: {proc.stderr.read()}")


MINIBATCH = ["train", "--dataset", SBM, "--minibatch", "--strategy", "gdp", "--nproc", "2",
             "--host-store", "file"]


@pytest.mark.slow  # two ranks
def test_minibatch_run_leaves_the_store_dir_as_found(tmp_path):
    (tmp_path / "mine").write_text("x")
    run = _cli([*MINIBATCH, "--store-dir", str(tmp_path / "a" / "b"), "--epochs", "2", "--quiet"])
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert [p.name for p in tmp_path.rglob("*")] == ["mine"]


@pytest.mark.slow  # two ranks, stopped by a signal
def test_minibatch_store_is_removed_on_sigterm(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    run = _cli([*MINIBATCH, "--store-dir", str(store), "--epochs", "100000"])
    try:
        _wait_for_epoch(run)
        assert len(list(store.iterdir())) == 2  # one file per rank
        os.kill(run.pid, signal.SIGTERM)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(30)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert list(store.iterdir()) == []


@pytest.mark.slow  # killed runs, then runs again
@pytest.mark.parametrize("engine", [["--strategy", "offload"],
                                    ["--strategy", "tensor", "--decoupled", "--nproc", "2"]],
                         ids=["offload", "tensor-2-ranks"])
def test_next_run_sweeps_a_killed_runs_store(tmp_path, engine):
    store = tmp_path / "store"
    args = ["train", "--dataset", SBM, *engine, "--host-store", "file", "--store-dir", str(store)]
    run = _cli([*args, "--epochs", "100000"])
    try:
        _wait_for_epoch(run)
        procs = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
        os.kill(run.pid, signal.SIGKILL)  # ranks get SIGKILL when their launcher dies
        psutil.wait_procs(procs, timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate(timeout=30)
    killed = sorted(p for p in store.rglob("*") if p.is_file())
    assert killed  # what kill -9 leaves
    live = store / "rank0" / (temporary_prefix("other.f32") + "live")  # a live process's
    live.write_text("x")
    again = _cli([*args, "--epochs", "1", "--quiet"])
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert not [p for p in killed if p.exists()]
    assert sorted(p.relative_to(store).as_posix() for p in store.rglob("*")) == ["rank0", f"rank0/{live.name}"]

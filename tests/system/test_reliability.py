"""Reproductions of failures found by interrupting, killing and misfeeding runs, one test
(or a few) per case: interrupts, kills and malformed input. Processes get real signals; every subprocess has a timeout."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import psutil
import pytest
import torch

from gnnmesh import ConfigError, Graph, GraphError
from gnnmesh.atomic import is_temporary, staged_directory, sweep_stale
from gnnmesh.config import Config
from gnnmesh.datasets import load
from gnnmesh.graph import Adjacency
from gnnmesh.predict.store import OUTPUT as PREDICTION
from gnnmesh.train import Trainer

from tests.helpers import gnnmesh_in_process
from tests.forked import run_cli

SBM = "sbm:nodes=300,classes=3,features=8"
RANK_RUN = ["train", "--dataset", SBM, "--nproc", "2", "--strategy", "partition", "--partitioner", "rp"]


def gnnmesh(*args, timeout=120, **kwargs):
    return run_cli(*args, timeout=timeout, **kwargs)


def script(code: str, *args, timeout=120):
    """Run ``code`` in a fresh interpreter (it may kill itself); return the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(result, *fragments, status=2):
    assert result.returncode == status, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gnnmesh: error:"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def temporaries(folder) -> list:
    return [p for p in folder.rglob("*") if is_temporary(p.name)]


def start(args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gnnmesh", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def wait_for_epoch(proc) -> None:
    for line in proc.stdout:
        if line.startswith("epoch"):
            return
    raise AssertionError(f"no epoch line; stderr: {proc.stderr.read()}")


def ranks_of(proc) -> list:
    return [p for p in psutil.Process(proc.pid).children(recursive=True)
            if "gnnmesh" in " ".join(p.cmdline())]


@pytest.fixture(scope="module")
def graph():
    return load(SBM)


def epochs_in(path) -> list:
    return [json.loads(line)["epoch"] for line in path.read_text().splitlines()]


# -- the metrics rewrite on resume is atomic ------------------------------------------------

RESUME_AND_DIE = """
    import os, signal, sys
    import gnnmesh.atomic, gnnmesh.train.metrics as metrics
    from gnnmesh.config import Config
    from gnnmesh.datasets import load
    from gnnmesh.train import Trainer
    point, ckpt, path = sys.argv[1:]
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    if point == "before-rename":   # the kept lines are in the temporary, not yet renamed
        gnnmesh.atomic.os.replace = die
    else:                           # the rewritten file is open for appending, nothing written yet
        opened = metrics.MetricsFile.__init__
        metrics.MetricsFile.__init__ = lambda self, *a: (opened(self, *a), die())[0]
    config = Config.of(dataset="{sbm}", epochs=10, checkpoint=ckpt, resume=True, metrics=path)
    Trainer(config, load(config.data.dataset)).fit()
""".replace("{sbm}", SBM)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", ["before-rename", "after-open"])
def test_kill_during_resume_keeps_every_metrics_line(graph, tmp_path, point):
    ckpt, metrics = tmp_path / "c.pt", tmp_path / "m.jsonl"
    Trainer(Config.of(dataset=SBM, epochs=6, checkpoint=str(ckpt), metrics=str(metrics)), graph).fit()
    died = script(RESUME_AND_DIE, point, ckpt, metrics)
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert epochs_in(metrics) == list(range(1, 7))
    Trainer(Config.of(dataset=SBM, epochs=9, checkpoint=str(ckpt), resume=True, metrics=str(metrics)), graph).fit()
    assert epochs_in(metrics) == list(range(1, 10))
    assert temporaries(tmp_path) == []  # the dead process's temporary was swept


# -- the launcher's signal and child policy -------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.slow
def test_ranks_die_with_a_killed_launcher(stopped):
    proc = start(RANK_RUN + ["--epochs", "100000", "--log-every", "1"])
    stopped.append(proc)
    wait_for_epoch(proc)
    ranks = ranks_of(proc)
    assert len(ranks) == 2
    proc.kill()
    proc.wait(10)
    gone, alive = psutil.wait_procs(ranks, timeout=15)
    assert alive == [], f"orphan ranks: {alive}"


@pytest.mark.timeout(120)
@pytest.mark.slow  # a 2-rank job started and stopped; the single process's signals stay in the fast suite
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_launcher_gives_one_line_and_128_plus_signal(stopped, sig):
    proc = start(RANK_RUN + ["--epochs", "100000", "--log-every", "1"])
    stopped.append(proc)
    wait_for_epoch(proc)
    ranks = ranks_of(proc)
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10  # about 1 s unloaded
    assert proc.returncode == 128 + sig
    assert err.strip() == "gnnmesh: interrupted", err
    _, alive = psutil.wait_procs(ranks, timeout=5)
    assert alive == []


@pytest.mark.timeout(120)
def test_ctrl_c_while_ranks_start_their_interpreters_gives_one_line(stopped):
    # a rank that gets SIGINT before Python has imported its site module prints a traceback;
    # the launcher stops its ranks with SIGTERM instead, which ends them there without a word
    proc = start(RANK_RUN + ["--epochs", "100000"])
    stopped.append(proc)
    deadline = time.monotonic() + 60
    while not ranks_of(proc) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    ranks = ranks_of(proc)
    assert ranks, "no rank started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "gnnmesh: interrupted", err
    _, alive = psutil.wait_procs(ranks, timeout=5)
    assert alive == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow)])
def test_signal_to_single_process_gives_one_line(stopped, sig):
    proc = start(["train", "--dataset", SBM, "--epochs", "100000", "--log-every", "1"])
    stopped.append(proc)
    wait_for_epoch(proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig and err.strip() == "gnnmesh: interrupted", err


# -- the Graph constructor is the gate -----------------------------------------------------

BAD_ADJACENCY = [
    ([0, 1, 2, 3, 4], [1, 2, 3, 10**8], "column id 100000000"),
    ([0, 1, 2, 3, 4], [1, 2, 3, -5], "column id -5"),
    ([0, 2, 1, 3, 4], [1, 2, 3, 1], "'indptr' decreases at row 1"),
    ([0, 1, 2, 3], [1, 2, 3], "'indptr' has 4 entries, expected 5"),
    ([0, 1, 2, 3, 5], [1, 2, 3, 1], "'indptr' must run from 0 to 4"),
    ([0, 2, 2, 3, 4], [2, 1, 3, 1], "not sorted and unique within row 0"),
]


@pytest.mark.parametrize("indptr, indices, message", BAD_ADJACENCY)
def test_malformed_csr_is_refused_by_every_constructor(indptr, indices, message):
    adj = Adjacency(torch.tensor(indptr), torch.tensor(indices), None, (4, 4))
    with pytest.raises(GraphError, match=message):
        Graph.from_adjacency(adj, source="mine")
    with pytest.raises(GraphError, match=message):
        Graph(adj=Adjacency(torch.tensor(indptr), torch.tensor(indices), None, (4, 4)))


@pytest.mark.parametrize("value", [10**9, -5])
def test_damaged_cache_indices_are_detected_and_rebuilt(tmp_path, monkeypatch, value):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path))
    good = load(SBM)
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    indices = np.load(entry / "indices.npy")
    indices[3] = value
    np.save(entry / "indices.npy", indices)
    with pytest.warns(UserWarning, match="unreadable cache entry"):
        again = load(SBM)
    assert torch.equal(again.adj.indices, good.adj.indices)
    assert np.load(entry / "indices.npy")[3] == int(good.adj.indices[3])  # saved again


# -- npz fields -------------------------------------------------------------------------

def write_npz(path, indptr, indices):
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    np.savez(path, adj_data=np.ones(len(indices), np.float32), adj_indices=indices, adj_indptr=indptr,
             adj_shape=np.array([6, 6]), labels=np.arange(6) % 2)
    return path


@pytest.mark.parametrize("indptr, indices, message", [
    ([0, 2, 4, 1, 8, 10, 12], [1, 2] * 6, "field 'adj_indptr' decreases at row 2"),
    ([0, 2, 4, 6, 8, 10, 12], [1, 2] * 5 + [1, 6], "field 'adj_indices' has column id 6"),
    ([0, 2, 4, 6, 8, 10, 12], [1, 2] * 5 + [1, -1], "field 'adj_indices' has column id -1"),
])
def test_npz_with_a_bad_csr_is_one_line(tmp_path, indptr, indices, message):
    path = write_npz(tmp_path / "g.npz", indptr, indices)
    with pytest.raises(GraphError, match=message):
        load(str(path))
    one_error_line(gnnmesh_in_process("train", "--dataset", str(path)), "g.npz", message)


# -- checkpoint paths refused before training ---------------------

@pytest.mark.parametrize("nproc", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_checkpoint_that_is_a_directory_is_refused_before_training(tmp_path, nproc):
    (tmp_path / "ckdir").mkdir()
    args = RANK_RUN if nproc == 2 else ["train", "--dataset", SBM]
    result = (gnnmesh if nproc == 2 else gnnmesh_in_process)(*args, "--epochs", "300", "--checkpoint",
                                                              str(tmp_path / "ckdir"))
    one_error_line(result, "ckdir", "is a directory")
    assert "epoch" not in result.stdout and "done" not in result.stdout


def test_checkpoint_below_a_file_names_it(tmp_path):
    (tmp_path / "somefile").write_text("")
    result = gnnmesh_in_process("train", "--dataset", SBM, "--checkpoint", str(tmp_path / "somefile" / "c.pt"))
    one_error_line(result, "somefile is not a directory")


# -- temporaries removed on signals, swept after kills --------------------------------------

DIE_IN_WRITE = """
    import os, signal, sys
    import torch
    from gnnmesh import cli
    import gnnmesh.datasets.cache as cache
    what, sig, folder = sys.argv[1], getattr(signal, sys.argv[2]), sys.argv[3]
    def die_midway(write):
        def wrapper(obj, out, *a, **k):
            write(obj, out, *a, **k)
            os.kill(os.getpid(), sig)
        return wrapper
    if what == "checkpoint":
        torch.save = die_midway(torch.save)
        args = ["--checkpoint", folder + "/c.pt", "--epochs", "2"]
    else:
        cache._write_arrays = die_midway(cache._write_arrays)
        os.environ["GNNMESH_CACHE"] = folder
        args = ["--epochs", "1"]
    sys.exit(cli.main(["train", "--dataset", "{sbm}", *args]))
""".replace("{sbm}", SBM)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", [pytest.param("checkpoint", marks=pytest.mark.slow), "cache"])
def test_temporaries_are_removed_on_sigterm_and_swept_after_sigkill(tmp_path, what):
    term = script(DIE_IN_WRITE, what, "SIGTERM", tmp_path)
    assert term.returncode == 128 + signal.SIGTERM, term.stderr
    assert term.stderr.strip() == "gnnmesh: interrupted"
    assert temporaries(tmp_path) == []
    killed = script(DIE_IN_WRITE, what, "SIGKILL", tmp_path)
    assert killed.returncode == -signal.SIGKILL
    assert len(temporaries(tmp_path)) == 1  # what kill -9 leaves ...
    env = dict(os.environ, GNNMESH_CACHE=str(tmp_path))
    args = ["--checkpoint", str(tmp_path / "c.pt")] if what == "checkpoint" else []
    assert gnnmesh("train", "--dataset", SBM, "--epochs", "1", *args, env=env).returncode == 0
    assert temporaries(tmp_path) == []  # ... the next run sweeps


def test_a_live_process_temporaries_are_kept(tmp_path):
    from gnnmesh.atomic import _prefix
    mine = tmp_path / (_prefix("c.pt") + "x")
    mine.write_text("")
    assert sweep_stale(tmp_path) == 0 and mine.exists()


# -- one seed range everywhere ---------------------------------------------------------------

@pytest.mark.parametrize("args", [
    RANK_RUN + ["--seed", "-1"],
    ["train", "--dataset", SBM, "--strategy", "grid3d", "--nproc", "2", "--seed", "-1"],
    ["train", "--dataset", SBM, "--seed", "99999999999999999999"],
    ["partition", "--dataset", SBM, "--parts", "2", "--method", "rp", "--seed", "-3"],
    ["train", "--dataset", "sbm:nodes=100,seed=-1"],
    ["train", "--dataset", "rmat:nodes=100,edges=300,split_seed=4294967296"],
])
def test_seeds_out_of_range_are_one_line(args):
    one_error_line(gnnmesh_in_process(*args), "seed", "4294967295")


# -- a torn metrics line on resume ----------------------------------------------------------

def test_torn_last_metrics_line_is_dropped_and_other_damage_named(graph, tmp_path):
    ckpt, metrics = tmp_path / "c.pt", tmp_path / "m.jsonl"
    config = Config.of(dataset=SBM, epochs=4, checkpoint=str(ckpt), metrics=str(metrics))
    Trainer(config, graph).fit()
    with open(metrics, "a") as fh:
        fh.write('{"epoch": 5, "loss": 0.5, "tra')
    with pytest.warns(UserWarning, match="m.jsonl line 5: dropping a torn last line"):
        Trainer(config.updated(epochs=5, resume=True), graph).fit()
    assert epochs_in(metrics) == [1, 2, 3, 4, 5]
    with open(metrics, "a") as fh:
        fh.write("[1, 2]\n")
    with pytest.raises(ConfigError, match="m.jsonl line 6: not a metrics record"):
        Trainer(config.updated(epochs=6, resume=True), graph).fit()


def test_metrics_are_strict_json(graph, tmp_path):
    metrics = tmp_path / "m.jsonl"
    Trainer(Config.of(dataset=SBM, epochs=3, eval_every=2, metrics=str(metrics)), graph).fit()
    first = json.loads(metrics.read_text().splitlines()[0], parse_constant=lambda c: pytest.fail(c))
    assert first["val_acc"] is None  # not evaluated that epoch


# -- quiet on errors peers cannot see, and on a closed stdout -------------------------------

@pytest.mark.timeout(120)
@pytest.mark.slow
def test_rank0_only_error_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    result = gnnmesh(*RANK_RUN, "--epochs", "5", "--metrics", str(tmp_path / "file" / "m.jsonl"))
    one_error_line(result, "m.jsonl")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nproc", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_closed_stdout_ends_quietly(stopped, nproc):
    args = RANK_RUN if nproc == 2 else ["train", "--dataset", SBM]
    proc = start(args + ["--epochs", "100000", "--log-every", "1"])
    stopped.append(proc)
    proc.stdout.readline()
    proc.stdout.close()  # what 'head -1' does
    err = proc.stderr.read()
    proc.wait(30)
    assert proc.returncode == 128 + signal.SIGPIPE and err == "", err


# -- a damaged cache entry is repaired once ----------------------------------------------

def test_cache_entry_missing_a_file_is_rebuilt_once(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path))
    load(SBM)
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (entry / "y.npy").unlink()
    with pytest.warns(UserWarning, match="unreadable cache entry"):
        load(SBM)
    assert (entry / "y.npy").is_file()


# -- ids in edge lists ------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("0 1\n1 100000000000000000000\n", "line 2: node id too large"),
    ("0 1 0.5\n1 9007199254740993 1.0\n", "line 2: node id too large"),
    ("0 1\n1 2500000000\n", "line 2: node id 2500000000 would make a graph of 2,500,000,001 nodes for 3"),
])
def test_huge_and_sparse_ids_are_one_line(tmp_path, text, message):
    path = tmp_path / "g.txt"
    path.write_text(text)
    with pytest.raises(GraphError, match=message):
        load(str(path))


# -- PyG weights ---------------------------------------------------------------------------

def test_pyg_weights(graph):
    from torch_geometric.data import Data
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    w = torch.tensor([1.0, 2.0, 3.0])
    g = Graph.from_pyg(Data(edge_index=ei, edge_attr=w.view(-1, 1), num_nodes=3))
    assert torch.equal(g.adj.values, torch.tensor([3.0, 1.0, 2.0]))
    with pytest.raises(GraphError, match="'edge_weight' has a non-finite value nan at edge 1"):
        Graph.from_pyg(Data(edge_index=ei, edge_weight=torch.tensor([1.0, float("nan"), 1.0]), num_nodes=3))
    with pytest.raises(GraphError, match=r"'edge_weight' has shape \[2\], expected \[3\]"):
        Graph.from_pyg(Data(edge_index=ei, edge_weight=w[:2], num_nodes=3))


# -- every numeric config field --------------------------------------------------------

@pytest.mark.parametrize("flag, value, message", [
    ("--alpha", "nan", "'alpha': must be a finite number"),
    ("--alpha", "2", "'alpha': must be in [0.0, 1.0]"),
    ("--weight-decay", "inf", "'weight_decay': must be a finite number"),
    ("--lr=-inf", None, "'lr': must be a finite number"),
    ("--epsilon", "nan", "'epsilon': must be a finite number"),
])
def test_numeric_fields_are_checked(flag, value, message):
    flags = [flag] if value is None else [flag, value]
    one_error_line(gnnmesh_in_process("train", "--model", "gcn", "--decoupled", *flags), message)


def test_non_utf8_config_is_one_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b"epochs = 3\n\xff\xfe\n")
    one_error_line(gnnmesh_in_process("train", "--config", str(path)), "c.toml", "UTF-8")


# -- Ctrl-C during hypergraph partitioning -------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("kill", ["SIGINT", "SIGKILL"])
def test_partitioning_stops_at_once_and_leaves_no_worker(stopped, tmp_path, kill):
    pytest.importorskip("mtkahypar")
    proc = subprocess.Popen([sys.executable, "-m", "gnnmesh", "partition", "--dataset",
                             "rmat:nodes=100000,edges=1000000", "--parts", "4", "--method", "hp",
                             "--cache-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped.append(proc)
    for line in proc.stderr:
        if "mt-KaHyPar" in line:
            break
    time.sleep(0.5)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert workers, "mt-KaHyPar finished too soon for this test"
    sent = time.monotonic()
    proc.send_signal(getattr(signal, kill))
    proc.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert proc.returncode == (130 if kill == "SIGINT" else -signal.SIGKILL)
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert alive == []


# -- smaller cases ---------------------------------------------------------------------------

def test_files_and_directories_follow_the_umask(graph, tmp_path, monkeypatch):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path / "cache"))
    old = os.umask(0o022)
    try:
        load(SBM)
        Trainer(Config.of(dataset=SBM, epochs=1, checkpoint=str(tmp_path / "c.pt")), graph).fit()
    finally:
        os.umask(old)
    (entry,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert entry.stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "c.pt").stat().st_mode & 0o777 == 0o644


def test_trainer_refuses_more_ranks_than_processes(graph):
    with pytest.raises(ConfigError, match="gnnmesh train --nproc 2"):
        Trainer(Config.of(dataset=SBM, strategy="partition", nproc=2, partitioner="rp"), graph)


def test_resume_past_the_requested_epochs_says_so(graph, tmp_path):
    config = Config.of(dataset=SBM, epochs=6, checkpoint=str(tmp_path / "c.pt"))
    Trainer(config, graph).fit()
    with pytest.warns(UserWarning, match="checkpoint is at epoch 6, past --epochs 3"):
        Trainer(config.updated(epochs=3, resume=True), graph).fit()


def test_saved_config_does_not_pin_model_defaults(tmp_path):
    saved = tmp_path / "saved.toml"
    saved.write_text(gnnmesh("train", "--epochs", "5", "--print-config").stdout)
    gat = gnnmesh("train", "--config", str(saved), "--model", "gat", "--print-config").stdout
    assert "# hidden = 8" in gat and "# lr = 0.005" in gat and "epochs = 5" in gat


def test_file_path_with_a_colon_takes_options(tmp_path):
    folder = tmp_path / "a:b"
    folder.mkdir()
    (folder / "g.txt").write_text("0 1\n1 2\n")
    assert load(f"{folder}/g.txt:directed=false").directed is False


def test_plan_refuses_absurd_rank_counts():
    one_error_line(gnnmesh_in_process("plan", "--nproc", "100000000", "--nodes", "10", "--edges", "10"), "--nproc")


def test_missing_data_root_is_named(tmp_path):
    one_error_line(gnnmesh_in_process("datasets", "--data-root", str(tmp_path / "none")), "no such directory")


def test_in_process_commands_leave_signal_handling_as_it_was():
    from gnnmesh import cli
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert cli.main(["partition", "--dataset", SBM, "--parts", "2", "--method", "rp", "--seed", "-1"]) == 2
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_loading_sweeps_temporaries_of_dead_writers(tmp_path, monkeypatch):
    from gnnmesh.atomic import _HOST
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path))
    load(SBM)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    stale = tmp_path / f".sbm-entry.tmp-{_HOST}-{dead.pid}-abc"
    stale.mkdir()
    load(SBM)  # the entry is complete: nothing is written, but the leftover goes
    assert not stale.exists()


# -- a stop signal and finalizers ----------------------------------------------------------

def test_a_signal_landing_in_a_finalizer_still_stops_the_process():
    """A finalizer swallows what it raises: the Interrupted of a signal that arrives while one
    runs must still end the process (with the one line), not leave it deaf to signals."""
    result = script("""
        import os, signal, sys, time
        from gnnmesh.cli import main
        from gnnmesh.launch import stop_on_signals
        stop_on_signals()

        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10 ** 6):   # the handler runs here, inside the finalizer
                    pass

        Finalized()
        time.sleep(1)
        print("went on", flush=True)
    """, timeout=60)
    assert result.returncode == 128 + signal.SIGTERM, (result.returncode, result.stderr)
    assert result.stderr.strip() == "gnnmesh: interrupted" and "went on" not in result.stdout, result.stderr


def test_finalizers_failing_after_a_stop_signal_print_nothing():
    result = script("""
        import os, signal, sys
        from gnnmesh.launch import Interrupted, say_interrupted, stop_on_signals
        stop_on_signals()

        class Failing:
            def __del__(self):
                raise ValueError("torn down")

        held = Failing()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            while True:
                pass
        except Interrupted as err:
            del held   # its finalizer fails while the process stops
            say_interrupted()
            sys.exit(err.exit_status)
    """, timeout=60)
    assert result.returncode == 128 + signal.SIGTERM, (result.returncode, result.stderr)
    assert result.stderr.strip() == "gnnmesh: interrupted", result.stderr


# -- numbers past what a plan can price, and a cache of no bytes ------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--nodes", str(10**23), "--edges", "10"], "--nodes must be at most"),
    (["--nodes", "1000", "--edges", str(2**63)], "--edges must be at most"),
    (["--nodes", "1000", "--edges", "10000", "--features", str(2**64)], "--features must be at most"),
    (["--nodes", "1000", "--edges", "10000", "--intra-bw", "inf"], "--intra-bw must be a finite number"),
    (["--nodes", "1000", "--edges", "10000", "--inter-latency", "nan"], "--inter-latency must be a number in [0"),
])
def test_plan_sizes_beyond_int64_or_float_range_are_one_line(capsys, flags, message):
    from gnnmesh import cli
    for strategy in ("all", "grid3d"):
        assert cli.main(["plan", "--strategy", strategy, "--nproc", "4", *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_a_cache_of_zero_bytes_is_no_cache():
    mini = Config.of(strategy="gdp", minibatch=True, nproc=2, cache_memory="0")
    assert mini.minibatch.cache_bytes() == 0
    assert Config.of(strategy="gdp", minibatch=True, nproc=2, cache_memory="2KiB").minibatch.cache_bytes() == 2048
    with pytest.raises(ConfigError, match="'cache_memory': '-1' is not a size"):
        Config.of(strategy="gdp", minibatch=True, nproc=2, cache_memory="-1")


def test_parts_with_an_engine_that_cannot_read_them_names_that_engine():
    with pytest.raises(ConfigError, match="'parts': --strategy tensor with --host-store trains from a dataset"):
        Config.of(parts="p", decoupled=True, host_store="ram").updated(strategy="tensor")  # the parts' strategy
    with pytest.raises(ConfigError, match="'parts': --strategy offload trains from a dataset"):
        Config.of(parts="p", strategy="offload")
    assert Config.of(parts="p", strategy="tensor").strategy_spec.parts  # the in-memory engine reads its parts


def test_a_fanout_beyond_int64_is_one_line():
    with pytest.raises(ConfigError, match="'fanouts': 99999999999999999999999 is above"):
        Config.of(minibatch=True, fanouts="99999999999999999999999,5")


@pytest.mark.parametrize("mirror", ["not a url", "ftp://host/x", "https://"])
def test_a_mirror_that_is_not_a_url_is_one_line(monkeypatch, tmp_path, capsys, mirror):
    from gnnmesh import cli
    monkeypatch.setenv("GNNMESH_MIRROR", mirror)
    assert cli.main(["datasets", "--fetch", "facebook", "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GNNMESH_MIRROR" in err[0] and not any(tmp_path.iterdir())


@pytest.mark.parametrize("strategy", [["--strategy", "offload"], ["--strategy", "tensor", "--decoupled", "--host-store", "ram"]])
def test_more_chunks_than_rows_is_one_line(capsys, strategy):
    from gnnmesh import cli
    argv = ["train", "--dataset", SBM, "--epochs", "1", "--chunks", "301", "--device-memory", "1GiB", *strategy]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'chunks': 301 chunks per rank, but a rank holds 300 rows" in err[0], err


# -- parts read back: a matching checksum says a file is the one written, not that it is sound -------

def _rewrite(parts_dir, name, change):
    """Rewrite rank 0's array ``name`` with ``change`` applied, and its checksum with it."""
    from gnnmesh.parts.store import MANIFEST, checksum
    path = parts_dir / "rank-00000" / f"{name}.npy"
    np.save(path, change(np.load(path)), allow_pickle=False)
    manifest = json.loads((parts_dir / MANIFEST).read_text())
    manifest["ranks"][0]["files"][name] = checksum(path)
    (parts_dir / MANIFEST).write_text(json.dumps(manifest))


def _set(index, value):
    def change(array):
        array = array.copy()
        array[index] = value
        return array
    return change


PART_DAMAGE = {
    "column id past the block": ("partition", "gcn.indices", _set(0, 10**6), "gcn"),
    "negative column id": ("partition", "gcn.indices", _set(0, -1), "gcn"),
    "unsorted row": ("partition", "gcn.indices", lambda a: np.concatenate([a[1::-1], a[2:]]), "gcn"),
    "short indptr": ("partition", "gcn.indptr", lambda a: a[:-5], "indptr"),
    "label past the classes": ("partition", "y", _set(0, 99), "label 99"),
    "owned id past the graph": ("partition", "owned", _set(0, 10**6), "owned.npy"),
    "float ids": ("partition", "owned", lambda a: a.astype(np.float64), "owned.npy"),
    "short features": ("partition", "x", lambda a: a[:-1], "field 'x'"),
    "tensor column id": ("tensor", "adj.indices", _set(0, 10**6), "adj"),
    "grid order not a permutation": ("grid3d", "orders", _set((0, 0), 1), "orders.npy"),
}


@pytest.fixture(scope="module")
def written_parts(tmp_path_factory):
    """One rank's parts of each kind, written once; each test damages its own copy."""
    out = {}
    how_to_write = {"partition": ["--partitioner", "rp", "--nparts", "1"],
                    "tensor": ["--strategy", "tensor", "--nparts", "1"], "grid3d": ["--strategy", "grid3d", "--grid", "1,1,1"]}
    for kind, how in how_to_write.items():
        where = tmp_path_factory.mktemp("parts") / kind
        made = gnnmesh("partition", "--dataset", SBM, *how, "--write-parts", str(where))
        assert made.returncode == 0, made.stderr
        out[kind] = where
    return out


# Five kinds in the fast suite, one of each kind of check; the rest among the slow tests.
FAST_PART_DAMAGE = ("column id past the block", "label past the classes", "owned id past the graph",
                    "tensor column id", "grid order not a permutation")


@pytest.mark.parametrize("case", [c if c in FAST_PART_DAMAGE else pytest.param(c, marks=pytest.mark.slow)
                                  for c in sorted(PART_DAMAGE)])
def test_damaged_parts_with_their_checksums_rewritten_are_one_line(tmp_path, written_parts, case):
    """An array rewritten together with its checksum (a buggy writer, or a hand) is checked as
    every graph is: one line naming the file, status 2, never a crash or a silent run."""
    import shutil
    kind, name, change, fragment = PART_DAMAGE[case]
    where = tmp_path / "parts"
    shutil.copytree(written_parts[kind], where)
    _rewrite(where, name, change)
    result = gnnmesh_in_process("train", "--parts", str(where), "--epochs", "1")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("gnnmesh: error:"), result.stderr
    assert fragment in lines[0], lines[0]


# -- a full disk or a read-only directory: the one line names the file, not a temporary -----

NO_SPACE = os.strerror(errno.ENOSPC)


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, NO_SPACE)  # as a write to an open file raises it: no file name


def _the_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gnnmesh: error:"), lines
    return lines[0]


def test_a_full_disk_under_the_host_store_names_its_file(tmp_path, monkeypatch, capsys):
    from gnnmesh import cli
    store = tmp_path / "store"
    monkeypatch.setattr(os, "pwritev", _no_space)  # every write into a host store file
    assert cli.main(["train", "--dataset", SBM, "--epochs", "1", "--strategy", "offload", "--host-store", "file",
                     "--store-dir", str(store)]) == 2
    line = _the_line(capsys)
    assert f"{store / 'rank0'}{os.sep}" in line and line.endswith(NO_SPACE), line


RANK_1_DISK_FULL = """
    import errno, os
    if os.environ.get("RANK") == "1":  # every write into rank 1's store files finds its disk full
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.pwritev = full
"""


@pytest.mark.slow  # two ranks
@pytest.mark.timeout(120)
def test_a_full_disk_under_another_ranks_store_is_named_by_that_rank(tmp_path):
    """No rank 0 sees rank 1's store: rank 1 names its file (before, every rank stopped silently)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(RANK_1_DISK_FULL))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
               GNNMESH_PROGRESS="off")  # a phase slowed past a second by other work shows its progress lines
    store = tmp_path / "store"
    result = gnnmesh("train", "--dataset", SBM, "--nproc", "2", "--strategy", "offload", "--host-store", "file",
                     "--store-dir", str(store), "--epochs", "1", env=env)
    one_error_line(result, f"rank 1: {store / 'rank1'}{os.sep}", NO_SPACE)
    assert not store.exists()


def test_a_full_disk_under_an_output_names_it(tmp_path, monkeypatch, capsys):
    from gnnmesh import cli
    import gnnmesh.train.metrics as metrics_module

    def save(obj, fh, *args, **kwargs):  # a part of the checkpoint written, then the disk is full
        fh.write(b"PK")
        _no_space()

    monkeypatch.setattr(torch, "save", save)
    checkpoint = tmp_path / "c.pt"
    assert cli.main(["train", "--dataset", SBM, "--epochs", "1", "--checkpoint", str(checkpoint)]) == 2
    assert _the_line(capsys) == f"gnnmesh: error: {checkpoint}: {NO_SPACE}"
    assert not checkpoint.exists() and not temporaries(tmp_path)

    class Full:  # the metrics file, whose appends find the disk full
        def __init__(self, fh):
            self.fh = fh

        def __getattr__(self, name):
            return getattr(self.fh, name)

        write = staticmethod(_no_space)

    monkeypatch.setattr(metrics_module, "open", lambda *a, **k: Full(open(*a, **k)), raising=False)
    metrics = tmp_path / "m.jsonl"
    assert cli.main(["train", "--dataset", SBM, "--epochs", "1", "--metrics", str(metrics)]) == 2
    assert _the_line(capsys) == f"gnnmesh: error: {metrics}: {NO_SPACE}"


def test_a_staged_directory_names_the_output_not_its_temporary(tmp_path):
    out = tmp_path / "out"
    for inside, expected in ((lambda tmp: tmp / "ids-0.npy", out / "ids-0.npy"), (lambda tmp: None, out)):
        with pytest.raises(OSError) as err:
            with staged_directory(out, PREDICTION) as tmp:
                raise OSError(errno.ENOSPC, NO_SPACE, None if inside(tmp) is None else str(inside(tmp)))
        assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(expected))
        assert not out.exists() and not temporaries(tmp_path)


def test_a_read_only_report_directory_names_out(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from gnnmesh import cli
    run = tmp_path / "run.jsonl"
    assert cli.main(["train", "--dataset", SBM, "--epochs", "2", "--metrics", str(run), "--quiet"]) == 0
    capsys.readouterr()
    locked = tmp_path / "locked"
    locked.mkdir()
    out = locked / "report"
    if os.geteuid() != 0:
        locked.chmod(0o555)
    else:  # root writes anywhere: fail as a read-only directory does, naming what it makes there
        make = tempfile.mkdtemp

        def mkdtemp(suffix=None, prefix=None, dir=None):
            if dir is not None and os.path.samefile(dir, locked):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES),
                                      os.path.join(dir, f"{prefix or ''}x1y2z3{suffix or ''}"))
            return make(suffix, prefix, dir)

        monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    try:
        assert cli.main(["report", str(run), "--out", str(out)]) == 2
    finally:
        locked.chmod(0o755)
    assert _the_line(capsys) == f"gnnmesh: error: {out}: {os.strerror(errno.EACCES)}"
    assert not out.exists()

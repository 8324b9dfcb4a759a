"""A fast-tier budget gnnmesh accepts holds: the smallest budget each out-of-core engine
accepts (offload on 1 and 2 ranks, tensor parallelism with the host store on 2) keeps the
measured peak of every epoch (``fast_peak_bytes_max``, resident memory on CPU) within it,
and the budget a refusal names is the smallest the same engine then accepts."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from gnnmesh import cli, datasets
from gnnmesh.errors import ConfigError
from gnnmesh.models import build_model
from gnnmesh.parallel.offload import build_plan
from gnnmesh.parallel.offload.pipeline import stages_of
from gnnmesh.validate import parse_bytes
from tests.forked import run_cli

SMALL = "sbm:nodes=300,classes=3,features=8"
GENERATED = "sbm:nodes=3000,classes=5,features=64"
# One rank computes on one thread, as each rank of the 2-rank engines does on two cores: at
# the floor a batch is a few rows (cora: 1,541 chunks), and a second thread only adds a
# wake-up to every op, many times the work on a busy machine.
ENGINES = {"offload": ["--strategy", "offload", "--threads", "1"],
           "offload-2": ["--strategy", "offload", "--nproc", "2"],
           "tensor-2": ["--strategy", "tensor", "--decoupled", "--host-store", "ram", "--nproc", "2"]}
NAMED = re.compile(r"give at least ([\d.]+) ([KMGT]iB)")


def gnnmesh(*args, timeout=600):
    return run_cli(*args, timeout=timeout)


def named(message: str) -> tuple:
    """(the budget a refusal names, in bytes; a tenth of its unit less, the display's step)."""
    number, unit = NAMED.search(message).groups()
    return parse_bytes(number + unit, "named"), parse_bytes(f"{float(number) - 0.1:.1f}{unit}", "less")


def smallest_budget_holds(dataset: str, engine: list, epochs: int, tmp_path) -> None:
    """Ask for 1 KiB, train on the budget the refusal names, and check every epoch's measured
    peak and estimate against it."""
    refused = gnnmesh("train", "--dataset", dataset, *engine, "--device-memory", "1KiB", "--epochs", "1")
    assert refused.returncode == 2 and NAMED.search(refused.stderr), refused.stderr
    budget, _ = named(refused.stderr)
    metrics = tmp_path / "m.jsonl"
    run = gnnmesh("train", "--dataset", dataset, *engine, "--device-memory", str(budget), "--epochs", str(epochs),
                  "--metrics", str(metrics), "--quiet")
    assert run.returncode == 0, run.stderr
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(records) == epochs
    for r in records:
        where = f"{dataset} {' '.join(engine)}, budget {budget:,} B, epoch {r['epoch']}"
        assert r["budget_bytes"] == budget, where
        assert r["footprint_estimate_bytes"] <= budget, where
        assert r["fast_peak_bytes_max"] <= budget, f"{where}: measured {r['fast_peak_bytes_max']:,.0f} B"


@pytest.mark.slow  # a search for the smallest budget
@pytest.mark.timeout(120)
@pytest.mark.parametrize("overlap", ["--no-overlap", "--overlap"])
def test_the_smallest_offload_budget_holds_on_one_rank(tmp_path, overlap):
    """Also with the transfers of the batches either side in flight (``--overlap``)."""
    smallest_budget_holds(SMALL, [*ENGINES["offload"], overlap], 3, tmp_path)


@pytest.mark.slow  # whole training runs at the floor, several ranks, cora's 1,433 features
@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("dataset", ["cora", GENERATED])
def test_the_smallest_budget_of_every_engine_holds(tmp_path, engine, dataset, request):
    if dataset == "cora":
        request.getfixturevalue("data_root")  # skips without the real datasets
    smallest_budget_holds(dataset, ENGINES[engine], 2, tmp_path)  # the first epoch and one after it


@pytest.mark.timeout(120)
def test_the_floor_an_offload_refusal_names_is_the_smallest_accepted():
    graph = datasets.load(GENERATED)
    stages = stages_of(build_model("gcn", 64, 5, hidden=16), 64)
    assignment = np.random.default_rng(0).integers(0, 2, graph.num_nodes)
    for world in (1, 2):
        owned = [np.flatnonzero(assignment == r) for r in range(2)] if world == 2 else [np.arange(graph.num_nodes)]
        settings = dict(adj=graph.adj, owned=owned, rank=0, in_dim=64, stages=stages, classes=5, heads=1,
                        chunks=None, dedup="both", reorganize=True)
        with pytest.raises(ConfigError, match="device_memory") as err:
            build_plan(budget=1024, **settings)
        budget, less = named(str(err.value))
        plan = build_plan(budget=budget, **settings)  # the budget named is accepted ...
        assert plan.k >= 1, world
        with pytest.raises(ConfigError, match="give at least"):  # ... and nothing a step below it
            build_plan(budget=less, **settings)


@pytest.mark.timeout(120)
def test_the_floor_a_tensor_host_store_refusal_names_is_the_smallest_accepted(capsys):
    argv = ["train", "--dataset", SMALL, "--strategy", "tensor", "--decoupled", "--host-store", "ram",
            "--epochs", "1", "--quiet", "--device-memory"]
    assert cli.main([*argv, "1KiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and NAMED.search(err[0]), err
    budget, less = named(err[0])
    assert cli.main([*argv, str(budget)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert cli.main([*argv, str(less)]) == 2
    assert "give at least" in capsys.readouterr().err

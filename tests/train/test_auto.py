"""``gnnmesh train --strategy auto`` (full graph): the planner ranks every strategy for the job,
prints the ranking and the choice, and the run trains with the choice (gnnmesh.train.auto)."""

import json

import pytest

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.parallel.offload.plan import RESIDENT
from gnnmesh.planner import rates as machine_rates
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
from gnnmesh.planner.rank import rank_strategies
from gnnmesh.train.auto import plan, settings_of
from gnnmesh.train.trainer import candidate_name
from tests.forked import run_cli

SBM = "sbm:nodes=400,classes=3,features=12"


@pytest.fixture
def rates_file(tmp_path):
    path = tmp_path / "rates.json"
    machine_rates.write(path, GPU_RATES, GPU_NETWORK)
    return path


def gnnmesh(*args, timeout=200):
    return run_cli(*args, timeout=timeout)


@pytest.mark.parametrize("fields, refused", [
    ({"grid": "1,1,2"}, "'grid'"), ({"partition_file": "p.npy"}, "'partition_file'"),
    ({"chunk_size": 8}, "'chunk_size'"), ({"host_store": "ram"}, "'host_store'"),
    ({"minibatch": True, "rates": "r.json"}, "with --minibatch"),
    ({"minibatch": True, "device_memory": "1GiB"}, "with --minibatch"),
    ({"parts": "some/parts"}, "'parts'"), ({"partitioner": "shp"}, "without --minibatch")])
def test_auto_refuses_what_it_does_not_plan_with(fields, refused):
    with pytest.raises(ConfigError, match=refused):
        Config.of(strategy="auto", **fields)


def test_auto_leaves_the_partitioner_open_and_takes_its_own_settings():
    config = Config.of(strategy="auto", nproc=4, epsilon=0.05, device_memory="2GiB", rates="r.json").resolved()
    assert config.planned and config.partition.partitioner is None
    mini = Config.of(strategy="auto", minibatch=True, nproc=2, partitioner="rp", epsilon=0.1)   # APT's choice
    assert not mini.planned and mini.resolved().partition.partitioner == "rp"
    with pytest.raises(ConfigError, match="applies only to --strategy auto"):
        Config.of(strategy="partition", rates="r.json")


def test_every_candidate_becomes_a_valid_run():
    """Whatever the plan picks, the config it leads to is one the trainer accepts, with the
    plan's own settings gone and the imbalance kept where a partitioner uses it."""
    graph = datasets.load(SBM)
    ranking = rank_strategies(graph, 4, "gcn", (12, 16, 3), GPU_RATES, GPU_NETWORK, partitioners=("rp", "gp"),
                              cache=False, memory_limit=2**30)
    asked = Config.of(strategy="auto", nproc=4, epsilon=0.05, partitioner="gp", device_memory="2GiB", rates="r.json")
    names = set()
    for estimate in ranking.ranked:
        config = asked.updated(**settings_of(estimate, asked)).resolved()
        assert config.plan.rates is None
        assert config.host_tier.device_memory == (str(2**30) if config.run.strategy == "offload" else None)
        assert config.partition.epsilon == (0.05 if config.run.strategy in ("partition", "offload") else None)
        assert candidate_name(config, 4) == estimate.strategy
        names.add(config.run.strategy)
    assert names == {"partition", "tensor", "grid3d", "offload"}


def test_one_rank_is_the_single_process_without_probing(capsys):
    settings, record = plan(Config.of(strategy="auto").resolved(), datasets.load(SBM), 1, print)
    assert settings["strategy"] == "single" and record == {"candidate": "single"}
    assert "single process" in capsys.readouterr().out


def test_nothing_fitting_is_a_clear_error(rates_file):
    config = Config.of(strategy="auto", nproc=2, device_memory="1KiB", rates=str(rates_file)).resolved()
    with pytest.raises(ConfigError, match="no strategy fits"):
        plan(config, datasets.load(SBM), 2, lambda line: None)


def test_a_bad_rates_file_names_the_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"compute": {}}')
    config = Config.of(strategy="auto", nproc=2, rates=str(bad)).resolved()
    with pytest.raises(ConfigError, match=f"config field 'rates' {bad}: not a rates file"):
        plan(config, datasets.load(SBM), 2, lambda line: None)


@pytest.mark.slow  # a planned run and its training
@pytest.mark.timeout(300)
def test_auto_trains_with_the_first_candidate_and_records_its_prediction(tmp_path, rates_file):
    metrics = tmp_path / "auto.jsonl"
    run = gnnmesh("train", "--dataset", SBM, "--nproc", "2", "--strategy", "auto", "--rates", str(rates_file),
                  "--epochs", "4", "--threads", "1", "--metrics", str(metrics))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    first = next(line for line in lines if line.strip().startswith("1  "))
    chosen = next(line for line in lines if line.startswith("choice: "))
    name = " ".join(first.split()[1:3]) if first.split()[1] in ("partition", "grid3d") else first.split()[1]
    assert chosen.startswith(f"choice: {name} (")
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert {r["candidate"] for r in records} == {name}
    assert all(r["predicted_epoch_time"] > 0 for r in records)
    single = tmp_path / "single.jsonl"
    alone = gnnmesh("train", "--dataset", SBM, "--epochs", "4", "--threads", "1", "--quiet", "--metrics", str(single))
    assert alone.returncode == 0, alone.stderr
    expected = [json.loads(line) for line in single.read_text().splitlines()]
    assert [r["candidate"] for r in expected] == ["single"] * 4
    assert [r["loss"] for r in records] == pytest.approx([r["loss"] for r in expected], rel=1e-5, abs=1e-6)


@pytest.mark.timeout(200)
def test_a_bad_rates_file_stops_every_rank_with_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    run = gnnmesh("train", "--dataset", SBM, "--nproc", "2", "--strategy", "auto", "--rates", str(bad),
                  "--epochs", "1", "--threads", "1")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith(f"gnnmesh: error: config field 'rates' {bad}")


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_the_offload_candidate_counts_what_its_run_counts(tmp_path):
    """With a memory limit, out-of-core training joins the ranking; its bytes between ranks,
    gradients and metrics are what a run with that budget counts."""
    graph = datasets.load(SBM)
    budget = RESIDENT + 2**21  # 2 MiB beside what any plan holds
    ranking = rank_strategies(graph, 2, "gcn", (12, 16, 3), GPU_RATES, GPU_NETWORK, partitioners=("rp",),
                              cache=False, memory_limit=budget, seed=0)
    found = [e for e in ranking.ranked if e.strategy == "offload rp"]
    assert found, ranking.dropped
    estimate = found[0]
    assert estimate.terms["host"] > 0 and max(estimate.peak_bytes) <= budget
    metrics = tmp_path / "offload.jsonl"
    run = gnnmesh("train", "--dataset", SBM, "--nproc", "2", "--strategy", "offload", "--partitioner", "rp",
                  "--device-memory", str(budget), "--epochs", "2", "--threads", "1", "--quiet",
                  "--metrics", str(metrics))
    assert run.returncode == 0, run.stderr
    for record in (json.loads(line) for line in metrics.read_text().splitlines()):
        assert record["candidate"] == "offload rp"
        assert record["offload_bytes"] == estimate.phase_bytes["offload"] > 0
        assert record["rank_offload_bytes"] == estimate.rank_phase_bytes["offload"]
        assert record["bytes_total"] == sum(estimate.phase_bytes.values())   # with gradients and metrics

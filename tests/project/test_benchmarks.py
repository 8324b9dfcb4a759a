"""Benchmarks that must keep running: their CPU dry runs, on small graphs."""

from pathlib import Path

import pytest

from tests.forked import run_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_the_gpu_benchmark_runs_dry_on_the_cpu(tmp_path):
    """benchmarks/gpu.py --device cpu: every table, every model, the same code as on a GPU."""
    done = run_script(BENCHMARKS / "gpu.py", "--device", "cpu", "--nodes", "3000", "--edges", "30000",
                      "--features", "32", "--epochs", "1", "--warmup", "1", "--repeats", "1", "--copy-mib", "8",
                      "--train-epochs", "2", timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for name in ("gcn", "sage", "gat", "gin", "decoupled gcn", "decoupled gat", "A x (forward)",
                 "A^T x (backward)", "in memory", "offload, ram store, overlap on",
                 "offload, ram store, overlap off"):
        assert any(line.startswith(f"| {name} |") for line in rows), (name, done.stdout)
    assert "GCNConv" in done.stdout and "GATConv" in done.stdout and "SAGEConv" in done.stdout


@pytest.mark.slow
def test_the_typed_graph_benchmark_runs_on_a_small_graph():
    """benchmarks/hetero.py: every case against PyG, the accuracy table and the memory table,
    on a 2,000-node graph."""
    done = run_script(BENCHMARKS / "hetero.py", "--nodes", "2000", "--features", "8", "--threads", "1",
                      "--rounds", "1", "--epochs", "1", "--accuracy-nodes", "800", "--accuracy-epochs", "2",
                      "--seeds", "1", "--ranks", "1,2", "--partitioner", "rp", timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for start in ("| rgcn | gnnmesh", "| rgcn | PyG RGCNConv", "| rgcn-sage | PyG HeteroConv of SAGEConv",
                  "| rgat | gnnmesh", "| rgat | PyG HeteroConv of GATConv", "| gcn |", "| 1 | 1 |", "| 2 | 1 |"):
        assert any(line.startswith(start) for line in rows), (start, done.stdout)
    accuracy = done.stdout.split("## Accuracy")[1].split("## Memory")[0]
    assert all(f"| {model} | " in accuracy for model in ("rgcn", "rgat", "gcn")), accuracy


def test_the_phase_clock_splits_a_training_epoch_by_phase():
    """benchmarks/phases.py: a GCN step's time falls in every phase it has, and the phases
    add up to the epoch."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("phases", BENCHMARKS / "phases.py")
    phases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(phases)

    from gnnmesh.config import Config
    from gnnmesh.train import Trainer
    from tests.helpers import random_graph

    trainer = Trainer(Config.of(model="gcn", hidden=16, layers=2, dropout=0.0), random_graph(n=200, e=1000))
    trainer.train_step()
    clock = phases.PhaseClock()
    with clock:
        trainer.train_step()
    figures = clock.figures()
    assert all(figures[p] > 0 for p in ("aggregate", "linear", "elementwise", "optimizer")), figures
    assert abs(sum(figures[p] for p in phases.PHASES) - figures["epoch"]) < 1e-9


@pytest.mark.slow
@pytest.mark.timeout(900)  # eight starts of gnnmesh, several ranks each: minutes on a busy machine
def test_the_pipeline_benchmark_measures_flat_peaks_and_projects_the_stages(tmp_path):
    """benchmarks/pipeline.py --flat-ranks and --scaling on small graphs, preprocessing only: a
    row per rank count with each rank's partitioning peak, a row per size with its stages, and
    the projected row."""
    done = run_script(BENCHMARKS / "pipeline.py", "--flat-ranks", "1,2", "--nodes-per-rank", "2000",
                      "--edges-per-rank", "10000", "--scaling", "20000,40000", "--ranks", "2", "--shards", "2",
                      "--features", "4", "--partitioner", "rp", "--no-train", "--project", "100000",
                      "--work", str(tmp_path / "work"), "--record", str(tmp_path / "runs.jsonl"), timeout=900)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for start in ("| 1 | 2,000 | 10,000 | ", "| 2 | 4,000 | 20,000 | ", "| 20,000 | ", "| 40,000 | ",
                  "| 100,000 (projected) | "):
        assert any(line.startswith(start) for line in rows), (start, done.stdout)
    flat = next(line for line in rows if line.startswith("| 2 | 4,000 "))
    assert len(flat.split("|")) == 7 and len(flat.split("|")[5].split(",")) == 2, flat  # a peak per rank
    # the two --scaling runs were recorded: fitted to the edges a rank holds, and extrapolated
    fitted = run_script(BENCHMARKS / "pipeline.py", "--fit", str(tmp_path / "runs.jsonl"), "--fit-to", "1000000:16")
    assert fitted.returncode == 0, fitted.stderr
    row = next(line for line in fitted.stdout.splitlines() if line.startswith("| partition (rp) | "))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert len(cells) == 7 and " x M" in cells[1] and float(cells[4].replace(",", "")) > 0, row
    assert not any(line.startswith("| shard |") for line in fitted.stdout.splitlines())  # one process: no share

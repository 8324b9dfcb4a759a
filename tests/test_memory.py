"""Every epoch reports each rank's peak memory, one process or many."""

import json
from pathlib import Path

import pytest

from gnnmesh import memory
from gnnmesh.config import Config
from gnnmesh.parallel.partition.strategy import PartitionParallel
from gnnmesh.parallel.tensor.strategy import TensorParallel
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.helpers import random_graph, layout


def check_fields(record: dict, ranks: int):
    peaks = record["rank_peak_rss_mib"]
    assert len(peaks) == ranks and all(p > 0 for p in peaks)
    assert record["peak_rss_mib_max"] == max(peaks) and record["peak_rss_mib_min"] == min(peaks)
    assert record["peak_rss_mib_sum"] >= record["peak_rss_mib_max"] >= record["peak_rss_mib_min"] > 0
    assert "rank_peak_device_mib" not in record  # CPU runs have no device figures


def run(metrics: Path, strategy=None, epochs=3):
    """The summary's memory figures and the metrics file's records (written by rank 0 only)."""
    summary = Trainer(Config.of(epochs=epochs, metrics=str(metrics)), random_graph(n=40, e=160), strategy).fit()
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else None
    return summary.memory, records


def test_one_process_reports_a_list_of_one(tmp_path):
    summary, records = run(tmp_path / "m.jsonl")
    assert len(records) == 3
    for record in records:
        check_fields(record, 1)
    assert summary == memory.of(records[-1])


def _rank_run(rank, world, folder):
    strategies = {"partition": PartitionParallel(layout("partition"), "cpu", method="contiguous"), "tensor": TensorParallel(layout("tensor"), "cpu")}
    return {name: run(Path(folder) / f"{name}.jsonl", strategy) for name, strategy in strategies.items()}


@pytest.mark.timeout(200)
def test_two_ranks_report_one_entry_per_rank(tmp_path):
    results = run_ranks(_rank_run, 2, str(tmp_path), timeout=180)
    for name in ("partition", "tensor"):
        summary, records = results[0][name]
        assert len(records) == 3, name
        for record in records:
            check_fields(record, 2)
        assert summary == memory.of(records[-1]) == results[1][name][0]  # every rank knows every figure


def test_progress_line():
    extra = memory.fields([{"rss": 812.3}, {"rss": 840.0}, {"rss": 820.0}, {"rss": 828.9}])
    assert memory.describe(extra) == "memory: peak 812-840 MiB per rank, 3,301 MiB in all"
    assert memory.describe(memory.fields([{"rss": 1500.4}])) == "memory: peak 1,500 MiB"
    both = memory.fields([{"rss": 100.0, "device": 2048.0}, {"rss": 110.0, "device": 1024.0}])
    assert both["rank_peak_device_mib"] == [2048.0, 1024.0] and both["peak_device_mib_sum"] == 3072.0
    assert memory.describe(both).endswith("; device peak 1,024-2,048 MiB per rank, 3,072 MiB in all")


def test_peak_rss_without_proc(monkeypatch):
    """Where /proc is missing the figure comes from getrusage, in MiB too."""
    proc = memory.peak_rss_mib()
    monkeypatch.setattr(memory, "_STATUS", "/nonexistent/status")
    assert 0.5 * proc < memory.peak_rss_mib() < 2 * proc + 64



def test_large_blocks_are_mapped_on_their_own(monkeypatch):
    """glibc's mallopt(M_MMAP_THRESHOLD, bytes): fixed, so that it no longer rises past the
    blocks a pass frees; nothing where the C library has no mallopt."""
    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: Libc())
    memory.map_large_blocks()
    memory.map_large_blocks(4 << 20)
    assert calls == [(-3, 1 << 20), (-3, 4 << 20)]

    def no_libc(name):
        raise OSError("no C library")
    monkeypatch.setattr(memory.ctypes, "CDLL", no_libc)
    memory.map_large_blocks()  # quietly nothing
    assert len(calls) == 2

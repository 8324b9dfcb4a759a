"""A preprocessing run stopped after a phase (``gnnmesh.parallel.partition.phases``) resumes
after the last phase every rank finished, skips the phases before, and writes the parts an
uninterrupted run writes; stale, damaged and foreign files in the work folder."""

import os
import re

import numpy as np
import pytest

from gnnmesh.datasets.sharded import open_shards
from gnnmesh.errors import ConfigError
from gnnmesh.parallel.partition.parts_from_shards import PHASES

from tests.dist import run_ranks
from tests.helpers import random_graph
from tests.parallel.partition.test_parts_from_shards import GRAPHS, same_parts, shard

RESUMED = re.compile(r"^resumed: +after phase (\d) of 4 \(([a-z-]+)\) of an earlier run, kept in (.+)$")


class Stopped(Exception):
    """What the tests raise where a run in this process stops."""


def write(source, out, method="rp", seed=0, stop_after=None, stop_rank=None, before=False) -> list:
    """The parts of ``source`` written into ``out`` on this process's ranks (one, or those of
    ``run_ranks``); returns the lines the run logged. ``stop_after``: the rank ``stop_rank``
    (default: every rank) stops once it has kept that phase (``before``: just before keeping
    it); in a rank of several it exits at once, as a killed process does."""
    from gnnmesh import comm
    from gnnmesh.parallel.partition import phases
    from gnnmesh.parallel.partition.parts_from_shards import write_parts_from_shards

    keep = phases.Phases._save

    def keep_then_stop(self, name, arrays):
        if not (before and name == stop_after):
            keep(self, name, arrays)
        if name == stop_after:
            if comm.world_size() > 1:
                others_kept(self, name)
                os._exit(9)
            raise Stopped(name)

    if stop_after is not None and stop_rank in (None, comm.setup_comm().rank):
        phases.Phases._save = keep_then_stop
    lines = []
    try:
        write_parts_from_shards(open_shards(source), out, method=method, epsilon=0.05, seed=seed, dataset="g",
                                log=lines.append)
    finally:
        phases.Phases._save = keep
    return lines


def others_kept(phases, name: str) -> None:
    """Wait until every other rank has kept phase ``name`` (whose collectives this rank has
    joined): the ranks that survive a loss are stopped when it is seen, wherever they are."""
    import time
    others = [phases.folder / f"rank-{r:05d}" / f"{name}.json" for r in range(phases.comm.world_size)
              if r != phases.comm.rank]
    deadline = time.monotonic() + 30
    while not all(p.is_file() for p in others) and time.monotonic() < deadline:
        time.sleep(0.01)


def write_on_ranks(rank, world, source, out, method, stop_after=None, stop_rank=None, before=False):
    return write(source, out, method, stop_after=stop_after, stop_rank=stop_rank, before=before)


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    return shard(random_graph(**GRAPHS["weighted"], seed=4), tmp_path_factory.mktemp("graph") / "shards")


@pytest.fixture(scope="module")
def reference(graph_dir, tmp_path_factory):
    """The parts of an uninterrupted run in this process, by seed."""
    folder = tmp_path_factory.mktemp("reference")
    for seed in (0, 1):
        assert write(graph_dir, folder / f"seed{seed}", seed=seed) == []
    return folder


def resumed_from(lines) -> str:
    assert len(lines) == 1, lines
    match = RESUMED.match(lines[0])
    assert match, lines
    assert PHASES[int(match[1]) - 1] == match[2]
    return match[2]


def stop(source, out, phase, **kwargs) -> None:
    with pytest.raises(Stopped):
        write(source, out, stop_after=phase, **kwargs)
    assert out.with_name(out.name + ".partial").is_dir() and not out.exists()


@pytest.mark.parametrize("phase", PHASES)
def test_a_run_stopped_after_a_phase_resumes_after_it_and_writes_the_same_parts(tmp_path, graph_dir, reference,
                                                                              phase, monkeypatch):
    from gnnmesh.parallel.partition import parts_from_shards
    out = tmp_path / "parts"
    stop(graph_dir, out, phase)
    done = PHASES[:PHASES.index(phase) + 1]
    skipped = {"rows": "_read_rows", "assignment": "_assign", "part-rows": "_my_rows", "part-nodes": "_my_nodes"}
    for name in done:  # the phases kept are not computed again
        monkeypatch.setattr(parts_from_shards, skipped[name], lambda *a, name=name: pytest.fail(f"{name} again"))
    lines = write(graph_dir, out)
    assert resumed_from(lines) == phase and lines[0].endswith(f"kept in {out}.partial")
    same_parts(out, reference / "seed0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]  # the work folder is gone


def test_phases_of_another_run_are_stale_and_replaced(tmp_path, graph_dir, reference):
    """Phases kept for seed 0 are not resumed by a run with seed 1 (nor another method)."""
    out = tmp_path / "parts"
    stop(graph_dir, out, "part-rows")
    stop(graph_dir, out, "rows", method="contiguous")  # replaces them with its own
    assert write(graph_dir, out, seed=1) == []
    same_parts(out, reference / "seed1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]


def flip(path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "a truncated array": ("part-rows.cols.npy", lambda p: p.write_bytes(p.read_bytes()[:-8])),
    "a changed byte": ("part-rows.cols.npy", flip),
    "a torn record": ("part-rows.json", lambda p: p.write_text(p.read_text()[:20])),
    "a removed array": ("part-rows.owned.npy", lambda p: p.unlink()),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_phase_is_named_and_computed_again(tmp_path, graph_dir, reference, damage):
    out = tmp_path / "parts"
    stop(graph_dir, out, "part-nodes")
    name, spoil = DAMAGE[damage]
    file = tmp_path / "parts.partial" / "rank-00000" / name
    spoil(file)
    with pytest.warns(UserWarning, match=re.escape(str(file))):
        lines = write(graph_dir, out)
    assert resumed_from(lines) == "assignment"  # the phase before the damaged one
    same_parts(out, reference / "seed0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]


def test_a_work_folder_holding_files_of_its_own_is_refused_and_kept(tmp_path, graph_dir):
    out = tmp_path / "parts"
    stop(graph_dir, out, "rows")
    mine = tmp_path / "parts.partial" / "notes.txt"
    mine.write_text("mine")
    with pytest.raises(ConfigError, match=r"parts.partial: holds notes.txt, which gnnmesh did not write there"):
        write(graph_dir, out)
    assert mine.read_text() == "mine" and not out.exists()
    assert (tmp_path / "parts.partial" / "rank-00000" / "rows.json").is_file()


# -- on several ranks ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lp_reference(graph_dir, tmp_path_factory):
    """lp on 2 ranks, uninterrupted."""
    out = tmp_path_factory.mktemp("lp") / "parts"
    assert run_ranks(write_on_ranks, 2, graph_dir, out, "lp", timeout=90) == [[], []]
    return out


@pytest.mark.parametrize("phase, before, resumed", [("assignment", False, "assignment"),
                                                    ("part-rows", True, "assignment")])
def test_a_killed_rank_resumes_after_the_last_phase_every_rank_kept(tmp_path, graph_dir, lp_reference, phase,
                                                                   before, resumed):
    """Rank 1 exits (os._exit) once it kept ``phase``, or just before it kept it while rank 0
    kept it: the next run resumes after the last phase both kept, and writes lp's parts."""
    out = tmp_path / "parts"
    with pytest.raises(RuntimeError, match="rank"):
        run_ranks(write_on_ranks, 2, graph_dir, out, "lp", phase, 1, before, timeout=90)
    assert not out.exists()
    kept = [(tmp_path / "parts.partial" / f"rank-{r:05d}" / f"{phase}.json").is_file() for r in (0, 1)]
    assert kept == [True, not before]
    lines = run_ranks(write_on_ranks, 2, graph_dir, out, "lp", timeout=90)
    assert resumed_from(lines[0]) == resumed and lines[1] == []  # rank 0 says it
    same_parts(out, lp_reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]


def test_phases_kept_for_another_rank_count_are_stale(tmp_path, graph_dir):
    out = tmp_path / "parts"
    with pytest.raises(RuntimeError, match="rank"):
        run_ranks(write_on_ranks, 2, graph_dir, out, "rp", "part-rows", 1, timeout=60)
    assert write(graph_dir, out) == []  # one process: no phase of the 2 ranks' is its own
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]
    assert np.array_equal(np.load(out / "rank-00000" / "owned.npy"), np.arange(41))


def test_an_output_that_may_not_be_replaced_is_refused_before_the_phases(tmp_path, graph_dir):
    out = tmp_path / "web"
    out.mkdir()
    (out / "index.html").write_text("mine")
    with pytest.raises(ConfigError, match="web: exists and is not a parts directory"):
        write(graph_dir, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web"]  # no phase was kept

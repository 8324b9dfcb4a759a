"""--rank-all: each held-out positive ranked against every node, filtered, ties counted half,
as a brute-force sort of every score; the same MRR on several ranks as on one; held-out pairs
scored a chunk at a time give the metrics one call gives; a Hits@K no ranking can miss refused."""

import numpy as np
import pytest
import torch

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.link import chunks, full_ranking, ranking
from gnnmesh.link.decoders import Dot
from gnnmesh.link.full_ranking import check_hits, filtered_ranks, known_cells
from gnnmesh.link.rows import RowDirectory
from gnnmesh.link.split import LinkSplit, fixed_negatives, split_edges
from gnnmesh.link.trainer import LinkTrainer

from tests.dist import run_ranks
from tests.helpers import random_graph

TWINS = 4  # isolated nodes with one feature row: equal embeddings, so their scores tie exactly


def twin_graph():
    graph = random_graph(n=60, e=240, features=6, classes=3, isolated=TWINS, directed=False)
    graph.x[-TWINS:] = graph.x[-TWINS]
    return graph


def twin_split(graph) -> LinkSplit:
    """The graph's edges split by fractions, each held-out split given two positives more
    whose destination (or source) is a twin: they tie with the other twins."""
    split = split_edges(graph, {"valid": 0.1, "test": 0.1}, 3, 7)
    n = graph.num_nodes
    extra = {"valid": torch.tensor([[0, 5], [n - 4, n - 3]]), "test": torch.tensor([[9, n - 2], [n - 1, 11]])}
    held = {}
    for i, name in enumerate(("valid", "test")):
        pairs = torch.cat([split.pairs(name), extra[name]], 1)
        held[name] = (pairs, fixed_negatives(pairs, n, 3, i, 7))
    return LinkSplit(split.graph, split.train, held["valid"][0], held["test"][0], held["valid"][1], held["test"][1])


def brute_force_ranks(scores: np.ndarray, pairs: np.ndarray, known: set) -> np.ndarray:
    """Every positive's filtered rank from the whole score matrix [n, n]: 1 + the candidates
    above it + half those equal to it, its source's known positives and itself left out."""
    out = []
    for s, d in pairs.T:
        candidates = [c for c in range(scores.shape[0]) if c != s and (s, c) not in known]
        row = scores[s, candidates]
        out.append(1 + (row > scores[s, d]).sum() + (row == scores[s, d]).sum() / 2)
    return np.array(out, dtype=float)


def known_set(split: LinkSplit) -> set:
    graph = split.graph
    edges = list(zip(graph.adj.indices.tolist(), graph.adj.row().tolist()))
    for pairs in (split.train, split.valid, split.test):
        edges += list(zip(*pairs.tolist()))
    known = set(edges)
    if not graph.directed:
        known |= {(d, s) for s, d in known}
    return known


@pytest.mark.parametrize("block", [1, 7, 1000])
def test_ranks_are_a_brute_force_sorts_with_ties_counted_half(monkeypatch, block):
    monkeypatch.setattr(ranking, "SMALLEST_BLOCK", 1)
    monkeypatch.setattr(ranking, "SCORES_AT_ONCE", block * 6)  # 6 queries below: blocks of `block` ids
    graph = random_graph(n=40, e=120, features=2, classes=2, directed=False)
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.integers(-1, 2, size=(40, 3)).astype(np.float32))  # small integers: many ties
    pairs = torch.tensor([[0, 3, 3, 17, 25, 39], [5, 8, 30, 2, 25, 1]])
    split = LinkSplit(graph, pairs[:, :0], pairs[:, :3], pairs[:, 3:], pairs[:, :0], pairs[:, :0])
    known = torch.cat([split.train, split.valid, split.test], 1)
    mask = ranking.KnownMask.of_cells(*known_cells(graph, known, pairs[0].numpy()))
    directory = RowDirectory(torch.arange(40), 40, None)
    got = filtered_ranks(Dot(3), z, directory, pairs, mask, 6, 40).numpy()
    want = brute_force_ranks((z @ z.T).numpy(), pairs.numpy(), known_set(split))
    assert np.array_equal(got, want)
    assert (got % 1 == 0.5).any(), "the test should hold ties"


@pytest.mark.parametrize("edges_at_once", [3, 1 << 22])
def test_known_cells_are_each_querys_known_positives_and_itself(monkeypatch, edges_at_once):
    monkeypatch.setattr(full_ranking, "EDGES_AT_ONCE", edges_at_once)
    graph = random_graph(n=20, e=50, features=2, classes=2, directed=True)
    extra = torch.tensor([[1, 4], [7, 1]])
    sources = np.array([4, 1, 4, 13])
    rows, cols = known_cells(graph, extra, sources)
    edges = set(zip(graph.adj.indices.tolist(), graph.adj.row().tolist())) | {(1, 7), (4, 1)}
    for i, s in enumerate(sources):
        want = {d for (a, d) in edges if a == s} | {int(s)}
        assert set(cols[rows == i].tolist()) == want
        assert len(cols[rows == i]) == len(want)


def config(**fields):
    return Config.of(**{"task": "link", "epochs": 2, "seed": 3, "hidden": 8, "eval_negatives": 7, "hits": "1,3",
                        "rank_all": True, "dropout": 0.0, **fields})


def test_trainers_held_out_metrics_rank_against_every_node():
    graph = twin_graph()
    split = twin_split(graph)
    trainer = LinkTrainer(config(), graph, split=split)
    trainer.fit()
    z = trainer.embeddings()
    assert torch.equal(z[-1], z[-TWINS])
    scores = (z.double() @ z.double().T).numpy()
    known = known_set(split)
    for at, name in ((1, "valid"), (2, "test")):
        r = brute_force_ranks(scores, split.pairs(name).numpy(), known)
        assert (r % 1 == 0.5).any(), "the twins should tie"
        got = trainer.metrics[at]
        assert got["mrr"] == pytest.approx((1 / r).mean(), abs=1e-12)
        assert got["hits@1"] == pytest.approx((r <= 1).mean()) and got["hits@3"] == pytest.approx((r <= 3).mean())
    without = LinkTrainer(config(rank_all=False), graph, split=split)
    without.fit()
    assert without.metrics[1]["mrr"] != trainer.metrics[1]["mrr"]
    assert without.metrics[1]["auc"] == trainer.metrics[1]["auc"]  # AUC and AP still read the sampled negatives


def plain_split():
    """A graph without twins: its nodes' embeddings differ, so its scores are apart."""
    graph = random_graph(n=60, e=240, features=6, classes=3, isolated=0, directed=False)
    return graph, split_edges(graph, {"valid": 0.1, "test": 0.1}, 3, 7)


def _history(rank, world, fields, rows_at_once):
    if rows_at_once:
        chunks.ROWS_AT_ONCE = rows_at_once
    graph, split = plain_split()
    trainer = LinkTrainer(config(**fields, epochs=3, nproc=world), graph, split=split)
    last = trainer.fit().history[-1].extra
    z = trainer.embeddings() if world == 1 else None
    return {k: last[k] for k in sorted(last) if k.split("_", 1)[0] in ("train", "val", "test")}, z


def closest_comparisons(z: torch.Tensor, split: LinkSplit) -> float:
    """The smallest gap between two held-out scores a metric compares (each positive with every
    node's, with every sampled negative's and with the other positives'), identical pairs
    left out: another
    strategy rounds each score differently, by about 1e-7, so a gap that small would let
    the metrics move without any score being wrong (``gnnmesh.link.metrics``)."""
    scores = (z.double() @ z.double().T).numpy()
    gaps = []
    for name in ("valid", "test"):
        pairs, negatives = split.pairs(name).numpy(), split.negatives(name).numpy()
        positive = scores[pairs[0], pairs[1]]
        sampled = scores[pairs[0][:, None], negatives]
        by_node = np.abs(scores[pairs[0]] - positive[:, None])
        by_node[np.arange(len(positive)), pairs[1]] = np.inf
        gaps.append(by_node.min())
        apart = np.abs(positive[:, None] - sampled.reshape(-1)[None, :])
        same = (pairs[0][:, None] == np.repeat(pairs[0], negatives.shape[1])[None, :]) & \
            (pairs[1][:, None] == negatives.reshape(-1)[None, :])
        gaps.append(apart[~same].min())
        gaps.append(np.diff(np.sort(positive)).min())  # AP's thresholds
    return min(gaps)


@pytest.mark.timeout(220)
@pytest.mark.parametrize("strategy,world,fields", [
    ("partition", 3, {"strategy": "partition", "partitioner": "rp"}),
    pytest.param("tensor", 2, {"strategy": "tensor"}, marks=pytest.mark.slow)])
def test_rank_all_on_several_ranks_equals_the_single_process(strategy, world, fields):
    """Every metric of the trained model to 1e-5; the partition ranks also score their held-out
    pairs 9 rows (one pair and its 7 negatives) at a time, a different count of pairs each.
    The graph's scores lie apart (checked), so no metric may move by a rounding; ties across
    ties are the twins' test above (one process) and the brute-force sort's."""
    want, z = _history(0, 1, {}, None)
    assert closest_comparisons(z, plain_split()[1]) > 1e-6, "the graph's scores should lie apart"
    for rank, (got, _) in enumerate(run_ranks(_history, world, fields, 9 if strategy == "partition" else None,
                                              timeout=200)):
        assert got.keys() == want.keys() and "val_mrr" in got
        assert np.allclose(list(got.values()), list(want.values()), rtol=0, atol=1e-5, equal_nan=True), \
            f"{strategy} x{world}, rank {rank}: {got} != {want}"


def test_chunks_of_pairs_give_the_metrics_of_one_call(monkeypatch):
    graph = twin_graph()
    split = twin_split(graph)
    whole = LinkTrainer(config(rank_all=False), graph, split=split)
    whole.fit()
    monkeypatch.setattr(chunks, "ROWS_AT_ONCE", 20)  # two pairs with their 7 negatives at a time
    parts = LinkTrainer(config(rank_all=False), graph, split=split)
    parts.fit()
    assert parts.metrics == whole.metrics
    assert len(chunks.pair_chunks(torch.arange(5), torch.tensor([0, 1, 1, 1, 1, 1]), 9)) == 3


def test_hits_no_ranking_can_miss_is_one_error():
    check_hits((1, 59), 60)
    with pytest.raises(ConfigError, match=r"config field 'hits': Hits@60 with --rank-all .* 60 nodes"):
        check_hits((1, 60), 60)
    graph = twin_graph()
    with pytest.raises(ConfigError, match="Hits@100 with --rank-all"):
        LinkTrainer(config(hits="10,100"), graph)
    with pytest.raises(ConfigError, match="'rank_all' applies to --task link"):
        Config.of(rank_all=True)

"""Link prediction on a typed graph's relations (``--link-relation``): the held-out edges leave
the graph under their relation and its reverse alone, negatives stay in the relation's end
types, DistMult scores each pair with its relation's diagonal; partition (3 ranks), tensor,
offload and grid3d runs equal the single process (losses, parameters, metrics); checkpoints record the relations
and predict scores and ranks a chosen one; bad input is one line."""

import functools

import numpy as np
import pytest
import torch

from gnnmesh.config import Config
from gnnmesh.datasets import load
from gnnmesh.errors import ConfigError
from gnnmesh.link import typed
from gnnmesh.link.trainer import LinkTrainer
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.forked import run_cli
from tests.helpers import random_graph
from tests.parity import assert_same_run

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)

SPEC = "igbh-synth:papers=60,authors=40,institutes=5,fos=8,features=4,features_on=all"
CITES, WRITES = "paper__cites__paper", "paper__written_by__author"


def graph():
    return load(SPEC)


def config(**fields) -> Config:
    return Config.of(**{"task": "link", "model": "rgcn", "hidden": 8, "epochs": 4, "seed": 1, "decoder": "distmult",
                        "link_relation": "cites,written_by", "eval_negatives": 7, "hits": "1,3",
                        "link_split": "valid=0.1,test=0.1", **fields})


def with_edge_features(g):
    return g.replace(adj=g.adj.with_edge_features(torch.ones(g.adj.nnz, 2)))


def pairs_of(g, name):
    src, dst = typed.relation_pairs(g, name)
    return set(zip(src.tolist(), dst.tolist()))


def test_the_held_out_edges_leave_the_graph_under_their_relation_and_its_reverse_alone():
    g = graph()
    split = LinkTrainer(config(disjoint_train=0.2), g).split
    kept = split.graph
    assert split.relations == (CITES, WRITES)
    for i, name in enumerate(split.relations):
        twin = typed.twin_of(name, g.adj.relations.names)
        held = [tuple(p) for k in ("valid", "test")
                for p in split.pairs(k)[:, getattr(split, f"{k}_relation") == i].t().tolist()]
        train = [tuple(p) for p in split.train[:, split.train_relation == i].t().tolist()]
        assert held and not set(held) & pairs_of(kept, name)
        assert not {(v, u) for u, v in held} & pairs_of(kept, twin)
        assert pairs_of(kept, name) < set(train)  # the training edges, less --disjoint-train's share
        assert len(held) + len(train) == len({p for p in pairs_of(g, name) if p[0] != p[1]})
    for name in ("author__affiliated_to__institute", "paper__topic__fos"):  # relations not chosen: untouched
        assert pairs_of(kept, name) == pairs_of(g, name)
    assert "relation_edges" not in kept.meta and "node_types" in kept.meta


def test_negatives_are_drawn_among_the_relations_end_types():
    g = graph()
    trainer = LinkTrainer(config(corrupt="both", negatives=5), g)
    trainer.epoch = 1
    split, types = trainer.split, g.meta["node_types"]
    ids = {name: types.ids(name) for name in types.names}
    ends = {0: ("paper", "paper"), 1: ("paper", "author")}

    def inside(nodes, kind):
        return bool(((nodes >= ids[kind].start) & (nodes < ids[kind].stop)).all())

    for k in ("valid", "test"):
        rel = split.relation_of(k, torch.arange(split.pairs(k).shape[1]))
        for i, (_, dst) in ends.items():
            assert inside(split.negatives(k)[rel == i], dst)
    positives = torch.arange(split.train.shape[1])
    m, n = len(positives), 5
    src, dst, neg_src, neg_dst = trainer.train_ends(positives).split([m, m, m * n, m * n])
    rel = split.train_relation.repeat_interleave(n)
    for i, (s, d) in ends.items():
        assert inside(neg_src[rel == i], s) and inside(neg_dst[rel == i], d)
    assert not inside(neg_dst[rel == 1], "paper")  # an author is never drawn among papers, nor the reverse


def test_distmult_scores_a_pair_with_its_relations_diagonal():
    trainer = LinkTrainer(config(epochs=1), graph())
    trainer.fit()
    with torch.no_grad():
        trainer.decoder.relations[1].mul_(-3.0)
    pairs = np.array([[0, 70], [5, 61], [59, 99]])  # papers and authors
    z = trainer.embeddings()
    for name, i in ((WRITES, 1), ("written_by", 1)):
        places, scores = trainer.score_pairs(pairs, name)
        want = (z[pairs[:, 0]] * trainer.decoder.relations[i] * z[pairs[:, 1]]).sum(-1)
        assert np.allclose(scores, want.detach().numpy(), atol=1e-6)
    cites = trainer.score_pairs(np.array([[0, 1]]), "cites")[1]
    assert np.allclose(cites, (z[0] * trainer.decoder.relations[0] * z[1]).sum().item(), atol=1e-6)


def train(**fields) -> dict:
    trainer = LinkTrainer(config(**fields), graph())
    summary = trainer.fit()
    names = [k for k in summary.history[0].extra if k.split("_", 1)[0] in ("train", "val", "test")]
    params = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    params.update({f"decoder.{k}": v.detach().clone() for k, v in trainer.decoder.state_dict().items()})
    return {"losses": [r.loss for r in summary.history], "params": params,
            "metrics": {k: [r.extra[k] for r in summary.history] for k in names}}


VARIANTS = {"rgcn": {}, "rgat-bpr-both": {"model": "rgat", "heads": 2, "link_loss": "bpr", "corrupt": "both",
                                          "negatives": 2, "edge_batch_size": 150, "link_relation": "all"}}
RUNS = {"partition": {"strategy": "partition", "partitioner": "rp"}, "tensor": {"strategy": "tensor"},
        "offload": {"strategy": "offload", "chunks": "2"}, "grid3d": {"strategy": "grid3d", "grid": "1,1,2"}}


def _rank_runs(rank, world, strategy, variants):
    return {v: train(**RUNS[strategy], **VARIANTS[v], nproc=world) for v in variants}


@functools.lru_cache(maxsize=None)
def _single(variant: str) -> dict:
    """The single process's run of a variant, once per module: every strategy compares with it."""
    return train(**VARIANTS[variant])


# Rank statistics of the scores: two candidates whose scores agree to rounding (the ranks sum in
# another order) may swap, which moves AUC by one pair's share of the split (about 4e-5 here)
RANKED, RANK_TOLERANCE = ("auc", "ap", "mrr", "hits"), 1e-4


def check(strategy, world, variants, timeout):
    """Losses, parameters (the decoder's diagonals too) and every metric, to 1e-5."""
    want = {v: _single(v) for v in variants}
    for rank, runs in enumerate(run_ranks(_rank_runs, world, strategy, variants, timeout=timeout)):
        for v, got in runs.items():
            try:
                assert_same_run(got, want[v])
                for name, values in want[v]["metrics"].items():
                    tol = RANK_TOLERANCE if name.split("_", 1)[-1].startswith(RANKED) else 1e-5
                    assert np.allclose(got["metrics"][name], values, rtol=0, atol=tol, equal_nan=True), \
                        f"{name}: {got['metrics'][name]} != {values}"
            except AssertionError as err:
                raise AssertionError(f"{strategy} x{world}, {v}, rank {rank}: {err}") from None


@pytest.mark.timeout(200)
def test_partition_on_three_ranks_equals_the_single_process():
    check("partition", 3, ["rgcn"], timeout=180)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rgat_under_partition_and_both_under_tensor_equal_the_single_process():
    check("partition", 3, ["rgat-bpr-both"], timeout=250)
    check("tensor", 2, list(VARIANTS), timeout=250)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_offload_on_two_ranks_equals_the_single_process():
    """Out of core, in two passes a step (the loss's gradient carried into the encoder chunk by chunk)."""
    check("offload", 2, ["rgcn"], timeout=250)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_grid3d_on_two_ranks_equals_the_single_process():
    check("grid3d", 2, ["rgcn"], timeout=250)


def test_a_checkpoint_records_the_relations_and_predict_scores_and_ranks_a_chosen_one(tmp_path):
    path = str(tmp_path / "typed.pt")
    trainer = LinkTrainer(config(link_relation="all", epochs=2, checkpoint=path), graph())
    trainer.fit()
    names = trainer.split.relations
    assert len(names) == 4 and not any("__rev_" in name for name in names)
    loaded = Trainer.from_checkpoint(path, graph(), weights="last")
    assert loaded.config.link.link_relation == ",".join(names) and loaded.split.relations == names
    assert torch.equal(loaded.decoder.relations, trainer.decoder.state_dict()["relations"])
    pairs = np.array([[0, 60], [3, 75]])
    assert np.allclose(loaded.score_pairs(pairs, "written_by")[1], trainer.score_pairs(pairs, "written_by")[1])
    queries, candidates, scores = loaded.top_k(3, [0, 7], exclude_known=True, relation="topic")
    fos = graph().meta["node_types"].ids("fos")
    assert list(queries) == [0, 7] and ((candidates >= fos.start) & (candidates < fos.stop)).all()
    assert (np.diff(scores, axis=1) <= 0).all()
    known = typed.known_positives(loaded.split, names.index("paper__topic__fos"))
    for q, row in zip(queries, candidates):
        assert not set(row) & set(known[1][known[0][q]:known[0][q + 1]].tolist())
    from gnnmesh.export import export_pyg
    with pytest.raises(ConfigError, match="a link model of a typed graph's relations .* is not exported"):
        export_pyg(path, tmp_path / "pyg")
    with pytest.raises(ConfigError, match="scores 4 relations .*choose one"):
        loaded.score_pairs(pairs)
    with pytest.raises(ConfigError, match=r"pair 1 \(3, 75\) does not join relation paper__topic__fos"):
        loaded.score_pairs(np.array([[3, 106], [3, 75]]), "topic")
    with pytest.raises(ConfigError, match="node 70 is not of relation paper__topic__fos's source type"):
        loaded.top_k(3, [0, 70], relation="topic")


def _predicted(rank, world, path, fields):
    """(pairs' places, their scores, top-K queries, candidates, scores) of this rank's share."""
    loaded = Trainer.from_checkpoint(path, graph(), Config.of(nproc=world, **fields))
    places, scores = loaded.score_pairs(np.array([[0, 60], [3, 75], [59, 99], [20, 61]]), "written_by")
    return (places, scores, *loaded.top_k(4, None, exclude_known=True, relation="written_by"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_predict_of_a_chosen_relation_under_partition_equals_the_single_process(tmp_path):
    path = str(tmp_path / "c.pt")
    LinkTrainer(config(epochs=2, checkpoint=path), graph()).fit()
    want = _predicted(0, 1, path, {})
    parts = run_ranks(_predicted, 3, path, {"strategy": "partition", "partitioner": "rp"}, timeout=250)
    places = np.concatenate([p[0] for p in parts])
    scores = np.concatenate([p[1] for p in parts])
    assert sorted(places) == list(want[0]) and np.allclose(scores[np.argsort(places)], want[1], atol=1e-5)
    queries = np.concatenate([p[2] for p in parts])
    order = np.argsort(queries)
    assert list(queries[order]) == list(want[2]) == list(range(60))  # every paper
    assert np.array_equal(np.concatenate([p[3] for p in parts])[order], want[3])
    assert np.allclose(np.concatenate([p[4] for p in parts])[order], want[4], atol=1e-5)


def test_predict_on_the_command_line_scores_the_chosen_relation(tmp_path):
    path = tmp_path / "c.pt"
    common = ["--dataset", SPEC, "--quiet"]
    trained = run_cli(*["train", "--task", "link", "--model", "rgcn", "--hidden", "8", "--epochs", "2",
                       "--decoder", "distmult", "--link-relation", "cites", "--link-relation", "written_by",
                        "--checkpoint", str(path),
                       *common], cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    (tmp_path / "pairs.csv").write_text("0,61\n4,99\n")
    out = run_cli(*["predict", "--checkpoint", str(path), "--out", str(tmp_path / "p"), "--pairs",
                   str(tmp_path / "pairs.csv"), "--link-relation", "written_by", *common], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    from gnnmesh.predict import read
    got = read(str(tmp_path / "p"))
    assert got.manifest["relation"] == WRITES and len(got.values) == 2
    refused = run_cli(*["predict", "--checkpoint", str(path), "--out", str(tmp_path / "q"), "--pairs",
                       str(tmp_path / "pairs.csv"), *common], cwd=tmp_path)
    assert refused.returncode == 2 and "scores 2 relations" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("fields,graph_of,message", [
    ({"link_relation": "likes"}, graph, r"no relation 'likes'; the graph has paper__cites__paper, .*fos__rev_topic"),
    ({"link_relation": "cites"}, lambda: random_graph(n=30, e=90, features=4),
     "'random' is not a typed graph .*leave --link-relation out"),
    ({"link_relation": "affiliated_to", "link_split": "valid=0.01,test=0.01"}, graph,
     "relation author__affiliated_to__institute has 40 edges, too few to hold out valid=0.01,test=0.01"),
    ({"link_relation": "cites,rev_cites"}, graph, "paper__cites__paper and paper__rev_cites__paper are one relation"),
    ({"link_relation": "cites", "rank_all": True}, graph, "--rank-all ranks against every node"),
    ({"link_relation": "cites", "minibatch": True}, graph, "--minibatch samples one operator for a link step"),
    ({"link_relation": "cites"}, lambda: with_edge_features(graph()), "carries edge features, each entry's the sum"),
])
def test_bad_input_is_refused_in_one_line(fields, graph_of, message):
    with pytest.raises(ConfigError, match=message) as err:
        LinkTrainer(config(**fields), graph_of())
    assert "\n" not in str(err.value) and "link_relation" in str(err.value)


def test_a_directory_of_pairs_is_refused_in_one_line(tmp_path):
    for name in ("train.csv", "valid.csv", "test.csv"):
        (tmp_path / name).write_text("0,1\n")
    with pytest.raises(ConfigError, match=r"'link_relation': --link-split .* is a directory of pairs, which name no"):
        LinkTrainer(config(link_split=str(tmp_path)), graph())


def test_the_command_line_refuses_an_unknown_relation_with_status_2(tmp_path):
    got = run_cli(*["train", "--task", "link", "--model", "rgcn", "--dataset", SPEC, "--link-relation", "likes",
                   "--epochs", "1"], cwd=tmp_path)
    assert got.returncode == 2 and "no relation 'likes'; the graph has paper__cites__paper" in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1

"""A trained link model in use: ``Trainer.from_checkpoint`` of a link checkpoint, the scores of
given pairs and each node's top-K candidates, written sharded and read back; under the
partition and tensor strategies on real gloo ranks they equal the single process's (ids
identical, scores to 1e-5)."""

import numpy as np
import pytest
import torch

from gnnmesh import comm
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.link.ranking import known_positives
from gnnmesh.link.trainer import LinkTrainer
from gnnmesh.predict import read, write
from gnnmesh.predict.run import Request, _pair_prediction
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.helpers import random_graph

DECODERS = ("dot", "mlp")


def link_graph():
    """60 nodes, directed, three isolated (whose embeddings tie: their order is by id)."""
    return random_graph(n=60, e=240, features=6, classes=3, isolated=3)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A checkpoint per decoder (trained on one process), a pairs file and a queries file."""
    root = tmp_path_factory.mktemp("link")
    paths = {}
    for decoder in DECODERS:
        paths[decoder] = str(root / f"{decoder}.pt")
        config = Config.of(task="link", epochs=4, seed=3, hidden=8, eval_negatives=7, hits="1,3", decoder=decoder,
                           link_split="valid=0.1,test=0.1", checkpoint=paths[decoder])
        LinkTrainer(config, link_graph()).fit()
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 60, size=(150, 2))
    pairs[7] = pairs[3]  # a pair twice
    pairs[9] = [5, 5]    # a node with itself
    lines = ["source,destination"] + [f"{a},{b}" if i % 2 else f"{a} {b}" for i, (a, b) in enumerate(pairs)]
    (root / "pairs.csv").write_text("\n".join(lines) + "\n")
    (root / "queries.txt").write_text("59\n0\n17\n58\n33\n")
    paths.update(pairs=str(root / "pairs.csv"), queries=str(root / "queries.txt"), root=str(root))
    return paths


def requests(paths: dict, decoder: str) -> dict:
    ckpt = paths[decoder]
    return {"pairs": Request(ckpt, "", pairs=paths["pairs"]),
            "top": Request(ckpt, "", top_k=60),  # every node ranked: the isolated ones tie
            "top-known": Request(ckpt, "", top_k=6, queries=paths["queries"], exclude_known=True)}


def predict_all(paths: dict, config: Config, out: str) -> None:
    """Every request of every decoder written under ``out`` (every rank writes its part)."""
    graph = link_graph()
    for decoder in DECODERS:
        trainer = Trainer.from_checkpoint(paths[decoder], graph, config)
        job = comm.setup_comm() if trainer.strategy.world_size > 1 else None
        for name, request in requests(paths, decoder).items():
            ids, values, extra, info, _ = _pair_prediction(trainer, request, graph.num_nodes)
            info["graph"] = {"nodes": graph.num_nodes}
            write(f"{out}/{decoder}-{name}", ids, values, info, comm=job, extra=extra)


def _rank_predict(rank, world, paths, settings, out):
    predict_all(paths, Config.of(**settings), out)


@pytest.fixture(scope="module")
def reference(files):
    out = f"{files['root']}/single"
    predict_all(files, Config(), out)
    return out


def assert_same(got_dir: str, want_dir: str) -> None:
    for decoder in DECODERS:
        for name in ("pairs", "top", "top-known"):
            got, want = read(f"{got_dir}/{decoder}-{name}"), read(f"{want_dir}/{decoder}-{name}")
            where = f"{decoder} {name}"
            assert np.array_equal(got.ids, want.ids), where
            assert got.extra.keys() == want.extra.keys() and got.extra, where
            for key in want.extra:
                assert np.array_equal(got.extra[key], want.extra[key]), f"{where}: {key}"
            np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-5, err_msg=where)


def test_a_link_checkpoint_loads_as_a_link_trainer_with_its_decoder_and_split(files):
    graph = link_graph()
    trainer = Trainer.from_checkpoint(files["mlp"], graph)
    assert isinstance(trainer, LinkTrainer) and trainer.config.link.decoder == "mlp"
    assert trainer.config.link.link_split == "valid=0.1,test=0.1"
    state = torch.load(files["mlp"], weights_only=False)
    for key, value in state["decoder"]["best"].items():
        assert torch.equal(trainer.decoder.state_dict()[key], value)
    last = Trainer.from_checkpoint(files["mlp"], graph, weights="last")
    for key, value in state["decoder"]["last"].items():
        assert torch.equal(last.decoder.state_dict()[key], value)
    fresh = LinkTrainer(Config.of(task="link", seed=3, hidden=8, eval_negatives=7, link_split="valid=0.1,test=0.1"),
                        graph)
    assert torch.equal(trainer.split.train, fresh.split.train)  # the same training edges as the run's
    assert trainer.split.graph.adj.nnz == fresh.split.graph.adj.nnz < graph.adj.nnz


def test_a_link_model_predicts_embeddings_and_no_labels(files):
    trainer = Trainer.from_checkpoint(files["dot"], link_graph())
    ids, z = trainer.predict("embeddings")
    assert np.array_equal(ids, np.arange(60)) and z.shape == (60, 8)
    np.testing.assert_array_equal(z, trainer.embeddings().numpy())
    for what in ("logits", "probs", "labels"):
        with pytest.raises(ConfigError, match=f"--output {what}: a link model predicts no node {what}"):
            trainer.predict(what)


def brute_force(trainer, queries, k, exclude_known):
    """Every query's scores with every node, all at once, ordered by (score desc, id asc)."""
    z = trainer.embeddings()
    n = len(z)
    known = known_positives(trainer.split.graph, trainer.split.train) if exclude_known else None
    want_ids, want_scores = [], []
    for q in queries:
        with torch.no_grad():
            scores = trainer.decoder(z[q].expand(n, -1), z).numpy().astype(np.float64)
        if known is not None:
            scores[known[1][known[0][q]:known[0][q + 1]]] = -np.inf
            scores[q] = -np.inf
        order = np.lexsort((np.arange(n), -scores))[:k]
        want_ids.append(order)
        want_scores.append(scores[order])
    return np.array(want_ids), np.array(want_scores)


@pytest.mark.parametrize("decoder", DECODERS)
def test_top_k_is_every_pairs_ranking_cut_at_k_ties_by_id(files, decoder, monkeypatch):
    from gnnmesh.link import ranking
    monkeypatch.setattr(ranking, "SMALLEST_BLOCK", 7)   # many blocks: the running top K is exercised
    monkeypatch.setattr(ranking, "SCORES_AT_ONCE", 7 * 60)
    trainer = Trainer.from_checkpoint(files[decoder], link_graph())
    for k, exclude in ((60, False), (9, True)):  # all 60: the isolated nodes' equal scores among them
        queries, ids, scores = trainer.top_k(k, exclude_known=exclude)
        assert np.array_equal(queries, np.arange(60))
        want_ids, want_scores = brute_force(trainer, queries, k, exclude)
        np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-6)
        assert np.array_equal(ids, want_ids)
    isolated = [q for q in range(60) if trainer.split.graph.adj.indptr[q + 1] == trainer.split.graph.adj.indptr[q]]
    assert len(isolated) >= 3


def test_pair_scores_are_the_decoders_in_the_files_order(files, reference):
    got = read(f"{reference}/dot-pairs")
    trainer = Trainer.from_checkpoint(files["dot"], link_graph())
    z = trainer.embeddings()
    pairs = got.extra["pairs"]
    assert np.array_equal(got.ids, np.arange(150)) and got.manifest["index"] == "pairs"
    np.testing.assert_allclose(got.values, (z[pairs[:, 0]] * z[pairs[:, 1]]).sum(1).numpy(), rtol=0, atol=1e-6)
    assert got.values[7] == got.values[3]


def test_top_k_larger_than_the_candidates_is_refused(files):
    trainer = Trainer.from_checkpoint(files["dot"], link_graph())
    with pytest.raises(ConfigError, match="--top-k 61 is more than the candidates: the graph has 60 nodes"):
        trainer.top_k(61)
    with pytest.raises(ConfigError, match="--top-k 59 is more than the candidates: with --exclude-known, node"):
        trainer.top_k(59, exclude_known=True)


@pytest.mark.timeout(150)
def test_three_partition_ranks_predict_the_single_process(files, reference, tmp_path):
    run_ranks(_rank_predict, 3, files, {"strategy": "partition", "partitioner": "rp"}, str(tmp_path), timeout=120)
    assert_same(str(tmp_path), reference)
    assert len(read(f"{tmp_path}/dot-top").manifest["shards"]) == 3


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_tensor_ranks_predict_the_single_process(files, reference, tmp_path):
    run_ranks(_rank_predict, 2, files, {"strategy": "tensor"}, str(tmp_path), timeout=180)
    assert_same(str(tmp_path), reference)

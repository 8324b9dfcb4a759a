"""A link model on a renumbered graph (``--reorder``): pairs, top-K lists and embeddings are
taken and given in the user's ids and equal the run without renumbering (ids identical, scores
to 1e-5), ties among candidates going to the lower original id."""

import numpy as np
import pytest
import torch

from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.link.ranking import known_positives
from gnnmesh.link.renumber import inverse, known_in_user_ids, renumbered, user_graph
from gnnmesh.link.sources import load_split
from gnnmesh.link.trainer import LinkTrainer
from gnnmesh.predict import read
from gnnmesh.train import Trainer
from gnnmesh.transforms import ORDERS, permute

from tests.helpers import random_graph, same_graph

SBM = "sbm:nodes=150,classes=3,features=8,seed=6"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("renumbered-link")
    path = root / "link.pt"
    LinkTrainer(Config.of(dataset=SBM, task="link", decoder="mlp", epochs=3, hidden=8, link_split="valid=0.1,test=0.2",
                          checkpoint=str(path)), datasets.load(SBM)).fit()
    rng = np.random.default_rng(2)
    (root / "pairs.csv").write_text("".join(f"{a},{b}\n" for a, b in rng.integers(0, 150, size=(60, 2))))
    (root / "queries.txt").write_text("149\n0\n77\n3\n")
    return {"root": root, "checkpoint": path}


def predicted(files, reorder: str, name: str, *args):
    out = files["root"] / f"{reorder}-{name}"
    assert main(["predict", "--checkpoint", str(files["checkpoint"]), "--dataset", SBM, "--reorder", reorder,
                 *map(str, args), "--out", str(out)]) == 0
    return read(out)


REQUESTS = {"pairs": lambda f: ["--pairs", f["root"] / "pairs.csv"],
            "top": lambda f: ["--top-k", 7],
            "top-known": lambda f: ["--top-k", 5, "--queries", f["root"] / "queries.txt", "--exclude-known"],
            "embeddings": lambda f: ["--output", "embeddings"]}


@pytest.mark.parametrize("reorder", tuple(ORDERS))
def test_the_command_under_reorder_equals_the_graph_as_loaded(files, reorder, capsys):
    order = ORDERS[reorder](datasets.load(SBM))
    assert not np.array_equal(order, np.arange(len(order)))  # a renumbering: a wrong mapping would show
    for name, args in REQUESTS.items():
        want, got = predicted(files, "none", name, *args(files)), predicted(files, reorder, name, *args(files))
        at = np.argsort(got.ids, kind="stable")
        assert np.array_equal(got.ids[at], want.ids), (reorder, name)
        for key in want.extra:
            assert np.array_equal(got.extra[key][at], want.extra[key]), (reorder, name, key)
        np.testing.assert_allclose(got.values[at], want.values, rtol=0, atol=1e-5, err_msg=f"{reorder} {name}")
    capsys.readouterr()


def test_ties_go_to_the_lower_original_id(tmp_path):
    """Isolated nodes' embeddings tie: every candidate list orders them by the user's ids."""
    graph = random_graph(n=40, e=160, features=5, isolated=4)
    path = tmp_path / "link.pt"
    LinkTrainer(Config.of(task="link", epochs=2, hidden=6, seed=1, checkpoint=str(path)), graph).fit()
    want = Trainer.from_checkpoint(path, graph).top_k(40, exclude_known=False)
    order = np.random.default_rng(0).permutation(40)
    trainer = Trainer.from_checkpoint(path, permute(graph, order), original=order)
    got = trainer.top_k(40, exclude_known=False)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2], want[2], rtol=0, atol=1e-5)
    pairs = np.array([[0, 39], [38, 1], [5, 5]])
    np.testing.assert_allclose(trainer.score_pairs(pairs)[1], Trainer.from_checkpoint(path, graph).score_pairs(pairs)[1],
                               rtol=0, atol=1e-5)


def test_the_split_and_known_positives_carried_to_the_renumbered_graph():
    graph = random_graph(n=30, e=120, features=4, directed=False)
    order = np.random.default_rng(3).permutation(30)
    renamed = permute(graph, order)
    same_graph(user_graph(renamed, order), graph)
    split = load_split(graph, "valid=0.2,test=0.2", 0, 3)
    moved = renumbered(split, order)
    node = torch.from_numpy(inverse(order))
    assert torch.equal(moved.valid, node[split.valid]) and torch.equal(moved.test_negatives, node[split.test_negatives])
    same_graph(moved.graph, permute(split.graph, order))
    indptr, dst = known_in_user_ids(known_positives(moved.graph, moved.train), order)
    want_indptr, want_dst = known_positives(split.graph, split.train)
    assert np.array_equal(indptr, want_indptr) and np.array_equal(dst, want_dst)


def test_training_under_reorder_draws_the_split_of_the_graph_as_loaded(monkeypatch, reorder="degree"):
    """The split a --reorder run trains on is the one predict draws again, whatever it renumbers."""
    from gnnmesh.train.run import run_training
    seen = {}
    fit = LinkTrainer.fit

    def watched(self, *args, **kwargs):
        seen.update(split=self.split, original=self.original)
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(LinkTrainer, "fit", watched)
    run_training(Config.of(dataset=SBM, task="link", reorder=reorder, epochs=1, hidden=4, link_split="valid=0.1,test=0.2"),
                 quiet=True)
    want = load_split(datasets.load(SBM), "valid=0.1,test=0.2", 0, Config().link.eval_negatives)
    original = torch.from_numpy(seen["original"])
    assert not torch.equal(original, torch.arange(len(original)))
    for name in ("train", "valid", "test"):
        assert torch.equal(original[seen["split"].pairs(name)], want.pairs(name)), name
    same_graph(user_graph(seen["split"].graph, seen["original"]), want.graph)

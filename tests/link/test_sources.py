"""The sources of a link split: pair files, OGB link-prediction .pt files, PyG's RandomLinkSplit
and --disjoint-train; bad files are one line naming the file (and the line)."""

import pickle

import numpy as np
import pytest
import torch

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError, GraphError
from gnnmesh.link.sources import check_link_split, load_split, with_disjoint_train
from gnnmesh.link.split import LinkSplit, edge_pairs

from tests.dist import run_ranks
from tests.helpers import gnnmesh_in_process, one_error_line, random_graph
from tests.link.test_trainer import link_graph
from tests.link.test_trainer import train as train_link
from tests.parity import assert_same_run

N = 40


def graph():
    return random_graph(n=N, e=160, features=4, classes=2, directed=False)


def write_pairs(folder, g, negatives=None):
    """train/valid/test.csv of ``g``'s edges (the last 10 and 5 held out); returns the pairs."""
    src, dst = edge_pairs(g)
    pairs = np.stack([src, dst], 1)
    parts = {"train": pairs[:-15], "valid": pairs[-15:-5], "test": pairs[-5:]}
    folder.mkdir(exist_ok=True)
    for name, rows in parts.items():
        (folder / f"{name}.csv").write_text("source,destination\n" + "".join(f"{a},{b}\n" for a, b in rows))
    if negatives is not None:
        (folder / "valid_neg.csv").write_text("".join(",".join(map(str, row)) + "\n" for row in negatives))
    return parts


def edge_set(g):
    dst, src = g.adj.row().numpy(), g.adj.indices.numpy()
    return set(zip(src.tolist(), dst.tolist()))


def test_pair_files_give_the_split_and_a_graph_of_the_training_edges(tmp_path):
    g = graph()
    negatives = np.arange(30).reshape(10, 3) % N
    parts = write_pairs(tmp_path / "pairs", g, negatives)
    split = load_split(g, str(tmp_path / "pairs"), seed=1, eval_negatives=4)
    assert split.train.t().tolist() == parts["train"].tolist()
    assert split.valid.t().tolist() == parts["valid"].tolist()
    assert split.valid_negatives.tolist() == negatives.tolist()
    assert split.test_negatives.shape == (5, 4)  # none given: drawn from the seed
    want = {(a, b) for a, b in parts["train"].tolist()} | {(b, a) for a, b in parts["train"].tolist()}
    assert edge_set(split.graph) == want
    assert torch.equal(split.graph.x, g.x)


@pytest.mark.parametrize("text, fragment", [
    ("0,1\n2,x\n", "line 2"), ("0,1\n5,-1\n", "negative"), ("0,1\n1,40\n", "out of range"),
    ("0,1\nnan,2\n", "line 2"), ("0,1\n1,2,3\n", "line 2")])
def test_a_bad_pairs_file_is_one_line_naming_it_and_the_line(tmp_path, text, fragment):
    write_pairs(tmp_path, graph())
    (tmp_path / "valid.csv").write_text(text)
    with pytest.raises(GraphError, match=fragment) as err:
        load_split(graph(), str(tmp_path), 0, 3)
    assert "valid.csv" in str(err.value) and "\n" not in str(err.value)


def test_negatives_must_be_one_row_per_positive(tmp_path):
    write_pairs(tmp_path, graph(), negatives=np.zeros((9, 3), dtype=int))
    with pytest.raises(GraphError, match="valid_neg.csv: 9 rows of negatives for 10 positives"):
        load_split(graph(), str(tmp_path), 0, 3)
    (tmp_path / "valid_neg.csv").write_text("1,2,3\n" * 9 + "1,2\n")
    with pytest.raises(GraphError, match="valid_neg.csv line 10"):
        load_split(graph(), str(tmp_path), 0, 3)


def test_the_cli_refuses_a_bad_pairs_directory_with_status_2(tmp_path):
    edges = tmp_path / "g.txt"
    edges.write_text("".join(f"{i} {(i + 1) % 20}\n" for i in range(20)))
    write_pairs(tmp_path / "pairs", random_graph(n=20, e=40))
    (tmp_path / "pairs" / "test.csv").write_text("0,1\n3,25\n")
    one_error_line(gnnmesh_in_process("train", "--dataset", str(edges), "--task", "link", "--epochs", "1",
                                      "--link-split", str(tmp_path / "pairs")), "test.csv", "line 2")


def test_link_split_is_fractions_or_a_directory_of_a_known_layout(tmp_path):
    check_link_split("valid=0.1,test=0.1")
    with pytest.raises(ConfigError, match="neither valid=F,test=F nor a directory"):
        check_link_split(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="holds neither train.csv"):
        check_link_split(str(tmp_path))
    with pytest.raises(ConfigError, match="link_split"):
        Config.of(task="link", link_split=str(tmp_path))


# -- OGB link-prediction directories ---------------------------------------------------------------
def write_ogb(root, g, name="collab"):
    src, dst = edge_pairs(g)
    pairs = torch.from_numpy(np.stack([src, dst], 1))
    folder = root / "split" / name
    folder.mkdir(parents=True)
    torch.save({"edge": pairs[:-15]}, folder / "train.pt")
    torch.save({"edge": pairs[-15:-5], "edge_neg": torch.tensor([[0, 5], [7, 9], [3, 3]])}, folder / "valid.pt")
    torch.save({"source_node": pairs[-5:, 0], "target_node": pairs[-5:, 1],
                "target_node_neg": torch.arange(10).reshape(5, 2)}, folder / "test.pt")
    return pairs


def test_an_ogb_link_directory_gives_shared_and_own_negatives(tmp_path):
    g = graph()
    pairs = write_ogb(tmp_path, g)
    for where in (tmp_path, tmp_path / "split" / "collab"):
        split = load_split(g, str(where), 0, 3)
        assert torch.equal(split.train, pairs[:-15].t())
        assert torch.equal(split.valid, pairs[-15:-5].t())
        assert split.negative_pairs("valid").tolist() == [[0, 7, 3], [5, 9, 3]]
        assert split.valid_negatives.shape == (10, 0)
        assert split.negative_pairs("test") is None
        assert torch.equal(split.test_negatives, torch.arange(10).reshape(5, 2))
    write_ogb(tmp_path, g, "other")
    with pytest.raises(ConfigError, match="2 splits"):
        load_split(g, str(tmp_path), 0, 3)


class Hostile:
    def __reduce__(self):
        return (exec, ("raise SystemExit('ran')",))


@pytest.mark.parametrize("content", [b"not a torch file", pickle.dumps(Hostile())], ids=["text", "hostile"])
def test_a_malformed_or_hostile_pt_file_is_one_line_and_runs_nothing(tmp_path, content):
    write_ogb(tmp_path, graph())
    (tmp_path / "split" / "collab" / "valid.pt").write_bytes(content)
    with pytest.raises(GraphError, match="valid.pt: not a split file") as err:
        load_split(graph(), str(tmp_path), 0, 3)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value, fragment", [
    ({"edge": torch.tensor([[0, 1, 2]])}, r"shape \[1, 3\]"), ({"edge": torch.tensor([[0, 99]])}, "out of range"),
    ({"edge": [[0, 1]]}, "not a tensor"), ({"nodes": torch.zeros(2)}, "neither 'edge'"),
    ({"edge": torch.tensor([[0.0, float("nan")]])}, "not a node id"), ([1, 2], "not a dict")])
def test_a_pt_file_of_the_wrong_fields_names_them(tmp_path, value, fragment):
    write_ogb(tmp_path, graph())
    torch.save(value, tmp_path / "split" / "collab" / "test.pt")
    with pytest.raises(GraphError, match=fragment):
        load_split(graph(), str(tmp_path), 0, 3)


# -- PyG -------------------------------------------------------------------------------------------
def test_from_pyg_reads_random_link_split():
    transforms = pytest.importorskip("torch_geometric.transforms")
    g = graph()
    torch.manual_seed(0)
    data = g.to_pyg()
    train_data, val_data, test_data = transforms.RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=True)(data)
    split = LinkSplit.from_pyg((train_data, val_data, test_data), g)
    assert edge_set(split.graph) == set(map(tuple, train_data.edge_index.t().tolist()))
    for name, got in (("valid", val_data), ("test", test_data)):
        label = got.edge_label.bool()
        assert torch.equal(split.pairs(name), got.edge_label_index[:, label])
        assert torch.equal(split.negative_pairs(name), got.edge_label_index[:, ~label])
        assert split.negatives(name).shape == (label.sum(), 0)
    assert torch.equal(split.train, train_data.edge_label_index[:, train_data.edge_label.bool()])
    assert torch.equal(split.graph.x, g.x)


# -- --disjoint-train ------------------------------------------------------------------------------
def test_disjoint_train_keeps_a_share_of_the_training_edges_out_of_the_graph(tmp_path):
    g = graph()
    write_pairs(tmp_path, g)
    whole = load_split(g, str(tmp_path), 2, 3)
    split = with_disjoint_train(whole, 0.25, seed=2)
    assert torch.equal(split.train, whole.train)
    kept = edge_set(split.graph)
    out = [(a, b) for a, b in whole.train.t().tolist() if (a, b) not in kept]
    assert len(out) == round(0.25 * whole.train.shape[1])
    assert all((b, a) not in kept for a, b in out)  # both directions of an undirected edge leave
    assert kept < edge_set(whole.graph)
    again = with_disjoint_train(whole, 0.25, seed=2)
    assert edge_set(again.graph) == kept
    assert edge_set(with_disjoint_train(whole, 0.25, seed=3).graph) != kept
    fractions = load_split(g, "valid=0.1,test=0.1", 2, 3, disjoint_train=0.25)
    assert fractions.graph.adj.nnz < load_split(g, "valid=0.1,test=0.1", 2, 3).graph.adj.nnz


def test_disjoint_train_is_a_link_setting():
    with pytest.raises(ConfigError, match="disjoint_train"):
        Config.of(disjoint_train=0.2)
    with pytest.raises(ConfigError, match="disjoint_train"):
        Config.of(task="link", disjoint_train=1.0)


# -- the same split and training on every rank -----------------------------------------------------
def _sources(tmp_path) -> dict:
    """The settings of a run from pair files (with --disjoint-train) and from an OGB link
    directory (its validation negatives shared), for the trainer tests' graph."""
    g = link_graph()
    write_pairs(tmp_path / "pairs", g, negatives=(np.arange(40).reshape(10, 4) * 7) % g.num_nodes)
    write_ogb(tmp_path / "ogb", g)
    return {"pairs": {"link_split": str(tmp_path / "pairs"), "disjoint_train": 0.3},
            "ogb": {"link_split": str(tmp_path / "ogb")}}


# a strategy's settings on two ranks
STRATEGIES = {"partition": {"strategy": "partition", "partitioner": "rp"}, "tensor": {"strategy": "tensor"},
              "grid3d": {"strategy": "grid3d", "grid": "1,1,2"}}


def _rank_runs(rank, world, sources, strategies):
    return {(strategy, name): train_link(**fields, **STRATEGIES[strategy], epochs=3, nproc=world)
            for strategy in strategies for name, fields in sources.items()}


def check_sources(tmp_path, strategies, timeout):
    """Each source trained under each of ``strategies`` on two ranks (one launch for them all)
    equals the single process: losses and parameters, and the metrics to 1e-5."""
    sources = _sources(tmp_path)
    want = {name: train_link(**fields, epochs=3) for name, fields in sources.items()}
    for rank, runs in enumerate(run_ranks(_rank_runs, 2, sources, strategies, timeout=timeout)):
        for (strategy, name), got in runs.items():
            try:
                assert_same_run(got, want[name])
                assert np.allclose(got["metrics"], want[name]["metrics"], rtol=0, atol=1e-5, equal_nan=True)
            except AssertionError as err:
                raise AssertionError(f"{strategy}, {name}, rank {rank}: {err}") from None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_training_from_split_files_under_partition_on_two_ranks_equals_the_single_process(tmp_path):
    check_sources(tmp_path, ["partition"], timeout=150)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_training_from_split_files_under_tensor_and_grid3d_on_two_ranks_equals_the_single_process(tmp_path):
    check_sources(tmp_path, ["tensor", "grid3d"], timeout=200)

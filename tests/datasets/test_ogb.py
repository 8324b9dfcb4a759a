"""OGB node-property dataset directories: a small fixture written here, loaded through
``load`` and the command line, and every kind of bad input rejected in one line."""

import gzip

import numpy as np
import pytest
import torch

from gnnmesh.datasets import load, ogb
from gnnmesh.errors import GraphError
from tests.helpers import gnnmesh, one_error_line

N, FEATURES, CLASSES = 40, 4, 3


def fixture_arrays(seed=0):
    rng = np.random.default_rng(seed)
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, N, (150, 2)) if a != b}
    edges = np.array(sorted(pairs), dtype=np.int64)
    x = np.round(rng.normal(size=(N, FEATURES)), 4)
    y = rng.integers(0, CLASSES, N)
    order = rng.permutation(N)
    split = {"train": order[:20], "valid": order[20:30], "test": order[30:]}
    return edges, x, y, split


def fixture_texts(edges, x, y, split, split_name="time") -> dict:
    """Relative path (without .csv suffix) -> file content, in the OGB layout."""
    def lines(rows):
        return "".join(f"{row}\n" for row in rows)
    texts = {"raw/edge": lines(f"{a},{b}" for a, b in edges),
             "raw/node-feat": lines(",".join(f"{v:.4f}" for v in row) for row in x),
             "raw/node-label": lines(y),
             "raw/num-node-list": f"{len(y)}\n",
             "raw/num-edge-list": f"{len(edges)}\n"}
    for part, ids in split.items():
        texts[f"split/{split_name}/{part}"] = lines(ids)
    return texts


def write(root, texts: dict, compress=True):
    for rel, text in texts.items():
        path = root / (rel + (".csv.gz" if compress else ".csv"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())
    return root


@pytest.fixture
def arrays():
    return fixture_arrays()


@pytest.fixture
def ogb_dir(tmp_path, arrays):
    return write(tmp_path / "ogbn-tiny", fixture_texts(*arrays))


def edge_set(graph) -> set:
    return set(map(tuple, graph.edge_index().t().tolist()))


def test_loads_edges_features_labels_and_split(ogb_dir, arrays):
    edges, x, y, split = arrays
    graph = load(ogb_dir, cache=False)
    assert graph.name == "ogbn-tiny" and graph.num_nodes == N and not graph.directed
    assert edge_set(graph) == {(a, b) for a, b in edges} | {(b, a) for a, b in edges}
    assert torch.allclose(graph.x, torch.tensor(x, dtype=torch.float32))
    assert graph.y.tolist() == y.tolist() and graph.num_classes == CLASSES
    for mask, part in zip(("train_mask", "val_mask", "test_mask"), ("train", "valid", "test")):
        assert torch.nonzero(getattr(graph, mask)).flatten().tolist() == sorted(split[part])
    assert graph.meta["split"] == {"kind": "ogb", "name": "time", "sizes": [20, 10, 10]}

    directed = load(f"{ogb_dir}:directed=true", cache=False)
    assert directed.directed and edge_set(directed) == {(a, b) for a, b in edges}


def test_uncompressed_files_unlabeled_nodes_and_no_features(tmp_path, arrays):
    edges, x, y, split = arrays
    split = {part: ids[ids >= 2] for part, ids in split.items()}  # nodes 0, 1: unlabeled
    texts = fixture_texts(edges, x, y, split)
    texts["raw/node-label"] = "\nNaN\n" + "".join(f"{float(v)}\n" for v in y[2:])
    del texts["raw/node-feat"]
    graph = load(write(tmp_path / "plain", texts, compress=False), cache=False)
    assert graph.x is None
    assert graph.y.tolist() == [0, 0] + y[2:].tolist()
    assert graph.meta["unlabeled_nodes_count"] == 2
    assert not any(bool(getattr(graph, m)[:2].any()) for m in ("train_mask", "val_mask", "test_mask"))


def test_a_label_file_of_several_columns_gives_targets(tmp_path, arrays):
    """ogbn-proteins' layout: T numbers per line, a matrix of targets; an empty line: unlabeled."""
    edges, x, y, split = arrays
    split = {part: ids[ids >= 1] for part, ids in split.items()}  # node 0: unlabeled
    targets = (np.random.default_rng(3).random((N, 5)) < 0.3).astype(np.int64)
    texts = fixture_texts(edges, x, y, split)
    texts["raw/node-label"] = "\n" + "".join(",".join(map(str, row)) + "\n" for row in targets[1:])
    graph = load(write(tmp_path / "ogbn-multi", texts), cache=False)
    assert graph.y.dtype == torch.float32 and graph.num_classes == 5
    assert torch.equal(graph.y[1:], torch.tensor(targets[1:], dtype=torch.float32))
    assert bool(torch.isnan(graph.y[0]).all()) and graph.meta["unlabeled_nodes_count"] == 1
    texts["raw/node-label"] = "".join(",".join(map(str, row)) + "\n" for row in targets[:-1]) + "1,2\n"
    with pytest.raises(GraphError, match=r"node-label.csv.gz line 40: expected 5 columns \(as on line 1\), got 2"):
        load(write(tmp_path / "ogbn-bad", texts), cache=False)


def test_second_load_comes_from_the_cache(ogb_dir, tmp_path, monkeypatch):
    first = load(ogb_dir, cache_dir=tmp_path / "cache")

    def not_again(*args, **kwargs):
        raise AssertionError("parsed twice")
    monkeypatch.setattr(ogb, "load_ogb", not_again)
    again = load(ogb_dir, cache_dir=tmp_path / "cache")
    assert torch.equal(again.adj.indices, first.adj.indices) and torch.equal(again.x, first.x)
    assert again.meta["split"] == first.meta["split"]


def test_several_splits_need_a_name(ogb_dir, arrays):
    edges, x, y, split = arrays
    write(ogb_dir, {f"split/random/{part}": "".join(f"{i}\n" for i in ids[::-1])
                    for part, ids in split.items()})
    with pytest.raises(GraphError, match=r"split: 2 splits \(random, time\); pick one with the "
                                         r"option split=NAME"):
        load(ogb_dir, cache=False)
    assert load(f"{ogb_dir}:split=random", cache=False).meta["split"]["name"] == "random"
    with pytest.raises(GraphError, match="no split 'species'; present: random, time"):
        load(ogb_dir, split="species", cache=False)


def _replace_line(text: str, line: int, new: str) -> str:
    lines = text.splitlines()
    lines[line - 1] = new
    return "\n".join(lines) + "\n"


def _fails(root, texts, message):
    with pytest.raises(GraphError, match=message):
        load(write(root, texts), cache=False)


FILE_CHANGES = [  # (file, new content: text, None to delete, or a function of the old)
    ("raw/num-edge-list", None, r"raw/num-edge-list.csv.gz: file not found"),
    ("raw/edge", None, r"raw/edge.csv.gz: file not found"),
    ("split/time/test", None, r"split/time/test.csv.gz: file not found"),
    ("raw/num-edge-list", "5\n", r"edge.csv.gz: \d+ edges, but num-edge-list.csv.gz says 5"),
    ("raw/num-node-list", "30\n", r"edge.csv.gz line \d+: .* out of range for 30 nodes"),
    ("raw/num-node-list", "40\n41\n",
     r"num-node-list.csv.gz: expected one node count \(a single graph\), got 2 lines"),
    ("raw/node-label", lambda old: old + "1\n",
     r"node-label.csv.gz: 41 labels \(one per line\), but num-node-list.csv.gz says 40 nodes"),
    ("raw/node-feat", lambda old: old.split("\n", 1)[1],
     r"node-feat.csv.gz: 39 feature rows, but num-node-list.csv.gz says 40 nodes"),
    ("split/time/train", lambda old: old + old,
     r"split/time/train.csv.gz line 21: node \d+ is already in train.csv.gz line 1"),
]


@pytest.mark.parametrize("name, change, message", FILE_CHANGES)
def test_bad_file_is_one_clear_error(tmp_path, arrays, name, change, message):
    texts = fixture_texts(*arrays)
    if change is None:
        del texts[name]
    else:
        texts[name] = change(texts[name]) if callable(change) else change
    _fails(tmp_path / "bad", texts, message)


LINE_CHANGES = [  # (file, line, new content, message)
    ("raw/edge", 5, "1,2,3", r"edge.csv.gz line 5: expected 2 columns \(as on line 1\), got 3"),
    ("raw/edge", 3, "1.5,2", r"edge.csv.gz line 3: non-integer source node id '1.5'"),
    ("raw/edge", 4, "0,99", r"edge.csv.gz line 4: target node id 99 out of range for 40 nodes"),
    ("raw/edge", 2, "-1,3", r"edge.csv.gz line 2: negative source node id -1"),
    ("raw/node-label", 7, "1,2",
     r"node-label.csv.gz line 7: expected 1 columns \(as on line 1\), got 2"),
    ("raw/node-label", 6, "-2", r"node-label.csv.gz line 6: negative label -2"),
    ("raw/node-label", 8, "cat", r"node-label.csv.gz line 8: non-integer label 'cat'"),
    ("raw/node-feat", 3, "1,2,3",
     r"node-feat.csv.gz line 3: expected 4 columns \(as on line 1\), got 3"),
    ("raw/node-feat", 9, "1,inf,0,0", r"node-feat.csv.gz line 9: non-finite value in column 2 'inf'"),
    ("split/time/valid", 2, "40",
     r"split/time/valid.csv.gz line 2: node id 40 out of range for 40 nodes"),
]


@pytest.mark.parametrize("name, line, new, message", LINE_CHANGES)
def test_bad_line_is_one_clear_error(tmp_path, arrays, name, line, new, message):
    texts = fixture_texts(*arrays)
    texts[name] = _replace_line(texts[name], line, new)
    _fails(tmp_path / "bad", texts, message)


def test_overlapping_sets(tmp_path, arrays):
    texts = fixture_texts(*arrays)
    node = texts["split/time/valid"].splitlines()[0]
    texts["split/time/test"] = _replace_line(texts["split/time/test"], 3, node)
    _fails(tmp_path / "bad", texts,
           rf"split/time/test.csv.gz line 3: node {node} is already in valid.csv.gz line 1")


def test_no_split_folder(tmp_path, arrays):
    texts = {k: v for k, v in fixture_texts(*arrays).items() if not k.startswith("split/")}
    _fails(tmp_path / "bad", texts, r"split: no split folder")


def test_split_node_without_label(tmp_path, arrays):
    edges, x, y, split = arrays
    texts = fixture_texts(edges, x, y, split)
    node = int(split["test"][4])
    texts["raw/node-label"] = _replace_line(texts["raw/node-label"], node + 1, "")
    _fails(tmp_path / "bad", texts, rf"split/time/test.csv.gz line 5: node {node} has no label")


def test_directory_outside_the_layout(tmp_path):
    (tmp_path / "notes").mkdir()
    with pytest.raises(GraphError, match="notes: is a directory, expected a graph file or an "
                                         "OGB dataset directory"):
        load(tmp_path / "notes", cache=False)
    (tmp_path / "ogbn-mag" / "raw" / "relations").mkdir(parents=True)
    with pytest.raises(GraphError, match="raw/num-node-dict.csv.gz: file not found .*: a typed OGB dataset"):
        load(tmp_path / "ogbn-mag", cache=False)


def test_found_under_the_data_root(ogb_dir):
    graph = load("ogbn-tiny:directed=true", root=ogb_dir.parent, cache=False)
    assert graph.name == "ogbn-tiny" and graph.directed


@pytest.mark.timeout(300)
def test_train_from_the_command_line(ogb_dir):
    result = gnnmesh("train", "--dataset", str(ogb_dir), "--epochs", "2", "--threads", "1",
                     timeout=240)
    assert result.returncode == 0, result.stderr
    assert "Graph('ogbn-tiny', nodes=40" in result.stdout
    assert "epoch    2 |" in result.stdout and "done: 2 epochs" in result.stdout


@pytest.mark.timeout(120)
def test_command_line_error_is_one_line(ogb_dir):
    one_error_line(gnnmesh("train", "--dataset", f"{ogb_dir}:split=species", "--epochs", "1",
                           timeout=100), "no split 'species'; present: time")


def write_link_dir(root, names=("collab",)):
    """An OGB link-prediction directory: raw/ without labels, split/<name>/*.pt."""
    edges, x, y, _ = fixture_arrays()
    texts = fixture_texts(edges, x, y, {})
    del texts["raw/node-label"]
    write(root, texts)
    pairs = torch.from_numpy(edges)
    for name in names:
        folder = root / "split" / name
        folder.mkdir(parents=True)
        torch.save({"edge": pairs[:-20]}, folder / "train.pt")
        torch.save({"edge": pairs[-20:-10], "edge_neg": torch.tensor([[0, 1], [2, 3]])}, folder / "valid.pt")
        torch.save({"edge": pairs[-10:], "edge_neg": torch.tensor([[4, 5]])}, folder / "test.pt")
    return root


def test_a_link_prediction_directory_loads_without_labels_and_names_its_split(tmp_path):
    root = write_link_dir(tmp_path / "ogbl-tiny")
    g = load(str(root), cache=False)
    assert g.y is None and g.train_mask is None and g.num_nodes == N
    assert g.meta["split"] == {"kind": "ogb-link", "name": "collab", "dir": str(root.resolve() / "split" / "collab")}
    root2 = write_link_dir(tmp_path / "two", names=("a", "b"))
    with pytest.raises(GraphError, match="2 link splits"):
        load(str(root2), cache=False)
    assert load(str(root2), split="b", cache=False).meta["split"]["name"] == "b"


def test_link_training_on_a_link_directory_reads_its_split(tmp_path):
    from gnnmesh.config import Config
    from gnnmesh.link.trainer import LinkTrainer
    root = write_link_dir(tmp_path / "ogbl-tiny")
    g = load(str(root), cache=False)
    trainer = LinkTrainer(Config.of(task="link", epochs=1, hidden=4, eval_negatives=3), g)
    assert trainer.split.negative_pairs("test").tolist() == [[4], [5]]
    assert trainer.split.train.shape[1] == len(fixture_arrays()[0]) - 20
    given = LinkTrainer(Config.of(task="link", epochs=1, hidden=4, eval_negatives=3,
                                  link_split="valid=0.2,test=0.2"), g)
    assert given.split.negative_pairs("test") is None  # fractions given: they split the loaded edges

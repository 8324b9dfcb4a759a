"""Typed OGB directories (ogbn-mag's layout): a tiny one written here loads through ``load`` as the
union graph of what it holds; a bad file is one line naming the file (and the line)."""

import gzip

import numpy as np
import pytest
import torch

from gnnmesh.datasets import load
from gnnmesh.datasets.ogb_typed import read_ogb_typed
from gnnmesh.errors import GraphError
from gnnmesh.typed import from_graph
from tests.helpers import gnnmesh_in_process, one_error_line

COUNTS = {"paper": 6, "author": 4, "institution": 2}


def lines(rows) -> str:
    return "".join(f"{row}\n" for row in rows)


def texts() -> dict:
    """Relative path (without .csv.gz) -> content."""
    rng = np.random.default_rng(0)
    return {
        "raw/num-node-dict": "paper,author,institution\n6,4,2\n",
        "raw/relations/paper___cites___paper/edge": lines(["0,1", "1,2", "2,0", "5,4"]),
        "raw/relations/paper___cites___paper/num-edge-list": "4\n",
        "raw/relations/author___writes___paper/edge": lines(["0,0", "1,0", "3,5"]),
        "raw/relations/author___affiliated_with___institution/edge": lines(["0,1", "2,0"]),
        "raw/node-feat/paper/node-feat": lines(",".join(f"{v:.3f}" for v in row) for row in rng.normal(size=(6, 3))),
        "raw/node-label/paper/node-label": lines([2, 0, 1, 1, 0, 2]),
        "split/time/paper/train": lines([0, 1, 2]),
        "split/time/paper/valid": lines([3]),
        "split/time/paper/test": lines([4, 5]),
    }


def write(root, files: dict):
    for rel, text in files.items():
        path = root / (rel + ".csv.gz")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode()))
    return root


def test_loads_the_typed_graph(tmp_path):
    root = write(tmp_path / "ogbn-minimag", texts())
    typed = read_ogb_typed(root)
    assert [(t.name, t.count) for t in typed.node_types] == list(COUNTS.items())
    assert [r.key for r in typed.relations] == [("author", "affiliated_with", "institution"),
                                                ("author", "writes", "paper"), ("paper", "cites", "paper")]
    assert typed.relation(("author", "writes", "paper")).edge_index.tolist() == [[0, 1, 3], [0, 0, 5]]
    paper = typed.node_type("paper")
    assert paper.x.shape == (6, 3) and paper.y.tolist() == [2, 0, 1, 1, 0, 2]
    assert paper.train_mask.tolist() == [True] * 3 + [False] * 3 and paper.test_mask.tolist()[4:] == [True, True]
    assert typed.node_type("author").x is None and typed.node_type("author").y is None

    graph = load(root, cache=False)
    assert graph.name == "ogbn-minimag" and graph.num_nodes == 12 and graph.num_edges == 9 and graph.directed
    assert graph.meta["node_types"].names == ("paper", "author", "institution")
    assert [r.key for r in from_graph(graph).relations] == [r.key for r in typed.relations]
    both = load(f"{root}:add_reverse=true", cache=False)
    assert both.num_edges == 18 and len(both.adj.relations.names) == 6


def test_a_chosen_split_and_an_unlabeled_type_with_a_split(tmp_path):
    files = texts()
    for part in ("train", "valid", "test"):
        files[f"split/other/paper/{part}"] = files[f"split/time/paper/{part}"]
    root = write(tmp_path / "two", files)
    with pytest.raises(GraphError, match="2 splits \\(other, time\\); pick one with the option split=NAME"):
        load(root, cache=False)
    assert load(root, split="other", cache=False).train_mask[:3].all()
    files = texts()
    files["split/time/author/train"] = "0\n"
    with pytest.raises(GraphError, match="split/time/author: node type 'author' has a split but no "
                                         "raw/node-label/author/node-label.csv.gz"):
        load(write(tmp_path / "bad", files), cache=False)


@pytest.mark.parametrize("change, message", [
    (("raw/relations/author___writes___paper/edge", lines(["0,0", "4,0"])),
     "raw/relations/author___writes___paper/edge.csv.gz line 2: source author id 4 out of range for 4 nodes"),
    (("raw/relations/paper___cites___paper/edge", lines(["0,1", "1,5"])),
     "raw/relations/paper___cites___paper/edge.csv.gz: 2 edges, but num-edge-list.csv.gz says 4"),
    (("raw/relations/paper___cites___fos/edge", "0,1\n"),
     "raw/relations/paper___cites___fos: unknown node type 'fos'"),
    (("raw/num-node-dict", "paper,author,institution\n6,4\n"),
     "raw/num-node-dict.csv.gz line 2: 2 counts for 3 node types"),
    (("raw/num-node-dict", "paper,author,institution\n6,x,2\n"),
     "raw/num-node-dict.csv.gz line 2: count 'x' of node type 'author' is not an integer >= 0"),
    (("raw/node-feat/paper/node-feat", "1,2\n"),
     "raw/node-feat/paper/node-feat.csv.gz: 1 feature rows, but num-node-dict.csv.gz says 6 nodes"),
    (("split/time/paper/valid", lines([3, 1])),
     "split/time/paper/valid.csv.gz line 2: node 1 is already in train.csv.gz line 2"),
    (("raw/node-label/paper/node-label", "2\n\n1\n1\n0\n2\n"),
     "split/time/paper/train.csv.gz line 2: paper 1 has no label"),
    (("raw/node-label/paper/node-label", "1,0\n" * 6),
     "raw/node-label/paper/node-label.csv.gz: 2 numbers per line; a typed graph's labels are one class id per node"),
    (("split/time/paper/test", lines([4, 6])),
     "split/time/paper/test.csv.gz line 2: paper id 6 out of range for 6 nodes"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path, change, message):
    files = texts()
    files[change[0]] = change[1]
    with pytest.raises(GraphError) as error:
        load(write(tmp_path / "bad", files), cache=False)
    text = str(error.value)
    assert "\n" not in text and message in text, text


def test_a_missing_required_file(tmp_path):
    files = texts()
    del files["raw/relations/author___writes___paper/edge"]
    root = write(tmp_path / "bad", files)
    (root / "raw/relations/author___writes___paper").mkdir(exist_ok=True)
    with pytest.raises(GraphError, match="author___writes___paper/edge.csv.gz: file not found .* a typed OGB"):
        load(root, cache=False)


def test_cached_with_its_types_and_relations(tmp_path):
    import time
    root = write(tmp_path / "ogbn-minimag", texts())
    cache = tmp_path / "cache"
    built = load(f"{root}:add_reverse=true", cache_dir=cache)
    assert len(list(cache.iterdir())) == 1
    read = load(f"{root}:add_reverse=true", cache_dir=cache)  # from the entry
    assert torch.equal(read.adj.indices, built.adj.indices) and torch.equal(read.x, built.x)
    assert read.adj.relations.names == built.adj.relations.names
    assert torch.equal(read.adj.relations.ids, built.adj.relations.ids)
    assert read.meta["node_types"].names == ("paper", "author", "institution")
    back, want = from_graph(read), from_graph(built)
    assert [r.key for r in back.relations] == [r.key for r in want.relations]
    for a, b in zip(back.relations, want.relations):
        assert torch.equal(a.edge_index, b.edge_index)
    # ':typed=false' reads the same entry, as one node and edge type
    assert load(f"{root}:add_reverse=true,typed=false", cache_dir=cache).adj.relations is None
    assert len(list(cache.iterdir())) == 1
    # editing a file of the layout makes a new entry
    assert load(root, cache_dir=cache).num_edges == 9 and len(list(cache.iterdir())) == 2
    time.sleep(0.01)
    write(root, {"raw/relations/author___writes___paper/edge": lines(["0,0", "1,0"])})
    assert load(root, cache_dir=cache).num_edges == 8 and len(list(cache.iterdir())) == 3


def test_a_damaged_typed_cache_entry_is_rebuilt(tmp_path):
    root = write(tmp_path / "ogbn-minimag", texts())
    cache = tmp_path / "cache"
    load(root, cache_dir=cache)
    entry = next(cache.iterdir())
    np.save(entry / "relation_ids.npy", np.zeros(2, dtype=np.int64))
    with pytest.warns(UserWarning, match="ignoring unreadable cache entry"):
        graph = load(root, cache_dir=cache)
    assert torch.equal(graph.adj.relations.ids, load(root, cache=False).adj.relations.ids)


def test_not_written_as_a_shard_set(tmp_path):
    root = write(tmp_path / "ogbn-minimag", texts())
    for source in (str(root), "igbh-synth:papers=50,authors=20,institutes=2,fos=5"):
        one_error_line(gnnmesh_in_process("datasets", "--shard", source, "--out", str(tmp_path / "shards")),
                       "a typed graph; shard sets hold graphs of one node and edge type only")
    assert not (tmp_path / "shards").exists()

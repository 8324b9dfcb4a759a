"""igbh-synth: IGBH's schema, the sizes asked for, the same graph for the same seed, and labels that
the topic and author relations carry while citations do not."""

import numpy as np
import pytest
import torch

from gnnmesh.datasets import load
from gnnmesh.datasets.typed_generators import igbh_typed
from gnnmesh.errors import GraphError
from gnnmesh.typed import from_graph

SMALL = dict(papers=600, authors=300, institutes=20, fos=40, cites=4.0, authors_per_paper=3, topics_per_paper=3,
             classes=4, homophily=0.9, features=8, feature_noise=4.0, features_on="paper", seed=0,
             split_seed=0, train_frac=0.6, val_frac=0.2)


def test_schema_sizes_and_the_same_graph_for_a_seed():
    graph = load("igbh-synth:papers=600,authors=300,institutes=20,fos=40,classes=4,features=8", cache=False)
    types = graph.meta["node_types"]
    assert types.names == ("paper", "author", "institute", "fos") and types.offsets.tolist() == [0, 600, 900, 920, 960]
    assert types.widths == (8, 0, 0, 0) and types.targets == ("paper",) and graph.num_classes == 4
    assert graph.adj.relations.names[:4] == ("paper__cites__paper", "paper__written_by__author",
                                             "author__affiliated_to__institute", "paper__topic__fos")
    assert len(graph.adj.relations.names) == 8  # with the reverses by default
    typed = from_graph(graph)
    counts = {r.name: r.num_edges for r in typed.relations}
    assert counts["affiliated_to"] == 300  # one institute per author
    assert 0.95 * 600 * 3 < counts["written_by"] <= 600 * 3 and 0.9 * 600 * 3 < counts["topic"] <= 600 * 3
    assert 0.95 * 600 * 5 < counts["cites"] <= 600 * 5  # 5 per paper by default
    cites = typed.relation(("paper", "cites", "paper")).edge_index
    assert not bool((cites[0] == cites[1]).any())
    assert sum(graph.meta["split"]["sizes"]) == 600 and abs(graph.meta["split"]["sizes"][0] - 360) <= 4  # stratified
    again = load("igbh-synth:papers=600,authors=300,institutes=20,fos=40,classes=4,features=8", cache=False)
    assert torch.equal(again.adj.indices, graph.adj.indices) and torch.equal(again.x, graph.x)
    assert torch.equal(again.y, graph.y) and torch.equal(again.adj.relations.ids, graph.adj.relations.ids)
    other = load("igbh-synth:papers=600,authors=300,institutes=20,fos=40,classes=4,features=8,seed=1", cache=False)
    assert not torch.equal(other.y, graph.y)
    plain = load("igbh-synth:papers=600,authors=300,institutes=20,fos=40,add_reverse=false", cache=False)
    assert len(plain.adj.relations.names) == 4


def share_a_label(pairs: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(y[pairs[0]] == y[pairs[1]]))


def test_labels_follow_topics_and_authors_not_citations():
    typed = igbh_typed(**SMALL)
    y = typed.node_type("paper").y.numpy()
    cites = typed.relation(("paper", "cites", "paper")).edge_index.numpy()
    topic = typed.relation(("paper", "topic", "fos")).edge_index.numpy()
    # Papers sharing a field of study: pairs through each fos.
    order = np.argsort(topic[1], kind="stable")
    papers, fos = topic[0][order], topic[1][order]
    same_fos = np.stack([papers[:-1], papers[1:]])[:, fos[:-1] == fos[1:]]
    assert share_a_label(same_fos, y) > 0.6  # 4 classes: 0.25 by chance
    assert abs(share_a_label(cites, y) - 0.25) < 0.05
    assert np.bincount(y, minlength=4).min() > 100


def test_features_on_every_type_and_bad_options():
    typed = igbh_typed(**{**SMALL, "features_on": "all"})
    assert [t.width for t in typed.node_types] == [8, 8, 8, 8]
    assert typed.node_type("paper").x.dtype == torch.float32
    with pytest.raises(GraphError, match="need at least one node of every type and one class, got fos=0"):
        igbh_typed(**{**SMALL, "fos": 0})
    with pytest.raises(GraphError, match="option 'homophily' must be in \\[0, 1\\], got 1.5"):
        igbh_typed(**{**SMALL, "homophily": 1.5})
    with pytest.raises(GraphError, match="option 'features_on' must be one of paper, all"):
        load("igbh-synth:features_on=fos", cache=False)

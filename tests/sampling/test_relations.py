"""Sampling per relation of a typed graph: every (node, relation) keeps its fanout of that
relation's in-edges; the ranks' blocks of a batch together are the whole batch's; a block
with every neighbour gives R-GCN's and R-GAT's full-graph layers (each per-relation operator,
its entries' global ids included); per-relation fanouts read as documented, and what they
cannot mean is refused in one line."""

import numpy as np
import pytest
import torch

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models.rgat import RGATLayer
from gnnmesh.models.rgcn import RGCNLayer
from gnnmesh.sampling import RELATIONS, BlockView, RelationSampler, sampler_of
from gnnmesh.sampling.relations import parse_hops, relation_fanouts
from gnnmesh.view import GraphView, operator_of

from tests.helpers import typed_graph

GRAPH = typed_graph()
NAMES = GRAPH.adj.relations.names
SEEDS = np.array([3, 70, 41, 0, 55, 12, 66, 29])


def sampler(fanouts, seed: int = 4) -> RelationSampler:
    return RelationSampler(GRAPH.adj, relation_fanouts(fanouts, NAMES), seed)


def whole_rows(relation: str) -> dict:
    """{node: its in-neighbours by ``relation``} of the whole graph."""
    op = operator_of(f"sum@{relation}", GRAPH.adj)
    indptr, indices = op.indptr.numpy(), op.indices.numpy()
    return {i: set(indices[indptr[i]:indptr[i + 1]]) for i in range(GRAPH.num_nodes)}


def kept(block, relation: str) -> dict:
    """{destination's global id: its kept sources by ``relation``} of ``block``."""
    ids = block.adj.relations.ids.numpy()
    rows, cols = block.adj.row().numpy(), block.adj.indices.numpy()
    out = {int(d): [] for d in block.nodes[:block.num_dst]}
    for row, col in zip(rows[ids == NAMES.index(relation)], cols[ids == NAMES.index(relation)]):
        out[int(block.nodes[row])].append(int(block.nodes[col]))
    return out


def test_every_node_keeps_its_fanout_of_each_relation_among_that_relations_neighbours():
    counts = {"a__x__a": 2, "a__rev_x__a": 1}
    sample = sampler("x=2,rev_x=1,3;-1").sample(SEEDS, epoch=1, step=0)
    for r in NAMES:
        whole = whole_rows(r)
        for node, sources in kept(sample.blocks[0], r).items():
            assert len(set(sources)) == len(sources) == min(counts.get(r, 3), len(whole[node])), (r, node)
            assert set(sources) <= whole[node], (r, node)
        for node, sources in kept(sample.blocks[1], r).items():  # -1: every neighbour
            assert set(sources) == whole[node] and len(sources) == len(whole[node])


def test_ranks_blocks_together_are_the_whole_batchs():
    sampling = sampler("x=2,rev_w=1,2;3")

    def per_node(sample, hop):
        block = sample.blocks[hop]
        indptr = block.adj.indptr.numpy()
        return {int(block.nodes[i]): tuple(block.entries[indptr[i]:indptr[i + 1]]) for i in range(block.num_dst)}

    whole = sampling.sample(SEEDS, epoch=2, step=5)
    parts = [sampling.sample(piece, epoch=2, step=5) for piece in np.array_split(SEEDS, 3)]
    for hop in range(2):
        got = {}
        for part in parts:
            got.update(per_node(part, hop))
        assert got == per_node(whole, hop), f"hop {hop}"
    assert per_node(sampling.sample(SEEDS, 2, 6), 0) != per_node(whole, 0)  # keyed by the step too
    # a block rebuilt from its rows' entries (as the routes send them) is the block
    block = whole.blocks[0]
    again = sampling.block(block.nodes[:block.num_dst], block.entries, np.diff(block.adj.indptr.numpy()))
    assert (again.nodes == block.nodes).all() and kept(again, "a__y__b") == kept(block, "a__y__b")


def two_layers(kind: str) -> list:
    torch.manual_seed(0)
    if kind == "rgcn":
        return [RGCNLayer(5, 6, NAMES), RGCNLayer(6, 3, NAMES)]
    return [RGATLayer(5, 6, NAMES, 2, True, attn_dropout=0.0), RGATLayer(12, 3, NAMES, 1, False, attn_dropout=0.0)]


@pytest.mark.parametrize("kind", ["rgcn", "rgat"])
def test_a_block_with_every_neighbour_gives_the_full_graph_layers_for_the_seeds(kind):
    layers = two_layers(kind)
    sample = sampler("-1,-1").sample(SEEDS, epoch=1, step=0)
    view = BlockView(sample, RELATIONS, seed=0, device="cpu")
    full = GraphView(GRAPH.adj)
    x = GRAPH.x
    want = layers[1](full, torch.relu(layers[0](full, x)))[torch.from_numpy(SEEDS)]
    h = layers[0](view.layer(0), x[torch.from_numpy(sample.input_nodes)])
    got = layers[1](view.layer(1), torch.relu(h))
    assert torch.allclose(got, want, atol=1e-5)
    # with fewer neighbours the layers see less: the check above can fail
    small = sampler("1,1").sample(SEEDS, epoch=1, step=0)
    view = BlockView(small, RELATIONS, seed=0, device="cpu")
    h = layers[0](view.layer(0), x[torch.from_numpy(small.input_nodes)])
    assert not torch.allclose(layers[1](view.layer(1), torch.relu(h)), want, atol=1e-3)


@pytest.mark.parametrize("norm", ["mean", "sum", "loop"])
def test_each_per_relation_operator_of_a_full_block_is_the_whole_graphs_rows_with_their_global_ids(norm):
    sample = sampler("-1").sample(SEEDS, epoch=1, step=0)
    view = BlockView(sample, RELATIONS, seed=0, device="cpu")
    x = torch.randn(GRAPH.num_nodes, 4, dtype=torch.float64).float()
    for r in NAMES:
        op = f"{norm}@{r}"
        whole = operator_of(op, GRAPH.adj)
        got = view.spmm(x[torch.from_numpy(sample.input_nodes)], op)
        assert torch.allclose(got, GraphView(GRAPH.adj).spmm(x, op)[torch.from_numpy(SEEDS)], atol=1e-6), op
        # its entries are the whole operator's seed rows, by their global ids
        indptr = whole.indptr.numpy()
        want = np.concatenate([np.arange(indptr[s], indptr[s + 1]) for s in SEEDS])
        assert sorted(view.entries(op)) == sorted(want), op


def test_a_mean_is_over_the_kept_neighbours_of_its_relation():
    sample = sampler("2").sample(SEEDS, epoch=3, step=1)
    block = sample.blocks[0]
    view = BlockView(sample, RELATIONS, seed=0, device="cpu")
    x = torch.randn(len(block.nodes), 3)
    for r in NAMES:
        got = view.spmm(x, f"mean@{r}")
        for i, sources in enumerate(kept(block, r).values()):
            columns = [int(np.flatnonzero(block.nodes == s)[0]) for s in sources]
            want = x[columns].mean(0) if columns else torch.zeros(3)
            assert torch.allclose(got[i], want, atol=1e-6), (r, i)


def test_fanouts_per_relation_read_as_documented():
    assert parse_hops("10,5") == [10, 5]
    assert parse_hops("cites=10,writes=5;cites=5,writes=3") == [{"cites": 10, "writes": 5}, {"cites": 5, "writes": 3}]
    assert parse_hops("5,cites=10;3") == [{None: 5, "cites": 10}, 3]
    assert relation_fanouts("4;x=2,a__y__b=-1,1", NAMES) == [(4,) * 8, (2, -1, 1, 1, 1, 1, 1, 1)]
    assert Config.of(model="rgcn", minibatch=True, fanouts="x=2,3;2").minibatch.fanouts == "x=2,3;2"


@pytest.mark.parametrize("fanouts,message", [
    ("cites=2,3;2", r"no relation 'cites'; the graph's relations are a__x__a, a__y__b, b__z__c, c__w__a, "
                    r"a__rev_x__a, b__rev_y__a, c__rev_z__b, a__rev_w__c$"),
    ("x=2;2", r"hop 1 of 'x=2;2' gives no count for relations a__y__b, .*, a__rev_w__c; name them, or give a "
              r"bare count for the rest"),
    ("x=2,x=3,1;2", "relation 'x' is given twice in hop 1"),
    ("x=0,1;2", "'0' is neither a positive integer nor -1"),
    ("=2,1;2", "'=2' names no relation"),
])
def test_what_fanouts_per_relation_cannot_mean_is_refused_in_one_line(fanouts, message):
    with pytest.raises(ConfigError, match=f"^config field 'fanouts': .*{message}") as caught:
        sampler_of(RELATIONS, GRAPH.adj, fanouts, seed=0)
    assert "\n" not in str(caught.value)


def test_an_edge_type_of_two_relations_must_be_named_whole_and_one_operator_takes_counts_alone():
    adj = GRAPH.adj
    twice = adj.with_relations(type(adj.relations)(("a__x__a", "b__x__c") + NAMES[2:], adj.relations.ptr,
                                                   adj.relations.ids))
    with pytest.raises(ConfigError, match="'x' is the edge type of relations a__x__a, b__x__c; name one by its "
                                          "whole name"):
        sampler_of(RELATIONS, twice, "x=2,1", seed=0)
    with pytest.raises(ConfigError, match=r"'fanouts': 'x=2,1;2' names relations; the model aggregates with one "
                                          r"operator \(mean\)"):
        sampler_of("mean", operator_of("mean", adj), "x=2,1;2", seed=0)

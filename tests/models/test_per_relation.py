"""A homogeneous model per relation (``per_relation``, PyG's ``to_hetero``): each layer's copies
see only their relation's edges and are summed or averaged; a layer of terms stays terms;
attention (GAT) runs per relation too; several ranks train it to the single process's losses;
a layer on an operator without a per-relation form is refused in one line."""

import pytest
import torch

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models import GAT, GCN, GIN, SAGE
from gnnmesh.models.per_relation import PerRelation, PerRelationTerms, per_relation
from gnnmesh.train import Trainer
from gnnmesh.view import GraphView, operator_of

from tests.dist import run_ranks
from tests.helpers import dense, typed_graph


def relations():
    return typed_graph().adj.relations.names


def test_a_layer_of_terms_is_each_relations_copy_on_its_own_edges_summed():
    graph = typed_graph()
    torch.manual_seed(0)
    model = per_relation(lambda: SAGE(5, 3, hidden=4, layers=1), relations())
    layer = model.layers[0]
    assert isinstance(layer, PerRelationTerms)
    x = torch.randn(graph.num_nodes, 5)
    want = sum(x @ c.lin_self.weight.t() + c.lin_self.bias
               + dense(operator_of(f"mean@{r}", graph.adj)) @ x @ c.lin_neigh.weight.t()
               for c, r in zip(layer.copies, relations()))
    assert torch.allclose(layer(GraphView(graph.adj), x), want, atol=1e-5)
    mean = per_relation(lambda: SAGE(5, 3, hidden=4, layers=1), relations(), aggr="mean").layers[0]
    got, alone = mean(GraphView(graph.adj), x), sum(c(_Only(graph, r), x) for c, r in zip(mean.copies, relations()))
    assert torch.allclose(got, alone / len(relations()), atol=1e-5)


class _Only(GraphView):
    """One relation's edges as a plain graph: what a copy must see."""

    def __init__(self, graph, relation):
        super().__init__(graph.adj)
        self.relation = relation

    def spmm(self, x, op="gcn", values=None):
        return super().spmm(x, f"{op}@{self.relation}", values)


def test_attention_and_gin_run_per_relation_by_their_forward():
    graph = typed_graph()
    torch.manual_seed(0)
    gat = per_relation(lambda: GAT(5, 3, hidden=4, heads=2, layers=2, dropout=0.0, attn_dropout=0.0), relations())
    assert isinstance(gat.layers[0], PerRelation) and not isinstance(gat.layers[0], PerRelationTerms)
    assert gat.layers[0].operators == tuple(f"loop@{r}" for r in relations())
    out = gat(GraphView(graph.adj), graph.x)
    assert out.shape == (graph.num_nodes, 3) and torch.isfinite(out).all()
    copies = gat.layers[0].copies
    assert not torch.equal(copies[0].att_src, copies[1].att_src)  # each copy drew its own weights
    gin = per_relation(lambda: GIN(5, 3, hidden=4, layers=1), relations())
    assert isinstance(gin.layers[0], PerRelation) and not isinstance(gin.layers[0], PerRelationTerms)


def test_gcns_symmetric_operator_has_no_per_relation_form():
    with pytest.raises(ConfigError, match="'gcn' has no per-relation form"):
        per_relation(lambda: GCN(5, 3, hidden=4), relations())


def _losses(rank, world, kind, fields):
    torch.manual_seed(3)
    build = {"sage": lambda: SAGE(5, 3, hidden=8, dropout=0.3),
             "gat": lambda: GAT(5, 3, hidden=4, heads=2, dropout=0.3, attn_dropout=0.3)}[kind]
    model = per_relation(build, relations())
    cfg = Config.of(epochs=3, seed=1, nproc=world, **fields)
    return [r.loss for r in Trainer(cfg, typed_graph(), model=model).fit().history]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("kind,world,fields", [
    pytest.param("sage", 3, {"strategy": "partition", "partitioner": "rp"}, id="sage-partition"),
    pytest.param("gat", 2, {"strategy": "tensor"}, id="gat-tensor", marks=pytest.mark.slow),
    pytest.param("sage", 2, {"strategy": "offload"}, id="sage-offload", marks=pytest.mark.slow)])
def test_several_ranks_train_it_to_the_single_process_losses(kind, world, fields):
    want = _losses(0, 1, kind, {})
    for got in run_ranks(_losses, world, kind, fields, timeout=180):
        assert got == pytest.approx(want, abs=1e-5)

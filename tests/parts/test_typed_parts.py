"""Parts of a typed graph: partition parts carry every relation's operators, tensor parts the
relations of every entry; R-GCN trained from either equals the single process's run."""

import json

import numpy as np
import pytest

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.errors import GraphError
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.parallel.partition.strategy import PartitionParallel
from gnnmesh.parallel.tensor.parts import write_tensor_parts
from gnnmesh.parallel.tensor.strategy import TensorParallel
from gnnmesh.partition import partition
from gnnmesh.parts import MANIFEST, open_parts

from tests.dist import run_ranks
from tests.helpers import layout, typed_graph
from tests.parity import assert_same_run, train


def config(**fields) -> Config:
    return Config.of(model="rgcn", hidden=8, epochs=3, seed=1, **fields)


def _rank(rank, world, directory, kind):
    parts = open_parts(directory)
    if kind == "tensor":
        return train(parts, config(strategy="tensor"), TensorParallel(layout("tensor"), "cpu", chunk_size=9))
    return train(parts, config(), PartitionParallel(layout("partition"), "cpu"))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("kind", ["partition", pytest.param("tensor", marks=pytest.mark.slow)])
def test_rgcn_from_parts_equals_the_single_process_run(tmp_path, kind):
    graph = typed_graph()
    if kind == "tensor":
        write_tensor_parts(graph, 2, tmp_path / "p", "typed")
    else:
        write_partition_parts(graph, partition(graph, 2, "rp", cache=False), tmp_path / "p", "typed")
    assert open_parts(tmp_path / "p").relations == graph.adj.relations.names
    reference = train(graph, config())
    for rank, got in enumerate(run_ranks(_rank, 2, str(tmp_path / "p"), kind, timeout=180)):
        try:
            assert_same_run(got, reference)
        except AssertionError as err:
            raise AssertionError(f"{kind}, rank {rank}: {err}") from None


def test_tensor_parts_check_their_relations_against_the_topology(tmp_path):
    graph = typed_graph()
    write_tensor_parts(graph, 1, tmp_path / "p", "typed")
    manifest = json.loads((tmp_path / "p" / MANIFEST).read_text())
    assert manifest["relations"] == list(graph.adj.relations.names)
    assert {"adj.relation_ptr", "adj.relation_ids"} <= set(manifest["ranks"][0]["files"])
    manifest["relations"] = manifest["relations"][:2]  # ids name relations the manifest lacks
    (tmp_path / "p" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(GraphError, match="adj.relation_ptr.npy: relations: relation ids must be 0 to 1"):
        train(open_parts(tmp_path / "p"), config(strategy="tensor"), TensorParallel(layout("tensor"), "cpu"))


def test_parts_record_the_node_types_and_refuse_damaged_ones(tmp_path):
    graph = datasets.load("igbh-synth:papers=30,authors=20,institutes=3,fos=4,features=2")
    write_partition_parts(graph, partition(graph, 2, "rp", cache=False), tmp_path / "p", "typed")
    types, got = graph.meta["node_types"], open_parts(tmp_path / "p").node_types
    assert got.names == types.names and np.array_equal(got.offsets, types.offsets)
    assert (got.widths, got.targets) == (types.widths, types.targets)
    manifest = json.loads((tmp_path / "p" / MANIFEST).read_text())
    manifest["node_types"]["offsets"][1] = 10**6
    (tmp_path / "p" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(GraphError, match="field 'node_types.offsets' must be 5 ascending ids from 0 to the graph's"):
        open_parts(tmp_path / "p")

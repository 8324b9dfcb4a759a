"""Parts for the tensor strategies (NeutronTP): the topology, which every rank holds by
design, and each rank's near-equal row block of the vertex data.

Folder of rank r (``store.py`` for the directory around it):

    adj.indptr / .indices [/ .values]   the whole adjacency, CSR (rows = destinations)
    adj.relation_ptr / .relation_ids    a typed graph's relations of every entry
                                        (``gnnmesh.relations.Relations``; names in the manifest)
    x, y, train_mask, ...               rows ``row_bounds[r]:row_bounds[r + 1]`` of the vertex data

The topology files of ranks 1.. are hard links to rank 0's where the file system allows
(copies elsewhere), so a parts directory on one disk stores the graph once.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ... import progress
from ...atomic import staged_directory
from ...graph import Graph
from ...layout.ranges import block_bounds
from ...parts.store import OUTPUT, ManifestFields, graph_facts, rank_folder, save_array, write_manifest
from ...parts.vertex import VertexData


def write_tensor_parts(graph: Graph, parts: int, directory, dataset: str) -> Path:
    vertex = VertexData(graph)
    adj = graph.adj
    bounds = block_bounds(graph.num_nodes, parts)
    with staged_directory(directory, OUTPUT) as tmp, \
            progress.phase(f"writing {parts} tensor parts", total=parts) as shown:
        ranks = []
        for r in range(parts):
            folder = tmp / rank_folder(r)
            folder.mkdir()
            mine: dict = {}
            if r == 0:
                save_array(folder, "adj.indptr", adj.indptr.numpy(), mine)
                save_array(folder, "adj.indices", adj.indices.numpy(), mine)
                if adj.values is not None:
                    save_array(folder, "adj.values", adj.values.numpy(), mine)
                if adj.relations is not None:
                    save_array(folder, "adj.relation_ptr", adj.relations.ptr.numpy(), mine)
                    save_array(folder, "adj.relation_ids", adj.relations.ids.numpy(), mine)
                topology = dict(mine)
            else:
                for name, digest in topology.items():
                    _link_or_copy(tmp / rank_folder(0) / f"{name}.npy", folder / f"{name}.npy")
                    mine[name] = digest
            rows = np.arange(bounds[r], bounds[r + 1])
            save_array(folder, "x", vertex.features(rows), mine)
            for name, array in vertex.labels(rows).items():
                save_array(folder, name, array, mine)
            ranks.append({"rows": [int(bounds[r]), int(bounds[r + 1])], "files": mine})
            shown.advance()
        relations = {} if adj.relations is None else {"relations": list(adj.relations.names)}
        write_manifest(tmp, {**graph_facts(graph, vertex.num_features, dataset), "kind": "tensor",
                             "parts": parts, "how": "whole topology, row blocks of the vertex data",
                             **relations, "ranks": ranks})
    return Path(directory)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def check_fields(fields: ManifestFields) -> None:
    """The manifest fields tensor parts add: whether the graph is weighted, which every rank's
    files agree with, and a typed graph's relation names (``parts/store.py`` checks what every
    kind shares)."""
    m, need = fields.m, fields.need
    need("weighted", isinstance(m.get("weighted"), bool), "true or false")
    if "relations" in m:
        need("relations", isinstance(m["relations"], list) and m["relations"] and all(
            isinstance(name, str) and name for name in m["relations"]), "a list of relation names")
    for r, rank in enumerate(m["ranks"]):
        need(f"ranks[{r}].files", m["weighted"] == ("adj.values" in rank["files"]),
             f"an object {'with' if m['weighted'] else 'without'} 'adj.values' (the graph is "
             f"{'' if m['weighted'] else 'not '}weighted)")


def required_files(m: dict) -> list:
    """The arrays of a rank's folder beyond its vertex data: the whole topology (with a typed
    graph's relations)."""
    return ["adj.indptr", "adj.indices"] + (["adj.relation_ptr", "adj.relation_ids"] if "relations" in m else [])

"""Parts for 3D (grid3d) training: each rank's blocks of the normalized adjacency under the
balanced permutation pair training uses, its block of the input features, and the labels
of the rows it scores.

Folder of the rank at grid coordinates (x, y, z) (``store.py`` for the directory around it):

    orders.npy          the two node orders (new id -> original id), [2, V]: every rank
                        needs them to know which rows its peers hold
    adj-<k>.indptr / .indices / .values
                        layer k's block of D^-1/2 (A + I) D^-1/2 (k < min(layers, 6): the
                        blocks repeat with period six, three planes times two permutations)
    x.npy               its layer-0 block of the input features
    y, train_mask, ...  labels and splits of the rows it scores (``GridBlocks.loss_rows``)

The blocks are cut exactly as ``GridView.adjacency`` cuts them from the whole graph, so
training from parts computes what training from the dataset does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ... import progress
from ...atomic import staged_directory
from ...graph import Graph
from ...layout import ParallelLayout
from ...layout.grid import AXES, roles
from ...layout.ranges import cut
from ...parts.store import OUTPUT, ManifestFields, graph_facts, is_count, rank_folder, save_array, write_manifest
from ...parts.vertex import VertexData
from ...view import operator_of
from .blocks import GridBlocks

PERIOD = 6  # three planes x two permutations


def write_grid_parts(graph: Graph, dims: dict, directory, dataset: str, *, layers: int = 2,
                     seed: int = 0, permute: bool = True) -> Path:
    """Write ``graph`` for an X x Y x Z grid (``dims``) and models of up to ``layers`` layers
    (every depth when ``layers >= 6``) into ``directory``, replacing earlier parts."""
    vertex = VertexData(graph)
    placement = ParallelLayout.of_grid(dims)
    world = placement.size
    with progress.phase("grid3d: choosing the permutations"):
        grid_blocks = GridBlocks(dims, graph.num_nodes, permute, seed, adj=graph.adj)
    op = operator_of("gcn", graph.adj).to_scipy()
    blocks = min(int(layers), PERIOD)
    orders = np.stack(grid_blocks.orders)
    with staged_directory(directory, OUTPUT) as tmp, \
            progress.phase(f"writing {world} grid3d parts", total=world) as shown:
        files = []
        for rank in range(world):
            me = placement.coordinates(rank)
            folder = tmp / rank_folder(rank)
            folder.mkdir()
            mine: dict = {}
            save_array(folder, "orders", orders, mine)
            for k in range(blocks):
                r = roles(k)
                block = op[grid_blocks.nodes(k + 1, r.rows, me)][:, grid_blocks.nodes(k, r.cols, me)]
                block.sort_indices()
                save_array(folder, f"adj-{k}.indptr", block.indptr.astype(np.int64), mine)
                save_array(folder, f"adj-{k}.indices", block.indices.astype(np.int64), mine)
                save_array(folder, f"adj-{k}.values", block.data.astype(np.float32), mine)
            r = roles(0)
            features = vertex.features(grid_blocks.nodes(0, r.cols, me))
            save_array(folder, "x", features[:, grid_blocks.width(vertex.num_features, r.feats, me)], mine)
            for name, array in vertex.labels(grid_blocks.loss_rows(rank, world)).items():
                save_array(folder, name, array, mine)
            files.append({"coords": me, "files": mine})
            shown.advance()
        shape = "x".join(str(dims[a]) for a in AXES)
        write_manifest(tmp, {
            **graph_facts(graph, vertex.num_features, dataset), "kind": "grid3d", "parts": world,
            "how": f"grid {shape}, {'balanced permutation pair' if permute else 'no permutation'}, "
                   f"seed {seed}, {blocks} adjacency block{'s' if blocks > 1 else ''}",
            "grid": [dims[a] for a in AXES], "permute": bool(permute), "seed": int(seed),
            "layers": blocks if blocks < PERIOD else None, "ranks": files})
    return Path(directory)


def check_fields(fields: ManifestFields) -> None:
    """The manifest fields grid3d parts add: the grid, and the layers the blocks were written for
    (``parts/store.py`` checks what every kind shares)."""
    m, need, parts = fields.m, fields.need, fields.m["parts"]
    grid = m.get("grid")
    need("grid", isinstance(grid, list) and len(grid) == 3 and all(is_count(g, 1, parts) for g in grid)
         and grid[0] * grid[1] * grid[2] == parts, f"three grid sizes whose product is the {parts} parts")
    need("layers", m.get("layers") is None or is_count(m.get("layers"), 1, PERIOD - 1),
         f"a count of layers below {PERIOD} or null")


def required_files(m: dict) -> list:
    """The arrays of a rank's folder beyond its vertex data: the node orders and the adjacency
    blocks of every layer written."""
    names = ["orders"]
    for k in range(m["layers"] or PERIOD):  # the blocks repeat with period six
        names += [f"adj-{k}.{part}" for part in ("indptr", "indices", "values")]
    return names


def feature_block(manifest: dict, rank: int) -> tuple:
    """(rows, columns) of rank ``rank``'s block of the input features as ``write_grid_parts``
    cuts it: layer 0's column block of the nodes, its share of the features."""
    dims = dict(zip(AXES, manifest["grid"]))
    me, r = ParallelLayout.of_grid(dims).coordinates(rank), roles(0)
    rows = cut(manifest["num_nodes"], dims[r.cols], me[r.cols])
    columns = cut(manifest["num_features"], dims[r.feats], me[r.feats])
    return rows.stop - rows.start, columns.stop - columns.start

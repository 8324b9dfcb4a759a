"""Parts for 1D partition training: each rank's rows of every graph operator with columns
already numbered ``[owned, halo]``, its send lists, and its rows of the vertex data.

Folder of rank m (``store.py`` for the directory around it):

    owned.npy                  global ids of its rows, ascending
    x, y, train_mask, ...      its rows of the vertex data, in ``owned`` order
    <s>.indptr / .indices      structure s of an operator block: owned rows x [owned, halo]
    <s>.entries                global entry id of every block entry (for edge dropout masks)
    <s>.halo                   global ids of the halo columns, grouped by owner rank
    <s>.send                   positions among the owned rows to send, grouped by peer
    <op>.values                operator op's values on its structure's entries

Operators sharing a structure (``gcn`` and ``loop`` are both A + I) store it once. The
blocks are those ``halo.build_local_operator`` builds from the whole graph, so training
from parts computes exactly what training from the dataset does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ... import progress
from ...atomic import staged_directory
from ...graph import Graph
from ...partition import Partition, graph_key, rank_halos
from ...parts.store import OUTPUT, ManifestFields, graph_facts, is_count, rank_folder, save_array, write_manifest
from ...parts.vertex import VertexData
from ...view import operator_of, operators_of


def write_partition_parts(graph: Graph, partition: Partition, directory, dataset: str) -> Path:
    """Write ``graph`` cut by ``partition`` into ``directory`` (replacing earlier parts).
    ``dataset`` is the spec the graph was loaded from, recorded so a run can check it."""
    parts, assignment = partition.parts, np.asarray(partition.assignment, dtype=np.int64)
    vertex = VertexData(graph)
    names = operators_of(graph.adj)
    steps = parts + len(names)  # every rank's vertex data, then every operator
    with staged_directory(directory, OUTPUT) as tmp, \
            progress.phase(f"writing {parts} partition parts", total=steps) as shown:
        folders = [tmp / rank_folder(r) for r in range(parts)]
        files = [{} for _ in range(parts)]
        order = np.argsort(assignment, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(assignment, minlength=parts))])
        for r, folder in enumerate(folders):
            folder.mkdir()
            owned = order[bounds[r]:bounds[r + 1]]
            save_array(folder, "owned", owned, files[r])
            save_array(folder, "x", vertex.features(owned), files[r])
            for name, array in vertex.labels(owned).items():
                save_array(folder, name, array, files[r])
            shown.advance()
        structures, operators = {}, {}
        for name in names:
            op = operator_of(name, graph.adj)
            key = graph_key(op)
            if key not in structures:
                structures[key] = _write_structure(name, op, assignment, parts, folders, files)
            structure = structures[key]["name"]
            if op.values is not None:
                values = op.values.numpy()
                for r, folder in enumerate(folders):
                    entries = np.load(folder / f"{structure}.entries.npy", allow_pickle=False)
                    save_array(folder, f"{name}.values", values[entries], files[r])
            operators[name] = {"structure": structure, "values": op.values is not None}
            del op
            shown.advance()
        manifest = {
            **graph_facts(graph, vertex.num_features, dataset), "kind": "partition", "parts": parts,
            "how": f"{partition.method}, epsilon {partition.epsilon:g}, seed {partition.seed}",
            "method": partition.method, "epsilon": partition.epsilon, "seed": partition.seed,
            "partition_seconds": partition.seconds, "operators": operators,
            "structures": {s["name"]: {k: v for k, v in s.items() if k != "name"} for s in structures.values()},
            "ranks": [{"owned": int(n), "files": files[r]} for r, n in enumerate(np.diff(bounds))],
        }
        write_manifest(tmp, manifest)
    return Path(directory)


def _write_structure(name, op, assignment, parts, folders, files) -> dict:
    """Every rank's block of ``op`` (structure, entry ids, halo and send lists)."""
    send_counts, nnz = [], []
    for halo, folder, mine in zip(rank_halos(op, assignment, parts), folders, files):
        block = halo.block
        save_array(folder, f"{name}.indptr", block.indptr.numpy(), mine)
        save_array(folder, f"{name}.indices", block.indices.numpy(), mine)
        save_array(folder, f"{name}.entries", halo.entry_ids, mine)
        save_array(folder, f"{name}.halo", halo.halo, mine)
        save_array(folder, f"{name}.send", np.concatenate(halo.send_index), mine)
        send_counts.append(halo.send_counts.tolist())
        nnz.append(block.nnz)
        del halo, block  # before the next rank's halo is built, not after
    return {"name": name, "send_counts": send_counts, "nnz": nnz}


def check_fields(fields: ManifestFields) -> None:
    """The manifest fields partition parts add: every rank's owned nodes, the method, and each
    structure's per-rank entries and sends (``store.py`` checks what every kind shares)."""
    m, need, parts = fields.m, fields.need, fields.m["parts"]
    for r, rank in enumerate(m["ranks"]):
        need(f"ranks[{r}].owned", is_count(rank.get("owned"), 0, m["num_nodes"]), "a count of nodes")
    need("num_nodes", sum(rank["owned"] for rank in m["ranks"]) == m["num_nodes"], "the nodes the ranks own")
    need("method", isinstance(m.get("method"), str), "a string")
    structures, operators = m.get("structures"), m.get("operators")
    need("structures", isinstance(structures, dict), "an object")
    for name, info in structures.items():
        where = f"structures.{name}"
        need(where, isinstance(info, dict), "an object")
        need(f"{where}.nnz", isinstance(info.get("nnz"), list) and len(info["nnz"]) == parts
             and all(is_count(v) for v in info["nnz"]), f"a list of {parts} entry counts")
        send = info.get("send_counts")
        need(f"{where}.send_counts", isinstance(send, list) and len(send) == parts and all(
            isinstance(row, list) and len(row) == parts and all(is_count(v) for v in row) for row in send),
            f"{parts} lists of {parts} row counts")
    need("operators", isinstance(operators, dict), "an object")
    for name, info in operators.items():
        need(f"operators.{name}", isinstance(info, dict) and isinstance(info.get("structure"), str)
             and info["structure"] in structures and isinstance(info.get("values"), bool),
             "an object naming one of the structures and whether it has values")


def required_files(m: dict) -> list:
    """The arrays of a rank's folder beyond its vertex data (``m`` checked)."""
    names = ["owned"]
    for structure in m["structures"]:
        names += [f"{structure}.{part}" for part in ("indptr", "indices", "entries", "halo", "send")]
    return names + [f"{op}.values" for op, info in m["operators"].items() if info["values"]]

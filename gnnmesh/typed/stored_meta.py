"""A typed union graph's ``meta`` (``gnnmesh.typed.union``) as a stored file holds it: what
JSON can say as JSON (node types, the typed relations' keys), and each relation's arrays (its
edges' entries, its edge features) as arrays of their own, named by the relation's position.
``stored`` takes the meta apart, ``restored`` puts it back together and checks it: a stored
graph is bad input until checked."""

from __future__ import annotations

import numpy as np
import torch

from .union import NodeTypes

_EDGES, _FEATURES = "relation_edges", "edge_features"


def stored(meta: dict, put) -> dict:
    """``meta`` with its typed parts made JSON, each array handed to ``put(name, tensor)``."""
    out = dict(meta)
    types = meta.get("node_types")
    if isinstance(types, NodeTypes):
        out["node_types"] = {"names": list(types.names), "offsets": [int(o) for o in types.offsets],
                             "widths": list(types.widths), "targets": list(types.targets)}
    if "typed_relations" in meta:
        out["typed_relations"] = [list(key) for key in meta["typed_relations"]]
    for field in (_EDGES, _FEATURES):
        if field in meta:
            names = list(meta[field])
            for i, name in enumerate(names):
                put(f"{field}.{i}", meta[field][name])
            out[field] = names
    return out


def restored(meta: dict, get) -> dict:
    """The meta ``stored`` made, its arrays read by ``get(name)``; a ValueError where it does
    not hold together."""
    out = dict(meta)
    types = meta.get("node_types")
    if types is not None:
        try:
            offsets = np.asarray(types["offsets"], dtype=np.int64)
            out["node_types"] = NodeTypes(tuple(types["names"]), offsets, tuple(int(w) for w in types["widths"]),
                                          tuple(types["targets"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"its node types are damaged ({exc})") from None
        if len(offsets) != len(types["names"]) + 1 or (np.diff(offsets) < 0).any():
            raise ValueError("its node types' offsets do not match their names")
    if "typed_relations" in meta:
        out["typed_relations"] = tuple(tuple(key) for key in meta["typed_relations"])
    for field in (_EDGES, _FEATURES):
        if field in meta:
            out[field] = {name: torch.as_tensor(get(f"{field}.{i}")) for i, name in enumerate(meta[field])}
    return out

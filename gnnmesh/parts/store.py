"""The on-disk layout of a partitioned dataset and its reader.

A parts directory holds one folder per rank with everything that rank trains on and
nothing else, plus a manifest that says how it was made:

    manifest.json       format, kind (the strategy it serves), the graph's fingerprint and
                        sizes, the task its labels imply (``gnnmesh.tasks.infer``), how it
                        was cut, per-rank counts and every file's checksum
    rank-00000/         rank 0's arrays as plain .npy files (see the writer of each kind)
    rank-00001/ ...

This module checks what every kind shares; the module of each kind's writer (the registry's
``parts`` entry) checks the fields and names the arrays its kind adds (``check_fields``,
``required_files``).

A rank opens the manifest and its own folder only, so a host may hold just the folders of
the ranks it runs. Files are verified against the manifest's checksums before use: a
missing, truncated or altered file is a GraphError naming it.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import strategies, tasks
from ..atomic import OutputKind, checksum
from ..errors import ConfigError, GraphError
from ..graph import MAX_CLASSES, Adjacency, check_vertex_data
from .features import MappedFeatures
from ..structured import load_json
from ..relations import parse
from ..tasks import infer
from ..typed import NodeTypes

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ASCENDING = ("owned",)  # id arrays every writer stores in ascending order (a rank's own nodes)
WRITE_HINT = "write them with 'gnnmesh partition --write-parts DIR'"


def rank_folder(rank: int) -> str:
    return f"rank-{rank:05d}"


def save_array(folder: Path, name: str, array, files: dict) -> None:
    """Write ``array`` as ``folder/name.npy`` and record its checksum in ``files``."""
    path = folder / f"{name}.npy"
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)
    files[name] = checksum(path)


def graph_facts(graph, num_features: int, dataset: str) -> dict:
    """The manifest fields every kind shares: which graph, and the sizes a model needs. A graph
    with edge features is refused: no kind of parts carries them yet."""
    from ..partition import graph_key
    if graph.adj.edge_features is not None:
        raise ConfigError(f"{graph.name}: the graph has edge features ({graph.adj.edge_features.shape[1]} per edge), "
                          "which parts do not carry yet; train from the graph itself, or load it without them "
                          "(edge_attr=False) to write parts")
    return {"format": FORMAT_VERSION, "dataset": dataset, "name": graph.name,
            "fingerprint": graph_key(graph.adj), "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges, "num_features": int(num_features),
            "num_classes": int(graph.num_classes), "task": infer(graph.y)[0], "directed": bool(graph.directed),
            "weighted": graph.adj.values is not None, **_node_types_fact(graph)}


def _node_types_fact(graph) -> dict:
    """A typed graph's node types (``gnnmesh.typed.NodeTypes``), which name the rows of its
    predictions; nothing for another graph."""
    types = graph.meta.get("node_types")
    if not isinstance(types, NodeTypes):
        return {}
    return {"node_types": {"names": list(types.names), "offsets": [int(v) for v in types.offsets],
                           "widths": [int(v) for v in types.widths], "targets": list(types.targets)}}


def write_manifest(folder: Path, manifest: dict) -> None:
    with open(folder / MANIFEST, "w") as fh:
        json.dump(manifest, fh)


def load_versioned(path: Path, version: int) -> dict:
    """The JSON object in ``path`` when its "format" is ``version``: a manifest of parts or of
    block files (a ValueError naming the format it holds otherwise)."""
    with open(path) as fh:
        manifest = load_json(fh)
    if not isinstance(manifest, dict) or manifest.get("format") != version:
        found = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise ValueError(f"format {_show(found)}, expected {version}")
    return manifest


def open_parts(directory) -> "Parts":
    """The parts written into ``directory``; a missing or unreadable manifest is a GraphError."""
    path = Path(directory) / MANIFEST
    try:
        return Parts(Path(directory), load_versioned(path, FORMAT_VERSION))
    except FileNotFoundError:
        if not Path(directory).is_dir():
            raise ConfigError(f"{directory}: no such parts directory ({WRITE_HINT})") from None
        raise GraphError(f"{path}: missing; not a parts directory ({WRITE_HINT})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GraphError(f"{path}: unreadable parts manifest: {' '.join(str(exc).split())}") from None


def written_files(directory) -> list:
    """The files the parts in ``directory`` consist of: the manifest and every rank's arrays it
    lists (a GraphError or ConfigError when the manifest is not a parts manifest)."""
    parts = open_parts(directory)
    return [MANIFEST] + [f"{rank_folder(r)}/{name}.npy" for r, rank in enumerate(parts.manifest["ranks"])
                         for name in rank["files"]]


OUTPUT = OutputKind("parts directory", MANIFEST, written_files)  # what every parts writer may replace

KINDS = tuple(s.name for s in strategies.REGISTRY.values() if s.parts)  # the strategies that write parts
COUNT_LIMIT = 2**48  # no graph, width or part count reaches it; past it a count is damage


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_count(value, low: int = 0, high: int = COUNT_LIMIT) -> bool:
    """Whether ``value`` is an int (not a bool) in ``[low, high]``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


VERTEX_FILES = ("x", "y", "train_mask", "val_mask", "test_mask")  # in every rank's folder of every kind


class ManifestFields:
    """A parts manifest being checked: ``need`` raises a ValueError naming the first field no
    writer writes (a count that is no count, a name that is no string, a list of the wrong length)."""

    def __init__(self, manifest: dict):
        self.m = manifest

    def need(self, field: str, ok, what: str) -> None:
        if not ok:
            value = self.m
            for key in field.replace("]", "").replace("[", ".").split("."):
                value = value.get(key) if isinstance(value, dict) else \
                    value[int(key)] if isinstance(value, list) and key.isdigit() and int(key) < len(value) else None
            raise ValueError(f"field '{field}' must be {what}, got {_show(value)}")


def kind_format(kind: str):
    """The module of ``kind``'s parts writer (the registry's ``parts`` entry): it checks the
    manifest fields its kind adds (``check_fields``) and names its arrays (``required_files``)."""
    writer = next(s.parts for s in strategies.REGISTRY.values() if s.name == kind and s.parts)
    return importlib.import_module(writer.partition(":")[0])


def _check_manifest(m: dict) -> None:
    """Check the fields every kind shares, then the kind's own (its writer's ``check_fields``),
    so that a rank reads its arrays against sound sizes; the arrays are checked as they load."""
    fields = ManifestFields(m)
    need = fields.need
    need("kind", m.get("kind") in KINDS, f"one of {', '.join(KINDS)}")
    need("parts", is_count(m.get("parts"), 1, 2**31), "a count of parts >= 1")
    for field in ("name", "dataset", "how", "fingerprint"):
        need(field, isinstance(m.get(field), str), "a string")
    need("num_nodes", is_count(m.get("num_nodes"), 1), "a node count >= 1")
    need("num_features", is_count(m.get("num_features"), 1, 2**31), "a width >= 1")
    need("num_classes", is_count(m.get("num_classes"), 1, MAX_CLASSES), f"a width in [1, {MAX_CLASSES:,}]")
    if "node_types" in m:
        _check_node_types(fields)
    parts, ranks = m["parts"], m.get("ranks")
    need("ranks", isinstance(ranks, list) and len(ranks) == parts, f"a list of {parts} rank entries")
    for r, rank in enumerate(ranks):
        need(f"ranks[{r}]", isinstance(rank, dict), "an object")
        files = rank.get("files")
        need(f"ranks[{r}].files", isinstance(files, dict) and all(
            isinstance(k, str) and k and "/" not in k and not k.startswith(".") and isinstance(v, str)
            for k, v in files.items()), "an object of file names and checksums")
    kind = kind_format(m["kind"])
    kind.check_fields(fields)
    required = list(VERTEX_FILES) + kind.required_files(m)
    for r, rank in enumerate(ranks):
        missing = [name for name in required if name not in rank["files"]]
        need(f"ranks[{r}].files", not missing, f"an object listing every file of the rank (no {missing[:1]})")


def _check_node_types(fields: ManifestFields) -> None:
    """A typed graph's node types: names, their id ranges' bounds (ascending, from 0 to the
    graph's nodes), widths, and targets among the names."""
    types, need = fields.m["node_types"], fields.need
    need("node_types", isinstance(types, dict), "an object")
    names, offsets = types.get("names"), types.get("offsets")
    need("node_types.names", isinstance(names, list) and names and all(isinstance(n, str) and n for n in names),
         "a list of node type names")
    need("node_types.offsets", isinstance(offsets, list) and len(offsets) == len(names) + 1
         and all(is_count(v) for v in offsets) and offsets[0] == 0 and offsets[-1] == fields.m.get("num_nodes")
         and all(a <= b for a, b in zip(offsets, offsets[1:])),
         f"{len(names) + 1} ascending ids from 0 to the graph's nodes")
    widths, targets = types.get("widths"), types.get("targets")
    need("node_types.widths", isinstance(widths, list) and len(widths) == len(names)
         and all(is_count(v) for v in widths), f"a list of {len(names)} widths")
    need("node_types.targets", isinstance(targets, list) and all(t in names for t in targets),
         "a list of node type names")


class Parts:
    """An opened parts directory: the manifest's facts, and each rank's folder on demand."""

    def __init__(self, directory: Path, manifest: dict):
        _check_manifest(manifest)
        self.directory, self.manifest = directory, manifest
        self.kind = str(manifest["kind"])
        self.parts = int(manifest["parts"])
        self.name = str(manifest["name"])
        self.dataset = str(manifest["dataset"])
        self.num_nodes = int(manifest["num_nodes"])
        self.num_features = int(manifest["num_features"])
        self.num_classes = int(manifest["num_classes"])  # the output width: classes, or targets
        self.task = str(manifest.get("task", "classification"))  # what the labels are, as inferred when written
        if self.task not in tasks.names():
            raise ValueError(f"task {self.task!r}, expected one of {', '.join(tasks.names())}")
        if len(manifest["ranks"]) != self.parts:
            raise ValueError(f"{len(manifest['ranks'])} rank entries for {self.parts} parts")

    @property
    def relations(self) -> tuple:
        """A typed graph's relations, in the graph's order: as the manifest lists them (tensor
        parts) or as its parts name their operators (``mean@cites``); none for another graph."""
        if "relations" in self.manifest:
            return tuple(self.manifest["relations"])
        named = (parse(name) for name in self.manifest.get("operators", {}))
        return tuple(dict.fromkeys(relation for _, relation in filter(None, named)))

    @property
    def node_types(self):
        """A typed graph's ``NodeTypes`` as the manifest records them (None for another graph)."""
        fact = self.manifest.get("node_types")
        if fact is None:
            return None
        return NodeTypes(tuple(fact["names"]), np.asarray(fact["offsets"], dtype=np.int64), tuple(fact["widths"]),
                         tuple(fact["targets"]))

    def describe(self) -> str:
        return (f"{self.kind} parts of {self.name} ({self.manifest['how']}, {self.parts} "
                f"rank{'s' if self.parts != 1 else ''})")

    def check_run(self, strategy: str, world_size: int, dataset: Optional[str] = None) -> None:
        """A ConfigError naming the manifest when these parts cannot serve this run."""
        where = self.directory / MANIFEST
        if strategy != self.kind:  # parts are written for one strategy (its registry entry's writer)
            raise ConfigError(f"{where}: these are {self.describe()}; they train with "
                              f"--strategy {self.kind}, not {strategy}")
        if world_size != self.parts:
            raise ConfigError(f"{where}: these are {self.describe()}; this job has {world_size} "
                              f"rank{'s' if world_size != 1 else ''} (start one rank per part: 'gnnmesh train "
                              f"--nproc {self.parts}', or 'torchrun --nproc-per-node {self.parts}' for a script)")
        if dataset is not None and dataset != self.dataset:
            raise ConfigError(f"{where}: these parts hold dataset {self.dataset!r}, not {dataset!r}")

    def rank(self, rank: int) -> "RankPart":
        """Rank ``rank``'s folder, every file verified against the manifest."""
        if not 0 <= rank < self.parts:
            raise ConfigError(f"rank {rank} out of range for {self.parts} parts")
        part = RankPart(self, rank)
        part.verify()
        return part


class RankPart:
    """One rank's folder: arrays by name, each checked against the manifest when read."""

    def __init__(self, parts: Parts, rank: int):
        self.parts, self.rank = parts, rank
        self.folder = parts.directory / rank_folder(rank)
        self.info = parts.manifest["ranks"][rank]
        self.files: dict = self.info["files"]

    def verify(self) -> None:
        if not self.folder.is_dir():
            raise GraphError(f"{self.folder}: missing; this host has no folder for rank {self.rank} "
                             f"({WRITE_HINT}, or copy the folder here)")
        for name, expected in self.files.items():
            path = self.folder / f"{name}.npy"
            try:
                actual = checksum(path)
            except FileNotFoundError:
                raise GraphError(f"{path}: missing part file ({WRITE_HINT})") from None
            except OSError as exc:
                raise GraphError(f"{path}: unreadable part file: {exc.strerror or exc}") from None
            if actual != expected:
                raise GraphError(f"{path}: corrupt part file (checksum {actual}, the manifest "
                                 f"says {expected}); {WRITE_HINT}")

    def has(self, name: str) -> bool:
        return name in self.files

    def array(self, name: str, mapped: bool = False) -> np.ndarray:
        """The array ``name`` read into memory, or ``mapped`` from its file (copy on write)."""
        if name not in self.files:
            raise GraphError(f"{self.parts.directory / MANIFEST}: rank {self.rank} has no array {name!r}")
        path = self.folder / f"{name}.npy"
        try:
            array = np.load(path, mmap_mode="c" if mapped else None, allow_pickle=False)
        except Exception as exc:  # numpy raises several types for a damaged header
            raise GraphError(f"{path}: unreadable part file: {' '.join(str(exc).split())[:200]}") from None
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
            raise GraphError(f"{path}: unreadable part file: holds {getattr(array, 'dtype', type(array).__name__)}, "
                             "not numbers")
        return array

    def tensor(self, name: str) -> torch.Tensor:
        return torch.from_numpy(self.array(name))

    # -- read back and checked: a checksum says a file is the one written, not that it is sound
    def where(self, name: str) -> str:
        return f"{self.folder / name}.npy: "

    def ids(self, name: str, high: int) -> np.ndarray:
        """Integer ids in [0, ``high``), a 1-D array; a GraphError naming the file otherwise."""
        ids = self.array(name)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise GraphError(self.where(name) + f"expected a 1-D array of integer ids, got {ids.dtype} "
                             f"of shape {list(ids.shape)}")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= high):
            position = int(np.flatnonzero((ids < 0) | (ids >= high))[0])
            raise GraphError(self.where(name) + f"id {int(ids[position])} at position {position} is outside "
                             f"[0, {high})")
        length = self._declared_length(name)
        if length is not None and len(ids) != length:
            raise GraphError(self.where(name) + f"{len(ids)} ids, the manifest says rank {self.rank} has {length}")
        if name in ASCENDING and ids.size > 1 and not bool((ids[1:] > ids[:-1]).all()):
            position = int(np.flatnonzero(ids[1:] <= ids[:-1])[0]) + 1
            raise GraphError(self.where(name) + f"id {int(ids[position])} at position {position} does not "
                             "follow the one before it in ascending order, as the ids are written")
        return ids

    def _declared_length(self, name: str) -> Optional[int]:
        """How many ids the manifest says the array ``name`` holds (None: it does not say)."""
        if name == "owned":
            return self.info.get("owned")
        structure, _, part = name.rpartition(".")
        info = self.parts.manifest.get("structures", {}).get(structure)
        if info is None:
            return None
        counts = info["send_counts"]
        return {"entries": info["nnz"][self.rank], "send": sum(counts[self.rank]),
                "halo": sum(row[self.rank] for row in counts)}.get(part)

    def adjacency(self, prefix: str, shape: tuple, values: Optional[str] = None) -> Adjacency:
        """The CSR block ``prefix.indptr/indices`` of ``shape`` with the array ``values`` as its
        entries (None: unweighted), checked as every graph is (structure sorted and in range,
        values finite) before a kernel indexes with it."""
        if values is not None:
            name, values = values, self.tensor(values)
            if values.dtype != torch.float32:
                raise GraphError(self.where(name) + f"expected float32 values, as written, got {values.dtype}")
        indptr, indices = self.tensor(f"{prefix}.indptr"), self.tensor(f"{prefix}.indices")
        for name, array in ((f"{prefix}.indptr", indptr), (f"{prefix}.indices", indices)):
            if array.dim() != 1 or array.is_floating_point() or array.dtype == torch.bool:
                raise GraphError(self.where(name) + f"expected a 1-D integer array, got {array.dtype} "
                                 f"of shape {list(array.shape)}")
        adj = Adjacency(indptr.to(torch.int64), indices.to(torch.int64), values, tuple(int(v) for v in shape))
        return adj.check(str(self.folder / prefix))

    def vertex_data(self, rows: int, width: Optional[int] = None, x_rows: Optional[int] = -1,
                    mapped: bool = False) -> tuple:
        """(x, y, train_mask, val_mask, test_mask) of this rank's ``rows`` rows, checked as every
        graph's vertex data is (``graph.check_vertex_data``): x float [``x_rows``, ``width``]
        (``x_rows`` -1: ``rows``; None: any, for a block of features), labels of the manifest's
        task within its classes (or targets of its width), boolean masks that do not overlap.
        ``mapped``: x is a ``MappedFeatures`` of the file, checked a block at a time, rather
        than a tensor read into memory."""
        features = MappedFeatures(self.array("x", mapped=True), self.where("x")) if mapped else None
        x, y = self.tensor("x") if features is None else features.tensor, self.tensor("y")
        masks = {name: self.tensor(name) for name in ("train_mask", "val_mask", "test_mask")}
        where = str(self.folder) + ": "
        class_ids = y.dim() == 1 and not y.is_floating_point()
        if class_ids != tasks.spec(self.parts.task).class_ids:
            raise GraphError(self.where("y") + f"holds {y.dtype} of shape {list(y.shape)}, not the "
                             f"{self.parts.task} labels the manifest says")
        check_vertex_data(where, rows, None, y, self.parts.num_classes, masks)
        count = x.shape[0] if x_rows is None and x.dim() == 2 else rows if x_rows == -1 else x_rows
        check_vertex_data(where, count, x, None, None, {}, width, finite=features is None)
        if x.dtype != torch.float32:
            raise GraphError(self.where("x") + f"expected float32 features, as written, got {x.dtype}")
        if features is not None:
            features.check_finite()
        return (x if features is None else features, y, *masks.values())

    def orders(self, name: str, nodes: int, count: int = 2) -> np.ndarray:
        """Node orders [``count``, ``nodes``] (grid3d's two), each a permutation of 0..nodes-1."""
        orders = self.array(name)
        if orders.shape != (count, nodes) or orders.dtype.kind not in "iu":
            raise GraphError(self.where(name) + f"expected {count} integer orders of {nodes} nodes, got "
                             f"{orders.dtype} of shape {list(orders.shape)}")
        every = np.arange(nodes)
        for i, order in enumerate(orders):
            if not np.array_equal(np.sort(order), every):
                raise GraphError(self.where(name) + f"order {i} is not a permutation of the {nodes} nodes")
        return orders

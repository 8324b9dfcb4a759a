"""The dataset registry: one table of named datasets (real data under a data root, and
generators), plus ``load`` which also accepts graph file paths and spec strings."""

from __future__ import annotations

import os
from collections import namedtuple
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import torch

from .. import progress
from ..errors import GraphError
from ..graph import Graph
from ..typed import untyped
from . import cache, described, ogb, ogb_typed, sharded
from ._io import file_stat
from ._build import random_split
from .bundled import ROOT as BUNDLED_ROOT
from .files import EDGE_LIST_SUFFIXES, FILE_OPTIONS, graph_name, load_file, load_mtx
from .generators import RMAT_OPTIONS, SBM_OPTIONS, rmat, sbm
from .musae import load_musae
from .options import COMMON, SPLIT, Option, parse_spec, resolve
from .planetoid import load_planetoid
from .snap import load_email_eu_core, load_slashdot
from .typed_generators import IGBH_OPTIONS, igbh

DatasetInfo = namedtuple("DatasetInfo", "name description nodes edges features classes present")

FILE_LOADER_VERSION = 1


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    build: Callable[..., Graph]     # build(paths_by_role, **options) or build(**options)
    files: dict = field(default_factory=dict)   # role -> path under root, or (zip, member)
    optional: tuple = ()            # roles used only when present
    options: dict = field(default_factory=dict)
    nodes: Optional[int] = None     # sizes as the data's sources count them (edges: node
    edges: Optional[int] = None     # pairs for undirected graphs, stored entries if directed)
    features: Optional[int] = None
    classes: Optional[int] = None
    directed: bool = False
    version: int = 1                # bump when the loader's output changes: new cache key
    typed: bool = False             # a typed graph's union (gnnmesh.typed): built at every load, see load

    def stored_edges(self) -> Optional[int]:
        """The edges as ``Graph.num_edges`` counts them once loaded: each undirected pair is
        stored both ways (undirected graphs hold no self-loops)."""
        if self.edges is None or self.directed:
            return self.edges
        return 2 * self.edges

    def paths(self, root: Path) -> dict:
        def where(spec):
            return (root / spec[0], spec[1]) if isinstance(spec, tuple) else root / spec
        return {role: where(spec) for role, spec in self.files.items()}

    def missing(self, root: Path) -> list:
        out = []
        for role, spec in self.files.items():
            rel = spec[0] if isinstance(spec, tuple) else spec
            if role not in self.optional and not (root / rel).is_file():
                out.append(rel)
        return out


FEATURES = {"features": Option("dense", str, "node features: dense 0/1 float32 matrix, torch "
                                             "sparse CSR, or none", choices=("dense", "sparse", "none"))}
AS_UNDIRECTED = {"as_undirected": Option(False, bool, "symmetrise, merge duplicates and drop "
                                                      "self-loops")}


def _planetoid(name, folder, nodes, edges, features, classes, partial=False):
    files = {part: f"{folder}/ind.{name}.{part}"
             for part in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")}
    options = {} if partial else {"normalize_features": Option(
        True, bool, "row-normalise the bag-of-words features, as Kipf & Welling do")}
    title = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}[name]
    desc = (f"{title} citation graph (Planetoid), public split "
            + ("[PARTIAL: allx missing, so no features]" if partial else ""))
    return Dataset(name, desc.strip(), lambda paths, **o: load_planetoid(paths, name, **o),
                   files=files, optional=("x", "tx", "allx") if partial else (),
                   options=options, nodes=nodes, edges=edges, features=features, classes=classes)


def _musae(name, desc, files, nodes, edges, features, classes, **kwargs):
    options = {**(FEATURES if "features" in files else {}), **SPLIT}
    return Dataset(name, desc, lambda paths, **o: load_musae(paths, name, **kwargs, **o),
                   files=files, options=options, nodes=nodes, edges=edges,
                   features=features, classes=classes)


def _twitch(lang, nodes, edges):
    folder = f"twitch/{lang}"
    json_name = f"{lang}.json.gz" if lang in ("DE", "TW") else f"{lang}_features.json.gz"
    files = {"edges": f"{folder}/{lang}_edges.csv.gz", "target": f"{folder}/{lang}_target.csv.gz",
             "features": f"{folder}/{json_name}"}
    # Feature ids are shared by the seven graphs (0..3169), so the width is fixed.
    return _musae(f"twitch-{lang.lower()}", f"Twitch {lang} users (MUSAE), label = mature",
                  files, nodes, edges, 3170, 2, id_column="new_id", label_column="mature",
                  feature_dim=3170)


def _mtx(name, desc, rel, nodes, edges, is_directed, **kwargs):
    def build(paths):
        graph = load_mtx(paths["matrix"], **kwargs)
        graph.name = name
        return graph
    return Dataset(name, desc, build, files={"matrix": rel}, nodes=nodes, edges=edges,
                   features=0, directed=is_directed)


def _generator(name, desc, fn, options, **kwargs):
    return Dataset(name, desc, lambda paths, **o: fn(**o), options=options, **kwargs)


_FB = "facebook_page_page/facebook_"
_GIT = ("github_musae/git_web_ml.zip", "git_web_ml/musae_git_")
_DZ = ("deezer_europe/deezer_europe.zip", "deezer_europe/deezer_europe_")

DATASETS = [
    _planetoid("cora", "planetoid/raw", 2708, 5278, 1433, 7),
    _planetoid("citeseer", "planetoid/raw", 3327, 4552, 3703, 6),
    _planetoid("pubmed", "pubmed_partial/raw", 19717, 44324, 0, 3, partial=True),
    _musae("facebook", "Facebook page-page graph (MUSAE), label = page type",
           {"edges": _FB + "edges.csv.gz", "target": _FB + "target.csv.gz",
            "features": _FB + "features.json.gz"},
           22470, 170823, 4714, 4, label_column="page_type"),
    _musae("github", "GitHub developers (MUSAE), label = ML vs web developer",
           {role: (_GIT[0], f"{_GIT[1]}{part}") for role, part in
            (("edges", "edges.csv"), ("target", "target.csv"), ("features", "features.json"))},
           37700, 289003, 4005, 2, label_column="ml_target"),
    _musae("deezer", "Deezer Europe users (FEATHER), label = gender; dense x is 3.5 GB",
           {role: (_DZ[0], f"{_DZ[1]}{part}") for role, part in
            (("edges", "edges.csv"), ("target", "target.csv"), ("features", "features.json"))},
           28281, 92752, 31241, 2, label_column="target"),
    _musae("lastfm", "LastFM Asia users (FEATHER), label = country [PARTIAL: no features]",
           {"edges": "lastfm_asia/lastfm_asia_edges.csv.gz",
            "target": "lastfm_asia/lastfm_asia_target.csv.gz"},
           7624, 27806, 0, 18, label_column="target"),
    _twitch("DE", 9498, 153138),
    _twitch("ENGB", 7126, 35324),
    _twitch("ES", 4648, 59382),
    _twitch("FR", 6549, 112666),
    _twitch("PTBR", 1912, 31299),
    _twitch("RU", 4385, 37304),
    _twitch("TW", 2772, 63462),
    Dataset("email-eu-core", "email-Eu-core (SNAP), directed, label = department",
            load_email_eu_core,
            files={"edges": "email-Eu-core/email-Eu-core.txt.gz",
                   "labels": "email-Eu-core/email-Eu-core-department-labels.txt.gz"},
            options={**AS_UNDIRECTED, **SPLIT}, nodes=1005, edges=25571, features=0,
            classes=42, directed=True),
    Dataset("slashdot", "soc-Slashdot0902 (SNAP), directed, unlabeled", load_slashdot,
            files={"edges": "soc-Slashdot0902/soc-Slashdot0902.txt.gz"},
            options=dict(AS_UNDIRECTED), nodes=82168, edges=948464, features=0, directed=True),
    _mtx("luxembourg-osm", "luxembourg_osm road graph (DIMACS10), unlabeled",
         "luxembourg_osm/luxembourg_osm.mtx.gz", 114599, 119666, False, directed=False),
    _mtx("karate", "Zachary karate club (SuiteSparse Newman/karate), unlabeled",
         "gunduzvd_mtx/karate.mtx", 34, 78, False),
    _mtx("gemat11", "HB/gemat11 sparse matrix (SuiteSparse), weighted, directed",
         "gunduzvd_mtx/gemat11.mtx.gz", 4929, 33185, True),
    _generator("sbm", "stochastic block model with class-mean features (generated)",
               sbm, SBM_OPTIONS),
    _generator("rmat", "R-MAT / Graph500 power-law graph, random features (generated)",
               rmat, RMAT_OPTIONS),
    _generator("igbh-synth", "typed graph with IGBH's schema (paper, author, institute, fos), labels "
               "from the relations (generated)", igbh, IGBH_OPTIONS, typed=True),
]
REGISTRY = {d.name: d for d in DATASETS}


def names() -> list:
    """Registered dataset names, real datasets first, then generators."""
    return [d.name for d in DATASETS]


def _lookup(name: str) -> Optional[Dataset]:
    return REGISTRY.get(name.strip().lower().replace("_", "-"))  # also 'Twitch_DE'


def _data_root(root) -> Optional[Path]:
    if root is None:
        root = os.environ.get("GNNMESH_DATA") or None
    return None if root is None else Path(root).expanduser()


def available(root=None) -> list:
    """One DatasetInfo per registered dataset (``edges`` as ``Graph.num_edges`` counts them:
    both directions of an undirected edge); ``present`` tells whether its files exist
    under ``root`` (default ``$GNNMESH_DATA``) or in the package (Cora, CiteSeer).
    Generators are always present."""
    base = _data_root(root)
    out = []
    for d in DATASETS:
        present = not d.files or _holds(base, d) or _holds(BUNDLED_ROOT, d)
        out.append(DatasetInfo(d.name, d.description, d.nodes, d.stored_edges(), d.features, d.classes,
                               present))
    return out


def dataset_options(name: str) -> dict:
    """``{option: description}`` for a dataset name (or 'file' for graph files)."""
    dataset = _lookup(name)
    if dataset is None and name != "file":
        raise GraphError(f"unknown dataset '{name}'; known datasets: {', '.join(names())}")
    declared = FILE_OPTIONS if dataset is None else dataset.options
    return {k: o.describe() for k, o in {**COMMON, **declared}.items()}


def _file_spec(text: str) -> tuple[str, dict]:
    """A file path and its options, split at the last ':' (a path may contain ':' too)."""
    path, _, options = text.rpartition(":")
    if "=" in options and "/" not in options:
        return path, parse_spec(":" + options)[1]
    return parse_spec(text)


def _resolve_target(text: str, root) -> tuple[Optional[Dataset], dict, Optional[Path]]:
    head, sep, _ = text.partition(":")
    dataset = _lookup(head)
    if dataset is not None:
        _, spec = parse_spec(text)
        return dataset, spec, None
    spec: dict = {}
    if sep and "=" in text and not Path(text).expanduser().exists():
        text, spec = _file_spec(text)  # 'edges.txt:directed=false'
    path = Path(text).expanduser()
    base = _data_root(root)
    candidates = [path] + ([base / path] if base is not None and not path.is_absolute() else [])
    for candidate in candidates:
        if candidate.exists():
            if candidate.is_dir() and not ogb.is_ogb_dir(candidate) and \
                    not (candidate / sharded.META).is_file():
                raise GraphError(f"{candidate}: is a directory, expected a graph file or an "
                                 f"OGB dataset directory ({ogb.LAYOUT}), or a shard set's "
                                 f"directory (with its {sharded.META})")
            return None, spec, candidate
    looks_like_file = os.sep in text or "/" in text or path.suffix.lower() in \
        EDGE_LIST_SUFFIXES + (".mtx", ".npz", ".gz", described.SUFFIX)
    if looks_like_file:
        raise GraphError(f"{path}: file not found"
                         + (f" (also not under data root {base})" if base is not None
                            and not path.is_absolute() else ""))
    raise GraphError(f"unknown dataset '{text}'; known datasets: {', '.join(names())}; or pass "
                     f"the path of an edge list ({'/'.join(EDGE_LIST_SUFFIXES)}), .mtx or .npz "
                     f"file, or of an OGB dataset directory")


def _holds(base: Optional[Path], dataset: Dataset) -> bool:
    return base is not None and base.is_dir() and not dataset.missing(base)


def _dataset_files(dataset: Dataset, root) -> tuple[dict, list]:
    """The dataset's files under the data root (by role) and their cache-key stamps; the
    copy in the package when the data root does not hold them."""
    if not dataset.files:
        return {}, []
    base = _data_root(root)
    if not _holds(base, dataset) and _holds(BUNDLED_ROOT, dataset):
        base = BUNDLED_ROOT
    fetch = f"gnnmesh datasets --fetch {dataset.name}"
    if base is None:
        raise GraphError(f"dataset '{dataset.name}' needs its data files: pass --data-root DIR "
                         f"(root=... in Python) or set GNNMESH_DATA; to download them: {fetch}")
    if not base.is_dir():
        raise GraphError(f"data root {base} is not a directory")
    missing = dataset.missing(base)
    if missing:
        raise GraphError(f"dataset '{dataset.name}': missing under {base}: {', '.join(missing)}; "
                         f"to download them: {fetch}")
    paths = {role: p for role, p in dataset.paths(base).items()
             if (p[0] if isinstance(p, tuple) else p).is_file()}  # optional ones may be absent
    stamps = [[role] + file_stat(p[0] if isinstance(p, tuple) else p)[1:]  # size, mtime
              for role, p in sorted(paths.items())]
    return paths, stamps


@dataclass
class Target:
    """A dataset spec resolved: what it names and its checked options (``opts``: those the
    loader takes; the common ones apart)."""
    kind: str                       # "dataset" (registered), "ogb", "ogb-typed", "shards", "described" or "file"
    dataset: Optional[Dataset]
    path: Optional[Path]
    opts: dict
    use_cache: bool
    cache_dir: Optional[str]
    random_labels: int
    keep_types: bool = True         # a typed graph's: False loads its union as one node and edge type

    @property
    def typed(self) -> bool:
        """Whether it loads as a typed graph's union (``gnnmesh.typed``)."""
        return self.kind == "ogb-typed" or (self.dataset is not None and self.dataset.typed)


# What a typed graph's spec takes besides its own options.
TYPED = {"typed": Option(True, bool, "false: load the union as one node and edge type, for a model without "
                         "relations (gcn, sage, gat, gin)")}


def resolve_target(name_or_path: Union[str, os.PathLike], root=None, **options) -> Target:
    """What ``load`` would load for these arguments, without loading it."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise GraphError(f"load() expects a dataset name or a file path, got "
                         f"{type(name_or_path).__name__}")
    dataset, spec, path = _resolve_target(os.fspath(name_or_path), root)
    if dataset is not None:
        kind = "dataset"
    elif not path.is_dir():
        kind = "described" if path.name.lower().endswith(described.SUFFIX) else "file"
    else:
        kind = ("ogb-typed" if ogb_typed.is_typed_ogb_dir(path) else "ogb") if ogb.is_ogb_dir(path) else "shards"
    where = dataset.name if dataset is not None else str(path)
    declared = {"dataset": dataset.options if dataset is not None else None,
                "ogb": ogb.OPTIONS, "ogb-typed": ogb_typed.OPTIONS, "shards": {}, "file": FILE_OPTIONS,
                "described": described.OPTIONS}[kind]
    typed = kind == "ogb-typed" or (dataset is not None and dataset.typed)
    opts = resolve({**COMMON, **declared, **(TYPED if typed else {})}, {**spec, **options}, where)
    use_cache, cache_dir = opts.pop("cache"), opts.pop("cache_dir")
    random_labels = opts.pop("random_labels")
    keep_types = opts.pop("typed", True)
    if opts.get("split_seed", 0) is None:
        opts["split_seed"] = opts["seed"]
    if "seed" not in declared:  # unused here: keep it out of the call and the cache key
        del opts["seed"]
    return Target(kind, dataset, path, opts, use_cache, cache_dir, random_labels, keep_types)


def load(name_or_path: Union[str, os.PathLike], root=None, **options) -> Graph:
    """Load a dataset by name, spec string or file path.

    ``name_or_path``: a registered name (case-insensitive, see ``names()``), optionally with
    options as ``'name:key=value,...'``; or a graph file, an OGB node-property dataset
    directory (see ``ogb.py``; a typed one: ``ogb_typed.py``), a shard set's directory (see ``sharded.py``; read whole,
    never cached) or a dataset description, a ``.toml`` file naming the user's own edge,
    feature, label and split files (see ``described.py``), absolute, relative to the working directory, or relative to ``root``.
    Keyword options override spec-string options.
    ``root``: the data directory (default ``$GNNMESH_DATA``). Options common to all:
    ``seed`` (generators' seed, default ``split_seed``), ``cache`` (default True) and
    ``cache_dir``.
    """
    target = resolve_target(name_or_path, root, **options)
    dataset, path, opts = target.dataset, target.path, target.opts

    if target.kind == "shards":
        graph = sharded.open_shards(path).graph()
        return with_random_labels(graph, target.random_labels) if target.random_labels else graph
    if target.kind == "ogb":
        sources = ogb.source_files(path)
        key_name, version = ogb.dataset_name(path), ogb.LOADER_VERSION

        def build():
            return ogb.load_ogb(path, **opts)
    elif target.kind == "ogb-typed":
        sources, key_name, version = ogb_typed.source_files(path), ogb.dataset_name(path), ogb_typed.LOADER_VERSION

        def build():
            return ogb_typed.load_ogb_typed(path, **opts)
    elif target.kind == "described":
        sources = described.read_description(path).sources()
        key_name, version = path.stem, described.LOADER_VERSION

        def build():
            return described.load_described(path, **opts)
    elif target.kind == "file":
        sources = [file_stat(path)]
        key_name, version = graph_name(path), FILE_LOADER_VERSION

        def build():
            return load_file(path, **opts)
    else:
        paths, sources = _dataset_files(dataset, root)
        key_name, version = dataset.name, dataset.version

        def build():
            return dataset.build(paths, **opts)

    if not target.use_cache:
        graph = build()
    else:
        entry = cache.entry_dir(cache.default_dir(target.cache_dir), key_name, version, opts, sources)
        graph = cache.load(entry)
        if graph is None:
            graph = build()
            with progress.phase(f"writing {key_name} to the dataset cache"):
                cache.save(graph, entry)
    if target.typed and not target.keep_types:  # cached typed: ':typed=false' reads the same entry
        graph = untyped(graph)
    return with_random_labels(graph, target.random_labels) if target.random_labels else graph


def random_labels(num_nodes: int, classes: int, name: str) -> tuple:
    """(labels, masks, split info) that the option ``random_labels`` gives a graph of
    ``num_nodes`` nodes without labels: seeded random classes and a random 60/20/20 split."""
    if classes < 1:
        raise GraphError(f"{name}: option 'random_labels' must be >= 1, got {classes}")
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, num_nodes)
    masks, split = random_split(num_nodes, y, 0.6, 0.2, seed=0)
    return y, masks, split


def with_random_labels(graph: Graph, classes: int) -> Graph:
    """``graph`` with the labels and split of the option ``random_labels`` when it has none."""
    if graph.y is not None and classes >= 1:
        return graph
    y, masks, _ = random_labels(graph.num_nodes, classes, graph.name)
    return graph.replace(y=torch.from_numpy(y), num_classes=classes, **masks)

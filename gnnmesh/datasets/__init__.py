"""Datasets: real graphs under a data root (Cora and CiteSeer also ship in the package),
synthetic generators and graph files, all through one ``load`` with an on-disk cache.

    >>> from gnnmesh.datasets import load
    >>> g = load("cora")                                     # the copy in the package
    >>> g = load("facebook", root="/data")                   # or set GNNMESH_DATA
    >>> g = load("rmat:nodes=1000000,edges=10000000,features=128")
    >>> g = load("sbm", nodes=5000, classes=5)
    >>> g = load("graphs/web.txt.gz", directed=False)         # edge list / .mtx / .npz
    >>> g = load("ogb/ogbn-arxiv")                            # an OGB node-property directory
    >>> g = load("shards")                                    # a shard set's directory (sharded.py)

Spec strings: ``name:key=value,key=value`` (also ``file.txt:key=value``). Values are
converted to the option's type (``nodes=1e6`` is an int, ``undirected=true`` a bool,
``none`` clears an optional value); keyword arguments override the spec. Unknown keys
raise GraphError listing the valid ones; ``dataset_options(name)`` describes them.

Every dataset accepts ``seed`` (generator seed, default split seed), ``cache`` and
``cache_dir``. Processed graphs are cached in ``cache_dir``, else ``$GNNMESH_CACHE``,
else ``$XDG_CACHE_HOME/gnnmesh``, else ``~/.cache/gnnmesh``; see ``cache.py``.
``gnnmesh datasets --fetch NAME`` downloads a dataset into a data root; see ``fetch.py``.
``gnnmesh datasets --shard SOURCE --out DIR`` writes one as a shard set, read in slices by
``sharded.open_shards``; see ``sharded.py`` and ``sharding.py``.

Conventions: undirected graphs store both directions, without self-loops, duplicates
merged; directed ones keep their file's edges (self-loops included). Datasets without
an official split get a seeded stratified 60/20/20 split (``meta['split']``). Datasets
without features have ``x=None``; see ``structural_features``.
"""

from ._build import sorted_unique
from .features import structural_features
from .registry import DatasetInfo, available, dataset_options, load, names

__all__ = ["load", "names", "available", "dataset_options", "structural_features", "DatasetInfo",
           "sorted_unique"]

"""Writing a shard set (``gnnmesh datasets --shard SOURCE --out DIR``): ``write_shards`` from any
dataset spec, ``write_graph_shards`` from a Graph in memory. Each source's reading is
``shard_sources``'s, the files are ``shard_writer.ShardWriter``'s; the set is built in a staged
directory that replaces ``directory`` only once it is complete."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..atomic import check_replaceable, staged_directory
from ..errors import ConfigError
from .registry import load, resolve_target
from .shard_sources import convert, write_graph
from .shard_writer import ShardWriter
from .sharded import OUTPUT, ShardSet, open_shards


def write_shards(source, directory, shards: int = 8, *, root=None, **options) -> ShardSet:
    """Write the dataset ``source`` (any spec ``gnnmesh.datasets.load`` takes, with ``root``
    and keyword options as there) as a shard set of ``shards`` edge shards and as many node
    shards into ``directory``, and return it opened. ``directory`` may be absent, empty, or
    an earlier shard set (replaced only once the new one is complete); anything else is a
    ConfigError. Generators, edge lists, MatrixMarket coordinate files and OGB directories
    stream with bounded memory; other sources are loaded whole first."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"--shards must be an integer >= 1, got {shards!r}")
    directory = Path(directory)
    check_replaceable(directory, OUTPUT)
    target = resolve_target(source, root, **options)
    return _staged(directory, shards, lambda writer: convert(target, writer, str(source),
                                                             lambda: load(source, root, **options)))


def write_graph_shards(graph, directory, shards: int = 8, spec: Optional[str] = None) -> ShardSet:
    """Write the Graph ``graph`` (in memory) as a shard set that rebuilds exactly its
    adjacency, features, labels and masks; ``spec`` is recorded as its source (default:
    the graph's name)."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards must be an integer >= 1, got {shards!r}")
    directory = Path(directory)
    check_replaceable(directory, OUTPUT)
    return _staged(directory, shards, lambda writer: write_graph(graph, writer, spec or graph.name))


def _staged(directory: Path, shards: int, write) -> ShardSet:
    """``write(writer)`` into a staged set that replaces ``directory`` once complete."""
    with staged_directory(directory, OUTPUT) as tmp:
        writer = ShardWriter(tmp, shards)
        try:
            write(writer)
        finally:
            writer.abandon()
    return open_shards(directory)

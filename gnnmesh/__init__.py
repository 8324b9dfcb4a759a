"""gnnmesh: full-graph GNN training on one process or many."""

from .errors import ConfigError, GraphError, TrainingDiverged

__version__ = "0.1.0"
__all__ = ["Adjacency", "Graph", "GraphError", "ConfigError", "TrainingDiverged", "__version__"]


def __getattr__(name):
    # The graph types need torch, which takes seconds to import: loaded on first use, so that
    # the command line sets up its signal handling first (see gnnmesh.launch).
    if name in ("Adjacency", "Graph"):
        from . import graph
        return getattr(graph, name)
    raise AttributeError(f"module 'gnnmesh' has no attribute {name!r}")

"""gnnmesh: full-graph GNN training on one process or many."""

from .errors import ConfigError, GraphError, TrainingDiverged

__version__ = "0.1.0"
__all__ = ["Adjacency", "Graph", "GraphError", "ConfigError", "TrainingDiverged", "load", "__version__"]


def __getattr__(name):
    # The graph types need torch, which takes seconds to import: loaded on first use, so that
    # the command line sets up its signal handling first (see gnnmesh.launch).
    if name in ("Adjacency", "Graph"):
        from . import graph
        from .typed import register_pyg
        register_pyg()  # typed graphs sit above Graph: they hand it their PyG converters
        return getattr(graph, name)
    if name == "load":  # a trained model and its config, from a checkpoint
        from .trained import load
        return load
    raise AttributeError(f"module 'gnnmesh' has no attribute {name!r}")

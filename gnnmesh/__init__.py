"""gnnmesh: full-graph GNN training on one process or many."""

from .errors import ConfigError, GraphError
from .graph import Adjacency, Graph

__version__ = "0.1.0"
__all__ = ["Adjacency", "Graph", "GraphError", "ConfigError", "__version__"]

"""APT's four mini-batch strategies (``--minibatch --strategy gdp|nfp|snp|dnp``): one
strategy class, which routes the first layer's work by one of four routes."""

from .base import Route, SplitRoute, StepCost
from .dnp import DestinationNodeRoute
from .nfp import NodeFeatureRoute
from .snp import SourceNodeRoute
from .strategy import MiniBatchParallel

ROUTES = {r.name: r for r in (Route, NodeFeatureRoute, SourceNodeRoute, DestinationNodeRoute)}

__all__ = ["ROUTES", "MiniBatchParallel", "Route", "SplitRoute", "StepCost", "NodeFeatureRoute",
           "SourceNodeRoute", "DestinationNodeRoute"]

"""APT's four mini-batch strategies (``--minibatch --strategy gdp|nfp|snp|dnp``): one
strategy class, which routes the first layer's work by one of four routes (``routes``: the
four and what they share). ``contract`` says what the mini-batch trainer asks of a strategy;
the strategy picks its own route (``route_choice``), under ``auto`` by the dry run
(``dryrun``), which the planner prices every route with too."""

from .contract import BatchSetup, FeatureSupply, MiniBatchStrategy, SingleProcessMiniBatch, share
from .routes import ROUTES, DestinationNodeRoute, NodeFeatureRoute, Route, SourceNodeRoute, SplitRoute, StepCost
from .strategy import MiniBatchParallel

__all__ = ["ROUTES", "BatchSetup", "FeatureSupply", "MiniBatchParallel", "MiniBatchStrategy", "SingleProcessMiniBatch", "share", "Route", "SplitRoute", "StepCost", "NodeFeatureRoute",
           "SourceNodeRoute", "DestinationNodeRoute"]

"""APT's four mini-batch strategies (``--minibatch --strategy gdp|nfp|snp|dnp``): one
strategy class, which routes the first layer's work by one of four routes (``route``: what
they share). ``contract`` says what the mini-batch trainer asks of a strategy; the strategy
picks its own route (``route_choice``), under ``auto`` by the dry run (``dryrun``), which the
planner prices every route with too."""

from .contract import BatchSetup, FeatureSupply, MiniBatchStrategy, SingleProcessMiniBatch, share
from .route import Route, SplitRoute, StepCost
from .dnp import DestinationNodeRoute
from .nfp import NodeFeatureRoute
from .snp import SourceNodeRoute
from .routes import ROUTES
from .strategy import MiniBatchParallel

__all__ = ["ROUTES", "BatchSetup", "FeatureSupply", "MiniBatchParallel", "MiniBatchStrategy", "SingleProcessMiniBatch", "share", "Route", "SplitRoute", "StepCost", "NodeFeatureRoute",
           "SourceNodeRoute", "DestinationNodeRoute"]

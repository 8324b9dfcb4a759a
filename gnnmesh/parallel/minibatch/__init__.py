"""APT's four mini-batch strategies (``--minibatch --strategy gdp|nfp|snp|dnp``): one
strategy class, which routes the first layer's work by one of four routes (``route``: what
they share). ``contract`` says what the mini-batch trainer asks of a strategy; the dry run
that picks a route is the planner's (``planner.minibatch_dryrun``)."""

from .contract import MiniBatchStrategy, SingleProcessMiniBatch, share
from .route import Route, SplitRoute, StepCost
from .dnp import DestinationNodeRoute
from .nfp import NodeFeatureRoute
from .snp import SourceNodeRoute
from .routes import ROUTES
from .strategy import MiniBatchParallel

__all__ = ["ROUTES", "MiniBatchParallel", "MiniBatchStrategy", "SingleProcessMiniBatch", "share", "Route", "SplitRoute", "StepCost", "NodeFeatureRoute",
           "SourceNodeRoute", "DestinationNodeRoute"]

"""The four routes of the first layer's work, by the name ``--strategy`` gives them."""

from .dnp import DestinationNodeRoute
from .nfp import NodeFeatureRoute
from .route import Route
from .snp import SourceNodeRoute

ROUTES = {r.name: r for r in (Route, NodeFeatureRoute, SourceNodeRoute, DestinationNodeRoute)}

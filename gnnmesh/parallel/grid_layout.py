# Transitional: the names grid3d.py used, until it imports them from their new homes.
from ..layout.grid import AXES, roles  # noqa: F401
from ..partition.blocks import block_bounds as bounds  # noqa: F401
from ..partition.grid_blocks import GridBlocks as GridLayout, cut, sizes  # noqa: F401
from .grid_logits import logit_route as output_plan  # noqa: F401

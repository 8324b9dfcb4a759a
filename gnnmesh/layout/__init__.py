"""The parallel layout: how many ranks split each dimension of a graph's data.

Every strategy is a point in one space of degrees: ``rows`` splits vertex rows (1D
partition parallelism), ``cols`` splits feature columns (tensor parallelism), and ``x``,
``y``, ``z`` are the axes of the 3D grid (grid3d). A layout is validated against the job's
world size, builds the one named process mesh every strategy talks through, and gives each
rank its coordinates in it. Nothing else decides how ranks are arranged.

    >>> layout = ParallelLayout.for_strategy("grid3d", world=8, grid="2,2,2")
    >>> mesh = layout.mesh(device)            # comm.Mesh with dimensions z, x, y
    >>> layout.coordinates(rank)              # {"x": ..., "y": ..., "z": ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import strategies
from ..errors import ConfigError
from .grid import AXES, RANK_ORDER, Grid, most_cubic_grid, parse_grid

# Mesh dimensions from the slowest to the fastest varying in a rank number. The grid's
# axes keep the order grid3d places ranks in (``RANK_ORDER``: Y groups share a node).
MESH_ORDER = ("rows", "cols") + tuple(RANK_ORDER)


@dataclass(frozen=True)
class ParallelLayout:
    """Degrees of parallelism; their product is the number of ranks."""

    rows: int = 1
    cols: int = 1
    x: int = 1
    y: int = 1
    z: int = 1
    strategy: str = "single"

    def __post_init__(self):
        dims = strategies.dims_of(self.strategy)  # which degrees the strategy splits (the others stay 1)
        for name in MESH_ORDER:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"parallel layout field '{name}': must be an integer >= 1, got {value!r}")
            if value > 1 and name not in dims:
                raise ConfigError(f"parallel layout field '{name}': the {self.strategy} strategy does not "
                                  f"split along {name} (it uses {', '.join(dims) or 'none'})")

    @classmethod
    def for_strategy(cls, strategy: str, world: int, grid: Optional[str] = None) -> "ParallelLayout":
        """The layout of ``strategy`` on ``world`` ranks; ``grid`` ("X,Y,Z") places grid3d's
        ranks (default: the most cubic grid)."""
        dims = strategies.dims_of(strategy)
        if dims == AXES:
            shape = most_cubic_grid(world) if grid is None else parse_grid(grid)
            layout = cls(strategy=strategy, **shape.dims())
        elif grid is not None:
            raise ConfigError(f"config field 'grid': only a strategy that splits along {', '.join(AXES)} runs on "
                              f"a grid, this run uses {strategy}")
        else:
            layout = cls(strategy=strategy, **({dims[0]: world} if dims else {}))
        return layout.check(world)

    @property
    def size(self) -> int:
        """Ranks the layout places."""
        product = 1
        for name in MESH_ORDER:
            product *= getattr(self, name)
        return product

    @property
    def grid(self) -> Grid:
        return Grid(self.x, self.y, self.z)

    @classmethod
    def of_grid(cls, grid) -> "ParallelLayout":
        """The layout of ``grid`` (a Grid or an ``{"x", "y", "z"}`` dict) for the strategy that
        splits along the grid's axes."""
        strategy = next(name for name in strategies.names() if strategies.dims_of(name) == AXES)
        return cls(x=int(grid["x"]), y=int(grid["y"]), z=int(grid["z"]), strategy=strategy)

    def degrees(self) -> dict:
        """The degrees of the strategy's dimensions, in mesh order (1s included)."""
        dims = strategies.dims_of(self.strategy)
        return {name: getattr(self, name) for name in MESH_ORDER if name in dims}

    def check(self, world: int) -> "ParallelLayout":
        """This layout, if it places exactly ``world`` ranks; else a ConfigError naming the field."""
        if self.size != world:
            shape = " x ".join(f"{k}={v}" for k, v in self.degrees().items()) or "one rank"
            field = "grid" if strategies.dims_of(self.strategy) == AXES else "nproc"
            raise ConfigError(f"config field '{field}': the {self.strategy} layout {shape} places "
                              f"{self.size} ranks but the job has {world}")
        return self

    def mesh(self, device=None):
        """The named process mesh of this layout (``comm.Mesh``): one dimension per degree the
        strategy uses, each with its counted communicator."""
        from .. import comm
        return comm.Mesh(self.degrees(), device)

    def coordinates(self, rank: int) -> dict:
        """Rank ``rank``'s position along every dimension the strategy uses."""
        position, rest, dims = {}, rank, strategies.dims_of(self.strategy)
        for name in reversed(MESH_ORDER):
            if name in dims:
                size = getattr(self, name)
                position[name], rest = rest % size, rest // size
        return {name: position[name] for name in MESH_ORDER if name in position}

    def describe(self) -> str:
        return " x ".join(f"{k} {v}" for k, v in self.degrees().items()) or "one process"


__all__ = ["ParallelLayout", "MESH_ORDER", "Grid"]

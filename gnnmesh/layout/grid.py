"""The 3D process grid's vocabulary (Plexus §3.1–3.2), shared by the grid3d strategy, its
block placement and the performance model.

Ranks form an X x Y x Z grid. Each layer gives the three grid axes three roles: ``rows``
cuts the rows of its adjacency block (and of its output), ``cols`` cuts the adjacency's
columns, which are the rows of its input, and ``feats`` cuts the input's feature columns.
Layer 0 takes (Z, X, Y): A over the ZX plane, the input over XY, W over YX. A layer's output
is cut (rows, cols) and replicated along ``feats``, so the next layer takes (cols, feats) =
(this rows, this cols): the roles cycle with period three and no data moves between layers.

Rank placement: ranks are numbered row-major over the axes in ``RANK_ORDER``, slowest first:
rank = (z * X + x) * Y + y, so Y groups are consecutive ranks and share a node first, then
X groups, as Plexus places them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from typing import Optional

from ..errors import ConfigError

AXES = ("x", "y", "z")
WORLD = "world"             # the process group of all ranks
RANK_ORDER = "zxy"          # grid axes from the slowest to the fastest varying in a rank number


@dataclass(frozen=True, order=True)
class Grid:
    """A grid shape X x Y x Z; ``grid[axis]`` is an axis's size (``grid[WORLD]``: all ranks)."""

    x: int
    y: int
    z: int

    @property
    def size(self) -> int:
        return self.x * self.y * self.z

    def __getitem__(self, axis: str) -> int:
        return self.size if axis == WORLD else getattr(self, axis)

    def __str__(self) -> str:
        return f"{self.x}x{self.y}x{self.z}"

    def dims(self) -> dict:
        """``{"x": X, "y": Y, "z": Z}``."""
        return {axis: self[axis] for axis in AXES}


@dataclass(frozen=True)
class Roles:
    """What each grid axis cuts in a layer: the adjacency block's rows (and the output's),
    its columns (the input's rows) and the input's feature columns."""

    rows: str
    cols: str
    feats: str


_CYCLE = (Roles("z", "x", "y"), Roles("y", "z", "x"), Roles("x", "y", "z"))


def roles(layer: int) -> Roles:
    """The roles of layer ``layer`` (0-based); they rotate with period three."""
    return _CYCLE[layer % 3]


def factorizations(world: int) -> list:
    """Every ordered triple (X, Y, Z) with X * Y * Z = world, as Grids in lexicographic order."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    return [Grid(x, y, world // (x * y)) for x in divisors for y in divisors
            if (world // x) % y == 0]


def rank_orders() -> list:
    """Every valid rank order string."""
    return ["".join(p) for p in permutations(AXES)]


def most_cubic_grid(world: int) -> Grid:
    """The most cubic grid of ``world`` ranks (smallest X + Y + Z; ties go to the larger X,
    then Y). ``gnnmesh plan`` ranks every grid by predicted time instead."""
    return min(factorizations(world), key=lambda g: (g.x + g.y + g.z, -g.x, -g.y))


def parse_grid(text: Optional[str], name: str = "config field 'grid'") -> Grid:
    """``"X,Y,Z"`` as a Grid; otherwise a ConfigError naming ``name`` (a field or a flag)."""
    try:
        dims = [int(part) for part in str(text).split(",")]
    except ValueError:
        dims = []
    if len(dims) != 3 or min(dims) < 1:
        raise ConfigError(f"{name}: expected three positive integers X,Y,Z, got {text!r}")
    return Grid(*dims)

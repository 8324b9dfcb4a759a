"""Modules of the user's that register strategies, partitioners, models or tasks, imported
before the command line is built (``$GNNMESH_PLUGINS``: module names, comma-separated), so
that every command offers what they register: ``gnnmesh plan`` ranks a registered strategy,
``gnnmesh train --strategy`` accepts it. A job's ranks inherit the variable and import the
same modules. In Python, importing the module is enough."""

from __future__ import annotations

import os

PLUGINS_ENV = "GNNMESH_PLUGINS"


def import_plugins() -> list:
    """Import every module ``$GNNMESH_PLUGINS`` names (each once); a module that is not there is
    a ConfigError naming it. Returns the modules."""
    names = [name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip()]
    if not names:
        return []
    from ..models.user import import_module  # brings torch: only when modules are named
    return [import_module(name, f"environment variable {PLUGINS_ENV}") for name in names]



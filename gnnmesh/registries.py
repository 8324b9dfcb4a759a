"""What every registry of named specs shares (strategies, partitioners, models, tasks): a name
is registered once, so a second registration under it is a mistake, never a silent replacement."""

from __future__ import annotations


def add(registry: dict, key: str, entry, kind: str):
    """``entry`` put in ``registry`` under ``key`` and returned; a ``key`` there already is a
    ValueError naming the ``kind`` of thing registered."""
    if key in registry:
        raise ValueError(f"{kind} {key!r} is registered already")
    registry[key] = entry
    return entry

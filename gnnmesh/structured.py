"""JSON and TOML text read with its nesting bounded: the one way gnnmesh parses either.

A file nested deeper than the parser's recursion ends in a RecursionError, which no reader
expects; one nested a little less parses, and then breaks whatever walks it later (a
message that shows the value, a copy, a check). Both are a ``TooDeep``, a ValueError like
every other malformed text, so a reader's ``except ValueError`` names the file in one line.
No file gnnmesh writes, nor any config a person writes, nests anywhere near ``MAX_DEPTH``.
"""

from __future__ import annotations

import json

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

MAX_DEPTH = 100


class TooDeep(ValueError):
    """The text nests arrays, objects or tables more than ``MAX_DEPTH`` deep."""

    def __init__(self):
        super().__init__(f"nested more than {MAX_DEPTH} levels deep")


def loads_json(text, **options):
    """``json.loads(text, **options)``, a TooDeep where it nests too deeply."""
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise TooDeep() from None
    return _shallow(value)


def load_json(fh, **options):
    """``json.load(fh, **options)``, a TooDeep where it nests too deeply."""
    return loads_json(fh.read(), **options)


def load_toml(fh) -> dict:
    """``tomllib.load(fh)`` (a binary file), a TooDeep where it nests too deeply."""
    try:
        value = tomllib.load(fh)
    except RecursionError:
        raise TooDeep() from None
    return _shallow(value)



def _shallow(value):
    """``value`` if no container in it lies deeper than MAX_DEPTH (walked without recursion)."""
    level = [value]
    for _ in range(MAX_DEPTH):
        level = [v for c in level if isinstance(c, (dict, list)) for v in (c.values() if isinstance(c, dict) else c)]
        if not level:
            return value
    raise TooDeep()

"""The node pairs a link model scores: ``--pairs FILE``.

A FILE is text with one pair a line, ``source,destination`` (a CSV) or the two ids separated
by whitespace; a first line none of whose fields is a number is a header and skipped, blank lines and
``#`` comments are allowed. Pairs keep their order and their repeats: the scores are written
in the file's order. Anything else (one id or three, an id that is not an integer, negative,
NaN or out of the graph's range) names the file and the line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .lines import data_lines


def read_pairs_file(path, num_nodes: int) -> np.ndarray:
    """The pairs listed in ``path`` as an int64 array [pairs, 2], each id checked to be a node
    of a graph of ``num_nodes`` nodes."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--pairs {path}: no such file")
    pairs = []
    for at, (number, text) in enumerate(data_lines(path, "a text file of node pairs")):
        fields = text.replace(",", " ").split()
        if at == 0 and not any(_number(f) for f in fields):
            continue  # a header: source,destination or the like
        if len(fields) != 2:
            raise ConfigError(f"{path}, line {number}: {text[:40]!r} is not a pair source,destination "
                              f"({len(fields)} field{'s' if len(fields) != 1 else ''})")
        pairs.append([_node(f, path, number, num_nodes) for f in fields])
    if not pairs:
        raise ConfigError(f"{path}: lists no node pairs")
    return np.asarray(pairs, dtype=np.int64)


def _number(text: str) -> bool:
    """Whether ``text`` reads as a number (NaN and 1.5 included: ids gone wrong, not a header)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _node(text: str, path: Path, number: int, num_nodes: int) -> int:
    """The node id ``text`` on line ``number``, checked as text: no float, NaN or id too
    large for int64 slips through."""
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{path}, line {number}: {text[:40]!r} is not a node id (an integer)") from None
    if not 0 <= value < num_nodes:
        raise ConfigError(f"{path}, line {number}: node id {value} is out of range (the graph has {num_nodes:,} "
                          f"nodes: 0 to {num_nodes - 1})")
    return value

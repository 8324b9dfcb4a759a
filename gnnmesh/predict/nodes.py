"""Which nodes a prediction writes: ``--nodes all|train|val|test|FILE``.

A FILE lists global node ids: a NumPy ``.npy`` array of integers, or text with one id per
line (blank lines and ``#`` comments allowed). Ids repeated are written once; an id out of
range names the file and line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from .lines import data_lines

SPLITS = ("train", "val", "test")
CHOICES = ("all",) + SPLITS


def read_node_file(path, num_nodes: int, flag: str = "--nodes") -> np.ndarray:
    """The sorted distinct node ids listed in ``path``, each checked to be below ``num_nodes``;
    ``flag``: the option that named the file."""
    path = Path(path)
    if not path.is_file():
        if flag != "--nodes":
            raise ConfigError(f"{flag} {path}: no such file")
        raise ConfigError(f"--nodes {path}: neither {', '.join(CHOICES)} nor a file of node ids")
    if path.suffix == ".npy":
        return _checked(_npy_ids(path), num_nodes, path)
    ids, lines = [], []
    for number, text in data_lines(path, "a text file of node ids (nor a .npy array)"):
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{path}, line {number}: {text[:40]!r} is not a node id") from None
        if not 0 <= value < num_nodes:  # checked here, where no integer is too large to hold
            raise _out_of_range(f"{path}, line {number}", value, num_nodes)
        ids.append(value)
        lines.append(number)
    values = np.asarray(ids, dtype=np.int64) if ids else np.empty(0, dtype=np.int64)
    return _checked(values, num_nodes, path, lines)


def _npy_ids(path: Path) -> np.ndarray:
    try:
        values = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ConfigError(f"{path}: unreadable .npy file ({' '.join(str(err).split())[:160]})") from None
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ConfigError(f"{path}: node ids must be a 1-D integer array, got {values.dtype} of shape "
                          f"{values.shape}")
    return values


def _checked(ids: np.ndarray, num_nodes: int, path: Path, lines=None) -> np.ndarray:
    """``ids`` (any integer dtype: checked before they become int64, which a uint64 id past
    int64 would wrap into another id) as sorted distinct int64 ids."""
    bad = np.flatnonzero((ids < 0) | (ids >= num_nodes))
    if len(bad):
        at = f", line {lines[bad[0]]}" if lines is not None else f", entry {bad[0]}"
        raise _out_of_range(f"{path}{at}", int(ids[bad[0]]), num_nodes)
    if len(ids) == 0:
        raise ConfigError(f"{path}: lists no node ids")
    return np.unique(ids.astype(np.int64))


def _out_of_range(where: str, value: int, num_nodes: int) -> ConfigError:
    return ConfigError(f"{where}: node id {value} is out of range (the graph has {num_nodes:,} nodes: 0 to "
                       f"{num_nodes - 1})")


def selected(nodes: str, rank_data, ids: np.ndarray, listed=None) -> np.ndarray:
    """Positions among this rank's rows (global ids ``ids``) that ``nodes`` selects; ``listed``:
    the ids a FILE names (``read_node_file``)."""
    if nodes == "all":
        return np.arange(len(ids))
    if nodes in SPLITS:
        mask = getattr(rank_data, f"{nodes}_mask")
        return torch.nonzero(mask.cpu()).flatten().numpy()
    return np.flatnonzero(np.isin(ids, listed))

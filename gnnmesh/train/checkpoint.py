"""Checkpoints, written atomically (see ``gnnmesh.atomic``): a crash or a signal mid-write
never leaves a truncated checkpoint behind, nor (after the next run) a temporary file."""

from __future__ import annotations

from pathlib import Path

import torch

from ..atomic import atomic_file
from ..errors import ConfigError


def save(path, state: dict) -> None:
    with atomic_file(path) as fh:  # an OSError (disk full) reaches the CLI, which names the file
        torch.save(state, fh)


def load(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no checkpoint to resume from")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable checkpoint ({type(err).__name__}: {err})") from None

"""Checkpoints, written atomically (see ``gnnmesh.atomic``): a crash or a signal mid-write
never leaves a truncated checkpoint behind, nor (after the next run) a temporary file."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..atomic import atomic_file
from ..errors import ConfigError


def save(path, state: dict) -> None:
    with atomic_file(path) as fh:  # an OSError (disk full) reaches the CLI, which names the file
        torch.save(state, fh)


def check_writable(path, what: str = "checkpoint") -> None:
    """Fail before training, not after hours of it, when ``path`` cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; the {what} must be a file path")
    for parent in path.parents:  # mkdir on a path through a file says only "File exists"
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{path}: cannot write the {what} ({parent} is not a directory)")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{path}: cannot write the {what} ({err.strerror or err})") from None
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"{path}: cannot write the {what} (directory not writable)")


def load(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no checkpoint to resume from")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable checkpoint ({type(err).__name__}: {err})") from None

"""Checkpoints written atomically: a temporary file in the same directory, then a rename,
so a crash mid-write never leaves a truncated checkpoint behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from ..errors import ConfigError


def save(path, state: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no checkpoint to resume from")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable checkpoint ({type(err).__name__}: {err})") from None

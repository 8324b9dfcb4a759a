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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise ConfigError(f"{path}: cannot write the checkpoint ({err.strerror or err})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path) -> None:
    """Fail before training, not after hours of it, when the checkpoint cannot be written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{path}: cannot write the checkpoint ({err.strerror or err})") from None
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"{path}: cannot write the checkpoint (directory not writable)")


def load(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no checkpoint to resume from")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable checkpoint ({type(err).__name__}: {err})") from None

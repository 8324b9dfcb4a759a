"""Directories written atomically: built under a temporary name beside the target, then
renamed into place, so a reader sees either the old complete set or the new one."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import ConfigError


@contextmanager
def staged_directory(directory, marker: str, what: str):
    """Yield a fresh temporary directory; on normal exit it replaces ``directory``.

    Only an absent or empty directory, or an earlier set (one holding ``marker``), may be
    replaced; anything else is a ConfigError naming ``directory`` (``what`` says what kind
    of set it is). On an error the temporary directory is removed and nothing changes."""
    directory = Path(directory)
    if directory.exists() and not (directory / marker).is_file() and \
            (not directory.is_dir() or any(directory.iterdir())):
        raise ConfigError(f"{directory}: exists and is not a {what}; refusing to overwrite it")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        yield tmp
        _move_into_place(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _move_into_place(tmp: Path, directory: Path) -> None:
    old = None
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        os.rename(directory, old / "set")
    os.rename(tmp, directory)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

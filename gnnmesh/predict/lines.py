"""The lines of a text file of ids (``--nodes FILE``, ``--queries FILE``, ``--pairs FILE``):
what each reader of one shares, so that all of them skip the same lines and refuse a file
that is not text the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ..errors import ConfigError


def data_lines(path: Path, what: str) -> Iterator[tuple]:
    """``(line number, text)`` of each line of ``path`` that holds data: its ``#`` comment cut
    off, surrounding whitespace stripped, blank lines skipped. A file that is not UTF-8 text
    is a ConfigError naming it as not ``what`` (e.g. "a text file of node ids")."""
    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                text = line.split("#", 1)[0].strip()
                if text:
                    yield number, text
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not {what}") from None

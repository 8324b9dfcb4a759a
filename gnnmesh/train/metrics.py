"""The per-epoch metrics file: one strict-JSON object per line (non-finite numbers are
written as ``null``).

On resume the lines past the checkpoint are dropped so the file reads like one
uninterrupted run. That rewrite is atomic (``gnnmesh.atomic``): a kill at any instant
leaves every line up to the checkpoint. A torn last line, which is what a crash during
an append leaves, is dropped with a warning; any other unreadable line is bad input.

The file is locked for the run (``gnnmesh.locks``): a second run given it is refused.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from .. import locks
from ..atomic import check_writable, write_file
from ..errors import ConfigError
from ..structured import loads_json


def to_json(record: dict) -> str:
    return json.dumps(_finite(record), allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def kept_lines(path: Path, last_epoch: int) -> list:
    """The lines of ``path`` for epochs up to ``last_epoch``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the metrics file to resume it ({_reason(err)})") from None
    lines = text.split("\n")
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except ValueError:
            if number == len(lines):  # no newline after it: an append cut short
                warnings.warn(f"{path} line {number}: dropping a torn last line (an interrupted write)")
                continue
            raise ConfigError(f"{path} line {number}: not a JSON metrics record") from None
        if not isinstance(record, dict) or not isinstance(record.get("epoch"), int):
            raise ConfigError(f"{path} line {number}: not a metrics record (a JSON object with an 'epoch')")
        if record["epoch"] <= last_epoch:
            kept.append(line)
    return kept


def _reason(err) -> str:
    return "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else (err.strerror or str(err))


class MetricsFile:
    """Appends one line per epoch, flushed, after the lines kept from ``start_epoch``.

    ``path`` is locked until ``close``, and so are the ``held`` locks given (the run's other
    outputs, released with it); with ``path`` None nothing is written, they are only held."""

    def __init__(self, path, start_epoch: int, held: tuple = ()):
        self.fh, self.held = None, list(held)
        try:
            if path is not None:
                self._open(Path(path), start_epoch)
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, start_epoch: int) -> None:
        check_writable(path, "metrics file")
        self.held.append(locks.hold(path, "metrics file"))
        kept = kept_lines(path, start_epoch) if start_epoch else []
        try:
            write_file(path, "".join(line + "\n" for line in kept))
            self.fh = open(path, "a", encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"{path}: cannot write the metrics file ({err.strerror or err})") from None

    def write(self, line: str) -> None:
        if self.fh is not None:
            try:
                self.fh.write(line + "\n")
                self.fh.flush()
            except OSError as err:  # a full disk: name the file, which a write to it does not
                raise OSError(err.errno, err.strerror or str(err), self.fh.name) from None

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
        while self.held:
            self.held.pop().release()

"""The plan file ``gnnmesh plan --json FILE`` writes and ``gnnmesh report --plan`` reads: one
JSON object, ``{"strategy": str, "candidates": [candidate, ...]}``, best candidate first,
each candidate ``{"name": str, "predicted_epoch_s": float|null, "bytes_per_rank": int|null,
"peak_memory_bytes": int|null, "dominant": str|null}`` (null: the strategy's model does not
predict it). Reading checks every field, so a foreign or damaged file is one line naming it."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Optional

from ..atomic import write_file
from ..errors import ConfigError
from ..structured import TooDeep, loads_json


@dataclass(frozen=True)
class Candidate:
    name: str
    predicted_epoch_s: Optional[float]
    bytes_per_rank: Optional[int]
    peak_memory_bytes: Optional[int]
    dominant: Optional[str]


@dataclass(frozen=True)
class Plan:
    path: str
    strategy: str
    candidates: tuple   # of Candidate, as ranked in the file


def write_plan(path, strategy: str, candidates: list) -> None:
    """Write ``candidates`` (ranked best first) atomically."""
    data = {"strategy": strategy, "candidates": [asdict(c) for c in candidates]}
    write_file(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def read_plan(path) -> Plan:
    """The plan in ``path``; a ConfigError naming the file and the field when it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the plan file ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a plan file (not UTF-8 text)") from None
    try:
        data = loads_json(text)
    except TooDeep:
        raise ConfigError(f"{path}: not a plan file (JSON nested too deeply)") from None
    except ValueError as err:
        raise ConfigError(f"{path}: not a plan file (not JSON: {err})") from None
    if not isinstance(data, dict) or "candidates" not in data or "strategy" not in data:
        raise ConfigError(f"{path}: not a plan file written by 'gnnmesh plan --json' "
                          "(an object with 'strategy' and 'candidates')")
    if not isinstance(data["strategy"], str):
        raise ConfigError(f"{path}: field 'strategy' must be a string, got {_show(data['strategy'])}")
    if not isinstance(data["candidates"], list) or not data["candidates"]:
        raise ConfigError(f"{path}: field 'candidates' must be a non-empty list, got {_show(data['candidates'])}")
    candidates, names = [], set()
    for i, item in enumerate(data["candidates"]):
        candidate = _candidate(item, f"{path}: candidates[{i}]")
        if candidate.name in names:
            raise ConfigError(f"{path}: candidates[{i}].name: {candidate.name!r} appears twice")
        names.add(candidate.name)
        candidates.append(candidate)
    return Plan(str(path), data["strategy"], tuple(candidates))


def _candidate(item, where: str) -> Candidate:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be an object, got {_show(item)}")
    for key in ("name", "predicted_epoch_s", "bytes_per_rank", "peak_memory_bytes", "dominant"):
        if key not in item:
            raise ConfigError(f"{where}: field '{key}' is missing")
    if not isinstance(item["name"], str) or not item["name"]:
        raise ConfigError(f"{where}.name: must be a non-empty string, got {_show(item['name'])}")
    seconds = item["predicted_epoch_s"]
    if seconds is not None and not (isinstance(seconds, float) and math.isfinite(seconds) and seconds >= 0
                                    or _number(seconds) and 0 <= seconds < 2**63):
        raise ConfigError(f"{where}.predicted_epoch_s: must be a number >= 0 or null, got {_show(seconds)}")
    for key in ("bytes_per_rank", "peak_memory_bytes"):
        value = item[key]
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63):
            raise ConfigError(f"{where}.{key}: must be an integer in [0, 2^63) or null, got {_show(value)}")
    if item["dominant"] is not None and not isinstance(item["dominant"], str):
        raise ConfigError(f"{where}.dominant: must be a string or null, got {_show(item['dominant'])}")
    return Candidate(item["name"], None if seconds is None else float(seconds), item["bytes_per_rank"],
                     item["peak_memory_bytes"], item["dominant"])


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value) -> str:
    """A value for an error message, cut short: the message stays one line."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."

"""Checks of numeric settings shared by the config, the dataset options and the partitioner:
ranges with finiteness, the one seed range, sizes (``parse_bytes``) and the mini-batch dry
run's link figures (``parse_links``)."""

from __future__ import annotations

import math

from .errors import ConfigError

# Seeds seed numpy as well as torch: numpy takes [0, 2**32).
SEED_RANGE = (0, 2**32 - 1)


class Range:
    """The allowed values of a numeric field: ``low``/``high`` bounds (None: unbounded),
    each inclusive unless named in ``open``. Every float must be finite as well."""

    def __init__(self, low=None, high=None, open: str = ""):
        self.low, self.high, self.open = low, high, open

    def check(self, name: str, value) -> None:
        problem = self.problem(value)
        if problem:
            raise ConfigError(f"config field '{name}': {problem}")

    def problem(self, value) -> str:
        """What keeps the number ``value`` out of this range ('' if nothing), for a message."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        low_ok = self.low is None or (value > self.low if "low" in self.open else value >= self.low)
        high_ok = self.high is None or (value < self.high if "high" in self.open else value <= self.high)
        return "" if low_ok and high_ok else f"must be {self}, got {value}"

    def number_problem(self, value) -> str:
        """What keeps ``value``, read from a file (JSON, say), from being a real number in this
        range ('' if nothing): not a number at all (a string, a bool, null, a list, an object),
        an integer no float holds, not finite, or out of range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            text = repr(value)
            return f"must be a number, got {text if len(text) <= 40 else text[:37] + '...'}"
        try:
            float(value)
        except OverflowError:
            return f"must be a finite number, got an integer of {len(str(abs(value)))} digits"
        return self.problem(value)

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if 'low' in self.open else '>='} {self.low}"
        left = "(" if "low" in self.open else "["
        right = ")" if "high" in self.open else "]"
        return f"in {left}{self.low}, {self.high}{right}"


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` if it is in SEED_RANGE, else a ConfigError naming ``name`` (a flag or field)."""
    low, high = SEED_RANGE
    if isinstance(seed, bool) or not isinstance(seed, int) or not low <= seed <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {seed!r}")
    return seed


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}


def parse_bytes(text, name: str, allow_zero: bool = False) -> int:
    """A size such as ``512MiB``, ``2GiB``, ``1.5G`` or ``1048576`` in bytes; a ConfigError naming
    ``name`` otherwise (binary units for K/M/G alone and for KiB/MiB/GiB, decimal for kB/MB/GB).
    ``allow_zero``: a size of 0 is a size (none of it, e.g. no cache) rather than an error."""
    raw = str(text).strip()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
    unit = raw[len(number):].strip().lower()
    try:
        value = float(number)
    except ValueError:
        value = None
    if value == 0 and allow_zero:
        return 0
    if value is None or unit not in _UNITS or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"config field '{name}': {text!r} is not a size (e.g. 512MiB, 2GiB, 1.5G)")
    return int(value * _UNITS[unit])


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit that keeps it at least 1, rounded up to a tenth (a
    size it names as needed is never below the need), in a form ``parse_bytes`` reads back."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _UNITS[unit.lower()]
        if nbytes >= scale:
            return f"{math.ceil(10 * nbytes / scale) / 10:.1f} {unit}"
    return f"{math.ceil(nbytes)} B"


LINK_KEYS = ("load", "cache", "net", "latency")  # the links the mini-batch dry run prices
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def parse_links(text, name: str = "bandwidths") -> dict:
    """``"load=2GB,cache=20GB,net=1GB,latency=50us"`` (any of them; sizes per second, as
    ``--device-memory`` reads sizes): the figures the cost model takes instead of probing."""
    out = {}
    for piece in [p for p in str(text).split(",") if p.strip()]:
        key, _, value = piece.partition("=")
        key, value = key.strip(), value.strip()
        if key not in LINK_KEYS or not value:
            raise ConfigError(f"config field '{name}': {piece!r} is not one of load=SIZE, cache=SIZE, "
                              f"net=SIZE, latency=TIME (sizes per second, e.g. load=2GB,net=1GB,latency=50us)")
        if key == "latency":
            unit = next((u for u in ("us", "ms", "s") if value.endswith(u)), "")
            try:
                seconds = float(value[:len(value) - len(unit)]) * _TIME_UNITS.get(unit, 1.0)
            except ValueError:
                seconds = -1.0
            if not seconds >= 0:
                raise ConfigError(f"config field '{name}': latency {value!r} is not a time (e.g. 50us, 0.2ms)")
            out[key] = seconds
        else:
            out[key] = float(parse_bytes(value, name))
    return out

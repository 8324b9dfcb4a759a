"""The table of machine rates every strategy's model prices with: a ``ComputeRates`` (SpMM,
GEMM and elementwise costs of one rank) and a ``Network`` (links within and between nodes),
given by flags, read from a rates file, probed, or the nominal GPU cluster's.

A rates file is JSON, ``{"compute": {...}, "network": {...}}`` with the two dataclasses'
fields, as ``gnnmesh plan --save-rates`` and ``benchmarks/planner.py`` write it. Probing this
machine takes about ten seconds, so ``this_machine`` keeps what it measured in the cache
directory, one file per device, thread count and rank count.
"""

from __future__ import annotations

import json
import time
from dataclasses import MISSING, asdict, fields, replace
from pathlib import Path
from typing import Callable

from ..atomic import write_file
from ..datasets.cache import default_dir
from ..errors import ConfigError
from ..structured import TooDeep, load_json
from ..validate import Range
from .machine import ComputeRates, Network


# What each rate may be: what is divided by (flop/s, bytes/s) at least 1 a second, costs and
# latencies (seconds) >= 0 (a probe's fit may give 0) and at most MAX_SECONDS, the crowding
# factor >= 1 (``sharing_cores`` records only more) and at most MAX_CROWDING. Within these, every
# price of any graph the planner takes (counts up to 2^48) is a finite number of seconds; a
# bandwidth of 1e-300 or an overhead of 1e308 would price an epoch at infinity.
MIN_PER_SECOND = 1.0
MAX_SECONDS = 1e6
MAX_CROWDING = 1e6
_PER_SECOND = Range(MIN_PER_SECOND)
RANGES = {"gemm_flops": _PER_SECOND, "intra_bw": _PER_SECOND, "inter_bw": _PER_SECOND, "host_bw": _PER_SECOND,
          "gather_bw": _PER_SECOND, "crowding": Range(1, MAX_CROWDING)}
_SECONDS = Range(0, MAX_SECONDS)


def read(path, what: str = "--rates", complete: bool = False) -> tuple:
    """(ComputeRates, Network) from the rates file at ``path``; a ConfigError naming ``what``
    and the file (and the field) when it cannot be read or is not a rates file: every rate a
    finite number in its range (``RANGES``), ``source`` a string (``complete``: and no rate
    missing, which a file written before it was added lacks)."""
    try:
        with open(path) as f:
            data = load_json(f)
    except OSError as err:
        raise ConfigError(f"{what} {path}: {err.strerror or err}") from None
    except ValueError as err:
        reason = str(err) if isinstance(err, TooDeep) else f"{type(err).__name__}: {err}"
        raise ConfigError(f"{what} {path}: not a rates file written by 'gnnmesh plan --save-rates' "
                          f"({' '.join(reason.split())[:200]})") from None
    if not (isinstance(data, dict) and isinstance(data.get("compute"), dict) and isinstance(data.get("network"), dict)):
        raise ConfigError(f"{what} {path}: not a rates file written by 'gnnmesh plan --save-rates' "
                          "(an object with 'compute' and 'network' objects)")
    tables = []
    for table, kind in (("compute", ComputeRates), ("network", Network)):
        given, known = data[table], {f.name: f for f in fields(kind)}
        values = {}
        for name, value in given.items():
            if name not in known:
                raise ConfigError(f"{what} {path}: field '{table}.{name}' is not a rate of this gnnmesh")
            if name == "source":
                if not isinstance(value, str):
                    raise ConfigError(f"{what} {path}: field '{table}.source' must be a string, got {value!r:.40}")
                values[name] = value
                continue
            problem = RANGES.get(name, _SECONDS).number_problem(value)
            if problem:
                raise ConfigError(f"{what} {path}: field '{table}.{name}' {problem}")
            values[name] = float(value)
        missing = [name for name, f in known.items() if name not in given and (complete or f.default is MISSING)]
        if missing:
            if complete:
                raise ConfigError(f"{what} {path} predate some of today's rates")
            raise ConfigError(f"{what} {path}: field '{table}.{missing[0]}' is missing")
        tables.append(kind(**values))
    return tuple(tables)


def write(path, rates: ComputeRates, network: Network) -> None:
    write_file(path, json.dumps({"compute": asdict(rates), "network": asdict(network)}, indent=2))


def cached_path(device: str, threads: int, ranks: int, cache_dir=None) -> Path:
    return default_dir(cache_dir) / "rates" / f"{device}-{threads}threads-{ranks}ranks.json"


def this_machine(device: str, threads: int, ranks: int, cache_dir=None,
                 say: Callable[[str], None] = print) -> tuple:
    """This machine's rates for ``ranks`` ranks of ``threads`` threads on ``device``: read
    from the cache, else probed (compute in this process, links among ``ranks`` fresh local
    processes, at least 2) and kept there."""
    path = cached_path(device, threads, ranks, cache_dir)
    if path.exists():
        try:
            return read(path, "cached rates", complete=True)
        except ConfigError as err:   # a torn or older file
            say(f"{err}; probing again")
    from .probe import probe_compute, probe_network
    start = time.perf_counter()
    rates, network = probe_compute(device, threads), probe_network(max(2, ranks), device)
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, rates, network)
    say(f"probed this machine's rates in {time.perf_counter() - start:.1f} s; kept in {path} "
        "(delete it to probe again)")
    return rates, network


def sharing_cores(rates: ComputeRates, ranks_per_node: int, threads: int, cores: int) -> ComputeRates:
    """``rates`` (one rank with its threads' cores to itself) for ranks that share a node's
    ``cores``: when ``ranks_per_node * threads`` exceed them, every rank computes that much
    slower, as long as all are busy (``ComputeRates.crowding`` records by how much, for
    ``trace.slowest``). GPUs share nothing: pass a CPU's rates only."""
    crowding = ranks_per_node * threads / max(cores, 1)
    return replace(rates.scaled(crowding), crowding=crowding) if crowding > 1 else rates

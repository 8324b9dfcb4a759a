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
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Callable

from ..atomic import write_file
from ..datasets.cache import default_dir
from ..errors import ConfigError
from .machine import ComputeRates, Network


def read(path, what: str = "--rates", complete: bool = False) -> tuple:
    """(ComputeRates, Network) from the rates file at ``path``; a ConfigError naming ``what``
    and the file when it cannot be read or is not a rates file (``complete``: or lacks a
    rate, which a file written before it was added does)."""
    try:
        with open(path) as f:
            data = json.load(f)
        table = ComputeRates(**data["compute"]), Network(**data["network"])
    except OSError as err:
        raise ConfigError(f"{what} {path}: {err.strerror or err}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{what} {path}: not a rates file written by 'gnnmesh plan --save-rates' "
                          f"({type(err).__name__}: {err})") from None
    if complete and not (data["compute"].keys() >= {f.name for f in fields(ComputeRates)}
                         and data["network"].keys() >= {f.name for f in fields(Network)}):
        raise ConfigError(f"{what} {path} predate some of today's rates")
    return table


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

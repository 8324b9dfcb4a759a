"""Calibrating a rates table against measured epochs.

A probe times kernels one at a time; a training epoch runs them among autograd, the
optimizer and Python's own work, on ranks that share memory bandwidth. So a table fitted to
measured epochs predicts better. Every model's epoch time is linear in three groups of rates
(sparse: the SpMM costs; dense: GEMM, elementwise and dropout costs; links: latencies and
inverse bandwidths, the host's included) plus the fixed ``epoch_overhead``, so one factor per group and the
overhead are fitted by non-negative least squares on relative error, and the table is
scaled by them (``scaled``).

    samples = [Sample(parts(lambda r, n: estimate(r, n).epoch_s, rates, network, crowding), measured), ...]
    factors = fit(samples)
    rates, network = scaled(rates, network, factors)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .machine import ComputeRates, Network

SPARSE = ("spmm_call", "spmm_per_nnz", "spmm_per_nnz_col", "spmm_per_out", "spmm_per_in")
DENSE = ("gemm_call", "elementwise_call", "elementwise_per", "dropout_per")   # and 1 / gemm_flops
_TINY = 1e-9   # a group switched off (not 0: the GEMM rate is a divisor)


@dataclass(frozen=True)
class Factors:
    sparse: float = 1.0
    dense: float = 1.0
    links: float = 1.0
    overhead_s: float = 0.0   # the epoch_overhead set, before ranks sharing cores slow it


@dataclass(frozen=True)
class Sample:
    """One measured epoch: the predicted seconds of each group under the uncalibrated table
    (``parts``: sparse, dense, links, and the crowding factor the overhead is slowed by)
    and the measured seconds."""
    parts: tuple
    measured: float


def scaled(rates: ComputeRates, network: Network, factors: Factors) -> tuple:
    """(rates, network) with each group times its factor and the overhead set."""
    rates = replace(rates, gemm_flops=rates.gemm_flops / factors.dense, epoch_overhead=factors.overhead_s,
                    source=f"{rates.source}, calibrated",
                    **{name: getattr(rates, name) * factors.sparse for name in SPARSE},
                    **{name: getattr(rates, name) * factors.dense for name in DENSE})
    network = replace(network, intra_bw=network.intra_bw / factors.links, inter_bw=network.inter_bw / factors.links,
                      host_bw=network.host_bw / factors.links,
                      intra_latency=network.intra_latency * factors.links,
                      inter_latency=network.inter_latency * factors.links, source=f"{network.source}, calibrated")
    return rates, network


def parts(predict: Callable, rates: ComputeRates, network: Network, crowding: float = 1.0) -> tuple:
    """The seconds ``predict(rates, network)`` gives to each group: it is linear in them, so
    each group alone (the others switched off) is its share. The overhead is left out here
    (``rates`` should carry none) and enters the fit as ``crowding``."""
    rates = replace(rates, epoch_overhead=0.0)
    alone = [Factors(1.0, _TINY, _TINY), Factors(_TINY, 1.0, _TINY), Factors(_TINY, _TINY, 1.0)]
    return tuple(predict(*scaled(rates, network, f)) for f in alone) + (crowding,)


def fit(samples: list) -> Factors:
    """The factors that bring the samples' predictions closest to their measurements, in
    relative error."""
    from scipy.optimize import nnls
    a = np.array([s.parts for s in samples], dtype=float)
    t = np.array([s.measured for s in samples], dtype=float)
    coef, _ = nnls(a / t[:, None], np.ones_like(t))
    return Factors(*(float(c) for c in coef))

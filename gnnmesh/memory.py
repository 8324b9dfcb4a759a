"""Peak memory of each rank, as reported with every epoch.

A rank's figure is its process high-water mark (so an epoch's figure covers the run so far,
setup included), and on CUDA the peak of ``torch.cuda.max_memory_allocated``. The
per-rank figures travel in the gather an epoch report already makes; ``fields`` turns them
into the report's entries.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys

import torch

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"  # writing "5" restarts VmHWM from the current size


def _status_mib(field: str):
    try:
        with open(_STATUS) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def current_rss_mib() -> float:
    """This process's resident memory now (VmRSS), in MiB (0 where unknown)."""
    return _status_mib("VmRSS") or 0.0


def _high_water_mib() -> float:
    """The process's resident high-water mark since it started or was last restarted."""
    peak = _status_mib("VmHWM")
    if peak is not None:
        return peak
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


# The peaks from before the last ``restart_peaks``: the run's figures never go down.
_carried: dict = {}


def peak_rss_mib() -> float:
    """This process's peak resident memory over the whole run, in MiB."""
    return max(_carried.get("rss", 0.0), _high_water_mib())


def _device_peak_mib(device) -> float:
    return max(_carried.get(str(device), 0.0), torch.cuda.max_memory_allocated(device) / 2**20)


def restart_peaks(device) -> float:
    """Start measuring peaks afresh from now (the run's peaks above are kept): the resident
    high-water mark (Linux; elsewhere it keeps running) and, on CUDA, the device's. For a
    strategy that bounds each epoch's memory. Returns the resident memory now, in MiB."""
    _carried["rss"] = peak_rss_mib()
    try:
        with open(_CLEAR_REFS, "w") as fh:
            fh.write("5")
    except OSError:
        pass
    device = torch.device(device)
    if device.type == "cuda":
        _carried[str(device)] = _device_peak_mib(device)
        torch.cuda.reset_peak_memory_stats(device)
    return current_rss_mib()


def peaks_since_restart(device) -> float:
    """Bytes at the peak since the last ``restart_peaks``: the device's allocations on CUDA,
    else the resident memory's high-water mark."""
    device = torch.device(device)
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    return _high_water_mib() * 2**20


def release_freed(collect: bool = False) -> None:
    """Return the memory the C allocator keeps after frees to the system (glibc's
    ``malloc_trim``), so that resident memory follows live data: freed buffers are otherwise
    kept, fragmented, and the next ones take fresh pages. For passes that bound their memory.
    ``collect``: free unreachable Python objects first (slower; before taking a baseline)."""
    if collect:
        gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def map_large_blocks(threshold: int = 1 << 20) -> None:
    """Have the C allocator map every block of ``threshold`` bytes or more on its own, and
    unmap it when freed (glibc's ``mallopt(M_MMAP_THRESHOLD)``). By default glibc raises its
    threshold (to 32 MiB) after the first large free, and the blocks below it then come from
    its heap, which keeps them, fragmented, after they are freed: a pass that allocates and
    frees many such temporaries (a halo fetched peer by peer, a product piece by piece) would
    hold them all in resident memory at once. Nothing where the allocator is not glibc's."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(M_MMAP_THRESHOLD, int(threshold))


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def rank_peaks(device) -> dict:
    """This rank's peaks over the run: ``rss`` and, on CUDA, ``device`` (MiB)."""
    peaks = {"rss": peak_rss_mib()}
    device = torch.device(device)
    if device.type == "cuda":
        peaks["device"] = _device_peak_mib(device)
    return peaks


def fields(per_rank: list) -> dict:
    """Report entries from every rank's ``rank_peaks`` (in rank order): the per-rank list,
    and its max, min and sum."""
    out = {}
    for name in ("rss", "device"):
        if name not in per_rank[0]:
            continue
        values = [round(r[name], 1) for r in per_rank]
        out[f"rank_peak_{name}_mib"] = values
        out[f"peak_{name}_mib_max"] = max(values)
        out[f"peak_{name}_mib_min"] = min(values)
        out[f"peak_{name}_mib_sum"] = round(sum(values), 1)
    return out


def of(extra: dict) -> dict:
    """The memory entries of an epoch report."""
    return {k: v for k, v in extra.items() if k.startswith(("rank_peak_", "peak_"))}


def describe(extra: dict) -> str:
    """``memory: peak 812-840 MiB per rank, 3,301 MiB in all`` (and the device's, on CUDA)."""
    text = "memory: peak " + _span(extra, "rss")
    if "peak_device_mib_max" in extra:
        text += "; device peak " + _span(extra, "device")
    return text


def _span(extra: dict, name: str) -> str:
    low, high, total = (extra[f"peak_{name}_mib_{k}"] for k in ("min", "max", "sum"))
    if len(extra[f"rank_peak_{name}_mib"]) == 1:
        return f"{high:,.0f} MiB"
    return f"{low:,.0f}-{high:,.0f} MiB per rank, {total:,.0f} MiB in all"


def blas_workspace_bytes(device) -> int:
    """What cuBLAS takes on ``device`` for each thread that multiplies there (its workspace,
    allocated through torch's caching allocator, so within a budget it must be counted):
    ``CUBLAS_WORKSPACE_CONFIG``'s (":KiB:count" pairs), else torch's default, 32 MiB on Hopper
    and later GPUs and 8,320 KiB before them. Nothing on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        pieces = [p for p in config.split(":") if p]
        try:
            return sum(int(size) * int(count) for size, count in zip(pieces[::2], pieces[1::2])) * 1024
        except ValueError:
            pass  # cuBLAS ignores a malformed setting too: its default holds
    major = torch.cuda.get_device_capability(device)[0]
    return (4096 * 8 if major >= 9 else 4096 * 2 + 16 * 8) * 1024

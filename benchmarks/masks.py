"""Dropout mask cost: the global draw every rank once made (one PCG64 stream over all V
rows, then keep its own), the draw per block of 1024 rows that followed (one PCG64 stream
per block a rank's rows touch), and the hash per global id used now (only the rows asked for).

    python benchmarks/masks.py [--rows 1000000] [--width 128] [--ranks 4] [--repeats 5]

Time and peak resident memory above the memory held before the call (the process
high-water mark, reset before every call), median of the repeats and their min-max; the
schemes alternate within each repeat. Ids: all rows (one process), one rank's contiguous
quarter, one rank's scattered quarter (a random partition: the worst case, every block is
touched).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

from gnnmesh import view as masks


def old_mask(ids, rows: int, shape: tuple, p: float, seed: int) -> torch.Tensor:
    """The former scheme: the global mask from one stream, then this rank's rows."""
    count = rows * int(np.prod(shape))
    draws = np.frombuffer(np.random.default_rng(seed).bytes(2 * count), dtype=np.uint16)
    keep = torch.from_numpy(draws.reshape((rows,) + shape) >= round(p * 65536))
    return keep[ids.start:ids.stop] if isinstance(ids, range) else keep[ids]


BLOCK = 1024


def block_mask(ids, rows: int, shape: tuple, p: float, seed: int) -> torch.Tensor:
    """The former per-block scheme: every block of BLOCK rows that ``ids`` touch is drawn whole."""
    ids = np.arange(ids.start, ids.stop) if isinstance(ids, range) else np.asarray(ids)
    width = int(np.prod(shape))
    out = np.empty((len(ids), width), dtype=bool)
    blocks = ids // BLOCK
    for block in np.unique(blocks):
        words = np.random.PCG64([seed, int(block)]).random_raw(-(-BLOCK * width // 4))
        draws = words.astype("<u8", copy=False).view("<u2")[:BLOCK * width].reshape(BLOCK, width)
        mine = blocks == block
        out[mine] = draws[ids[mine] - block * BLOCK] >= round(p * 65536)
    return torch.from_numpy(out.reshape((len(ids),) + shape))


def new_mask(ids, rows, shape, p, seed):
    return masks.rows_mask(ids, shape, p, seed, "cpu")


def _kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(field)


def measure_once(fn, ids, rows, shape, seed):
    """(seconds, MiB of resident memory above the start) of one call."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the high-water mark restarts from the current resident size
    before = _kib("VmRSS")
    start = time.perf_counter()
    out = fn(ids, rows, shape, 0.5, seed)
    seconds = time.perf_counter() - start
    del out
    return seconds, (_kib("VmHWM") - before) / 1024


def cases(rows: int, ranks: int):
    quarter = rows // ranks
    owner = np.random.default_rng(0).integers(0, ranks, rows)
    return {"all rows": range(rows),
            f"1/{ranks} contiguous": range(quarter, 2 * quarter),
            f"1/{ranks} scattered": torch.from_numpy(np.flatnonzero(owner == 1))}


def fmt(values, unit, digits):
    return f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:  # large buffers straight from mmap, so
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")  # freed memory leaves the process
        sys.exit(subprocess.call([sys.executable] + sys.argv, env=env))
    torch.set_num_threads(1)
    shape = (args.width,)
    print(f"mask of {args.rows:,} x {args.width} rows, p = 0.5, {args.repeats} repeats: "
          f"median (min-max); peak = resident memory above the memory held before the call")
    print("| ids | scheme | time | peak above start |")
    print("|---|---|---|---|")
    schemes = [("global draw (first)", old_mask), (f"blocks of {BLOCK} rows (second)", block_mask),
               ("hash per id (now)", new_mask)]
    for name, ids in cases(args.rows, args.ranks).items():
        runs = {label: [] for label, _ in schemes}
        for r in range(args.repeats):  # schemes alternate, so that load from elsewhere hits all alike
            for label, fn in schemes:
                runs[label].append(measure_once(fn, ids, args.rows, shape, 1234 + r))
        for label, got in runs.items():
            times, peaks = zip(*got)
            print(f"| {name} ({len(ids):,}) | {label} | {fmt(times, 's', 3)} | {fmt(peaks, 'MiB', 1)} |", flush=True)
    output = args.rows * args.width / 2**20
    print(f"(the output alone: {output:.1f} MiB for all rows, {output / args.ranks:.1f} MiB for 1/{args.ranks})")


if __name__ == "__main__":
    main()

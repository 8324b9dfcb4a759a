"""The training benchmarks' one driver: run ``gnnmesh train`` in a fresh process, read its
per-epoch metrics, and summarize them as median (min-max).

    from driver import TrainFailed, epochs, spread, train

    records = train(["--dataset", "cora", "--nproc", "2", "--strategy", "partition"])
    kept = epochs(records, first=1, last=1)        # leave out warm-up and a final evaluation
    print(spread(kept, "epoch_time"))              # '0.043 (0.041-0.050)'

A benchmark run as ``python benchmarks/NAME.py`` finds this module beside it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union


class TrainFailed(RuntimeError):
    """A ``gnnmesh train`` run that exited with an error or ran out of time; the message is
    the run's last line of error output (or the time limit)."""


def train(flags: Sequence[str], timeout: Optional[float] = None, data_root: Optional[str] = None) -> list:
    """Run ``python -m gnnmesh train FLAGS --metrics FILE --quiet`` and return its per-epoch
    records (one dict per epoch, as the metrics file holds them). ``data_root`` adds
    ``--data-root`` when given. Output is captured; a failure raises ``TrainFailed``."""
    flags = [str(f) for f in flags] + (["--data-root", str(data_root)] if data_root else [])
    with tempfile.TemporaryDirectory(prefix="gnnmesh-bench-") as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        cmd = [sys.executable, "-m", "gnnmesh", "train", *flags, "--metrics", str(metrics), "--quiet"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TrainFailed(f"over {timeout:g} s") from None
        if done.returncode:
            lines = done.stderr.strip().splitlines()
            raise TrainFailed(lines[-1] if lines else f"exit status {done.returncode}")
        return [json.loads(line) for line in metrics.read_text().splitlines()]


def train_on_hosts(flags: Sequence[str], hosts: int, per_host: int, timeout: Optional[float] = None,
                   data_root: Optional[str] = None) -> list:
    """``train`` as a job of ``hosts`` machines of ``per_host`` ranks each, on this one: one
    torchrun agent per host, meeting on localhost (each host's ranks share its features only)."""
    import socket
    flags = [str(f) for f in flags] + (["--data-root", str(data_root)] if data_root else [])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="gnnmesh-bench-") as tmp:
        metrics = Path(tmp) / "metrics.jsonl"  # rank 0, on host 0, writes it
        agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(hosts),
                                    "--nproc-per-node", str(per_host), "--node-rank", str(host),
                                    "--master-addr", "127.0.0.1", "--master-port", port, "-m", "gnnmesh", "train",
                                    *flags, "--metrics", str(metrics), "--quiet"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for host in range(hosts)]
        try:
            errors = [agent.communicate(timeout=timeout)[1] for agent in agents]
        except subprocess.TimeoutExpired:
            raise TrainFailed(f"over {timeout:g} s") from None
        finally:
            for agent in agents:
                agent.kill()
        for agent, err in zip(agents, errors):
            if agent.returncode:
                lines = err.strip().splitlines()
                raise TrainFailed(lines[-1] if lines else f"exit status {agent.returncode}")
        return [json.loads(line) for line in metrics.read_text().splitlines()]


def epochs(records: list, first: int = 0, last: int = 0) -> list:
    """The epochs that count: all but the ``first`` (warm-up) and the ``last`` (an epoch that
    also evaluates, say); the final epoch alone if that leaves none."""
    kept = records[first:len(records) - last]
    return kept or records[-1:]


@dataclass(frozen=True)
class Spread:
    """Median and range of one figure over the epochs (or runs) measured."""
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values) -> "Spread":
        values = [float(v) for v in values]
        return cls(statistics.median(values), min(values), max(values))

    def format(self, digits: int = 2, scale: float = 1.0) -> str:
        """``median (low-high)``, each multiplied by ``scale``; the median alone when all are equal."""
        values = [f"{v * scale:.{digits}f}" for v in (self.median, self.low, self.high)]
        return values[0] if values[1] == values[2] else f"{values[0]} ({values[1]}-{values[2]})"

    def __str__(self) -> str:
        return self.format()


Field = Union[str, Callable[[dict], float]]


def spread(records: list, field: Field) -> Spread:
    """Median, min and max over ``records`` of a metrics field: a name (a missing or null
    value counts as 0) or a function of one record."""
    get = field if callable(field) else (lambda r: r.get(field) or 0.0)
    return Spread.of(get(r) for r in records)


def imbalance(record: dict) -> float:
    """Compute time of the slowest rank over that of the fastest, in one epoch."""
    return record["compute_time_max"] / max(record["compute_time_min"], 1e-9)


def split_specs(text: str) -> list:
    """Dataset specs separated by commas, a spec's own options (``key=value``) kept with it."""
    out = []
    for piece in text.split(","):
        if out and "=" in piece and ":" not in piece:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def out_of_core_parser(doc: str, datasets: str, ranks: int, ranks_help: str, ratio_help: str):
    """The arguments the out-of-core benchmarks share: graphs, data root, ranks, budget ratio,
    epochs, host store and time limit."""
    import argparse
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=datasets)
    ap.add_argument("--data-root", dest="root")
    ap.add_argument("--ratio", type=float, default=4.0, help=ratio_help)
    ap.add_argument("--ranks", type=int, default=ranks, help=ranks_help)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--store", choices=("ram", "file"), default="ram")
    ap.add_argument("--timeout", type=float, default=3600)
    return ap



# -- the epoch table every model benchmark prints (epoch_vs_pyg.py on CPU, gpu.py on a GPU) -----
EPOCH_COLUMNS = ("model", "framework", "epoch ms, median (min-max)", "sys ms per epoch", "peak {memory} MiB",
                 "gnnmesh / PyG: time", "memory")


def epoch_header(memory: str) -> None:
    """The epoch table's header; ``memory`` names what the peak counts (RSS, device)."""
    print("\n| " + " | ".join(c.format(memory=memory) for c in EPOCH_COLUMNS) + " |")
    print("|" + "---|" * len(EPOCH_COLUMNS))


def epoch_row(model: str, framework: str, epoch: Spread, sys: Optional[Spread], peak: Optional[Spread],
              against: Optional[tuple] = None) -> None:
    """One framework's row: its epoch and kernel (sys) time in seconds and peak memory in MiB
    (None: not measured, shown as -); ``against``, on gnnmesh's row, PyG's ``(epoch, peak)``
    for the ratios."""
    def cell(value: Optional[Spread], digits: int, scale: float = 1.0) -> str:
        return "-" if value is None else value.format(digits, scale)

    time_ratio = memory_ratio = ""
    if against is not None:
        time_ratio = f"**{epoch.median / against[0].median:.2f}x**"
        memory_ratio = "-" if peak is None or against[1] is None else f"**{peak.median / against[1].median:.2f}x**"
    print(f"| {model} | {framework} | {epoch.format(1, 1e3)} | {cell(sys, 1, 1e3)} | {cell(peak, 0)} | {time_ratio} "
          f"| {memory_ratio} |", flush=True)

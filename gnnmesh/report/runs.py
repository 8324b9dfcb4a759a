"""Reading the metrics files ``gnnmesh train --metrics`` writes (one JSON object per epoch)
into runs, with every field the report uses checked first: the figures are drawn only from
input that has passed, and a bad file is one line naming it and the line.

The file is read here, not through ``gnnmesh.train.metrics``, so that the report needs
nothing of the training stack."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ConfigError
from ..structured import TooDeep, loads_json

ACCURACIES = ("train_acc", "val_acc", "test_acc")
# Fields read as numbers (null allowed: not computed that epoch).
NUMBERS = ("loss", *ACCURACIES, "epoch_time", "compute_time_min", "compute_time_max", "bytes_total")
RANK_LISTS = ("rank_compute_time", "rank_comm_time")  # one number per rank
NAMES = ("candidate", "strategy")                      # what a plan's candidate is matched on
# Bytes moved between the tiers of an out-of-core run: phases of their own beside the
# communication phases (each ``P_bytes`` that comes with a ``P_messages``).
TIER_PHASES = {"offload_load": "host to fast tier", "offload_store": "fast to host tier"}


@dataclass
class Run:
    label: str          # the file's stem, or its path where stems collide
    path: str
    records: list       # one dict per epoch, epochs increasing
    restarts: list = dataclasses.field(default_factory=list)  # the job's restarts after losing ranks, in order

    @property
    def epochs(self) -> list:
        return [r["epoch"] for r in self.records]

    def series(self, field: str) -> tuple:
        """(epochs, values) of the epochs where ``field`` has a value."""
        pairs = [(r["epoch"], r[field]) for r in self.records if r.get(field) is not None]
        return [e for e, _ in pairs], [v for _, v in pairs]

    def has(self, field: str) -> bool:
        return any(r.get(field) is not None for r in self.records)

    def ranks(self, field: str) -> list:
        """``field``'s per-rank lists as one series per rank: [(epochs, values), ...]."""
        width = max((len(r[field]) for r in self.records if r.get(field) is not None), default=0)
        out = []
        for rank in range(width):
            pairs = [(r["epoch"], r[field][rank]) for r in self.records
                     if r.get(field) is not None and rank < len(r[field]) and r[field][rank] is not None]
            out.append(([e for e, _ in pairs], [v for _, v in pairs]))
        return out

    def phases(self) -> dict:
        """{phase: (epochs, bytes)} of the phases that moved any bytes, in the records' order."""
        names = []
        for record in self.records:
            for key in record:
                phase = _phase(key, record)
                if phase and phase not in names:
                    names.append(phase)
        out = {}
        for phase in names:
            epochs, values = self.series(f"{phase}_bytes")
            if any(values):
                out[phase] = (epochs, values)
        return out

    def median_epoch_time(self) -> Optional[float]:
        _, times = self.series("epoch_time")
        return statistics.median(times) if times else None

    def final_loss(self) -> Optional[float]:
        _, losses = self.series("loss")
        return losses[-1] if losses else None

    def best(self) -> Optional[tuple]:
        """(epoch, validation accuracy, test accuracy or None) of the first epoch with the best
        validation accuracy, as the trainer picks its model; None without validation."""
        scored = [r for r in self.records if r.get("val_acc") is not None]
        if not scored:
            return None
        top = max(scored, key=lambda r: r["val_acc"])  # max keeps the first of equals
        return top["epoch"], top["val_acc"], top.get("test_acc")

    def total_bytes(self) -> Optional[int]:
        _, values = self.series("bytes_total")
        return sum(values) if values else None

    def key(self) -> str:
        """What a plan's candidate is matched on: the records' ``candidate``, else their
        ``strategy``, else the run's label (name the file after the candidate)."""
        for field in NAMES:
            values = [r[field] for r in self.records if r.get(field) is not None]
            if values:
                return values[-1]
        return self.label


def read_runs(paths: list) -> list:
    """One run per metrics file, labelled by file stem (by path where stems collide)."""
    runs = [read_run(path) for path in paths]
    stems = [Path(r.path).stem for r in runs]
    labels = []
    for run, stem in zip(runs, stems):
        label = stem if stems.count(stem) == 1 else run.path
        while label in labels:  # the same file given twice
            label += "'"
        labels.append(label)
        run.label = label
    return runs


def read_run(path) -> Run:
    """The run in one metrics file. A last line without its newline that does not parse is
    what a kill during an append leaves (or a run still writing): dropped with a warning."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the metrics file ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a metrics file (not UTF-8 text)") from None
    lines = text.split("\n")
    records, restarts = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = loads_json(line, parse_constant=lambda name: None)  # NaN, Infinity: no value
        except TooDeep:
            raise ConfigError(f"{path} line {number}: not a JSON metrics record (nested too deeply)") from None
        except ValueError:
            if number == len(lines):
                warnings.warn(f"{path} line {number}: dropping a torn last line (an interrupted write)")
                continue
            raise ConfigError(f"{path} line {number}: not a JSON metrics record") from None
        if isinstance(record, dict) and "restart" in record:  # not an epoch: the job restarted here
            _check_restart(record, f"{path} line {number}")
            restarts.append(record)
            continue
        _check(record, f"{path} line {number}")
        if records and record["epoch"] <= records[-1]["epoch"]:
            raise ConfigError(f"{path} line {number}: epoch {record['epoch']} after epoch {records[-1]['epoch']}")
        records.append(record)
    if not records:
        raise ConfigError(f"{path}: no metrics records (written by 'gnnmesh train --metrics FILE')")
    return Run(Path(path).stem, str(path), records, restarts)


def _check_restart(record: dict, where: str) -> None:
    if not (_integer(record["restart"]) and record["restart"] >= 1 and _integer(record.get("epoch"))
            and record["epoch"] >= 0):
        raise ConfigError(f"{where}: not a restart record (a JSON object with a 'restart' >= 1 and an "
                          f"'epoch' >= 0)")


def _check(record, where: str) -> None:
    if not isinstance(record, dict) or not _integer(record.get("epoch")) or record["epoch"] < 1:
        raise ConfigError(f"{where}: not a metrics record (a JSON object with an 'epoch' >= 1)")
    for field in NUMBERS:
        if not _number_or_null(record.get(field)):
            raise ConfigError(f"{where}: field '{field}' must be a finite number or null, got {_show(record[field])}")
    for key, value in record.items():  # the phases' bytes (other fields are not drawn)
        if _phase(key, record) and not _number_or_null(value):
            raise ConfigError(f"{where}: field '{key}' must be a finite number or null, got {_show(value)}")
    for field in RANK_LISTS:
        value = record.get(field)
        if value is not None and not (isinstance(value, list) and all(map(_number_or_null, value))):
            raise ConfigError(f"{where}: field '{field}' must be a list of numbers (one per rank), "
                              f"got {_show(value)}")
    for field in NAMES:
        if record.get(field) is not None and not isinstance(record[field], str):
            raise ConfigError(f"{where}: field '{field}' must be a string, got {_show(record[field])}")


def _phase(key: str, record: dict) -> Optional[str]:
    """The phase whose bytes ``key`` holds, if it is a phase's: a communication phase
    (``P_bytes`` with ``P_messages``) or a tier transfer."""
    if not key.endswith("_bytes") or key.startswith("rank_"):
        return None
    phase = key[:-len("_bytes")]
    return phase if f"{phase}_messages" in record or phase in TIER_PHASES else None


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number_or_null(value) -> bool:
    """null, or a finite number a float holds (a literal such as 1e999 overflows to infinity, and
    an integer past 2**63 is no count any run measured)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63)


def _show(value) -> str:
    """A value for an error message, cut short: the message stays one line."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."

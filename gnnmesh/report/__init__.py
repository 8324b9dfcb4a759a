"""``gnnmesh report``: pictures and a markdown summary of training runs (their metrics
files) and, optionally, of a plan beside what the runs measured.

``runs`` reads and checks metrics files, ``plan_file`` writes and reads plan files,
``compare`` pairs a plan's candidates with runs, ``figures`` draws (matplotlib, imported
only there) and ``markdown`` writes the summary. ``write_report`` puts them together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..atomic import OutputKind, check_replaceable, staged_directory
from ..errors import ConfigError
from . import figures, markdown
from .plan_file import read_plan
from .runs import read_runs

SUMMARY = "report.md"


@dataclass(frozen=True)
class Report:
    directory: Path
    runs: list
    pictures: list      # figures.Picture, drawn or skipped


def written_files(directory) -> list:
    """The files the report in ``directory`` consists of: its report.md (a ConfigError when that
    is not one ``write_report`` wrote) and the pictures it shows."""
    path = Path(directory) / SUMMARY
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: unreadable ({type(err).__name__})") from None
    if text.split("\n", 1)[0] != markdown.TITLE:
        raise ConfigError(f"{path}: not a gnnmesh report")
    return [SUMMARY] + markdown.linked(text, figures.FILES)


OUTPUT = OutputKind("report directory", SUMMARY, written_files)  # what ``write_report`` may replace


def write_report(run_paths: list, out, plan_path: Optional[str] = None) -> Report:
    """Read and check every input, then draw into a fresh directory that replaces ``out``
    only once everything is written: on any error ``out`` is as it was. Only an earlier report
    holding nothing else is replaced: anything else there (the metrics files themselves, say)
    would be lost."""
    figures.require_matplotlib()
    out = Path(out)
    check_replaceable(out, OUTPUT)
    runs = read_runs(run_paths)
    plan = read_plan(plan_path) if plan_path else None
    with staged_directory(out, OUTPUT) as tmp:
        pictures = figures.draw(runs, plan, tmp)
        (tmp / SUMMARY).write_text(markdown.summary(runs, pictures, plan), encoding="utf-8")
    return Report(out, runs, pictures)

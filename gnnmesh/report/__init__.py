"""``gnnmesh report``: pictures and a markdown summary of training runs (their metrics
files) and, optionally, of a plan beside what the runs measured.

``runs`` reads and checks metrics files, ``plan_file`` writes and reads plan files,
``compare`` pairs a plan's candidates with runs, ``figures`` draws (matplotlib, imported
only there) and ``markdown`` writes the summary. ``write_report`` puts them together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..atomic import staged_directory
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


def write_report(run_paths: list, out, plan_path: Optional[str] = None) -> Report:
    """Read and check every input, then draw into a fresh directory that replaces ``out``
    only once everything is written: on any error ``out`` is as it was."""
    figures.require_matplotlib()
    out = Path(out)
    _check_out(out)
    runs = read_runs(run_paths)
    plan = read_plan(plan_path) if plan_path else None
    # "--out ." has no name: staged beside its resolved path, errors naming it as given
    with staged_directory(out.resolve(), SUMMARY, "report directory", name=out) as tmp:
        pictures = figures.draw(runs, plan, tmp)
        (tmp / SUMMARY).write_text(markdown.summary(runs, pictures, plan), encoding="utf-8")
    return Report(out, runs, pictures)


def _check_out(out: Path) -> None:
    """A directory is replaced whole, so only one holding nothing but a report's own files may
    be: anything else there (the metrics files themselves, say) would be lost."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: not a directory")
    if out.is_dir():
        ours = {SUMMARY, *figures.FILES}
        foreign = sorted(p.name for p in out.iterdir() if p.name not in ours)
        if foreign:
            raise ConfigError(f"--out {out}: holds files that are not a report's ({', '.join(foreign[:3])}"
                              f"{', ...' if len(foreign) > 3 else ''}); refusing to replace it")

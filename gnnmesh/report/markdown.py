"""The report's text: ``report.md``, one table row per run, the pictures linked relative to
it (so the directory can be moved or published as it is), and a plan's ranked candidates."""

from __future__ import annotations

from typing import Optional

from .compare import compare

TITLE = "# Training report"  # the first line: what tells a report.md of gnnmesh's from another


def summary(runs: list, pictures: list, plan=None) -> str:
    lines = [TITLE, "",
             "| run | file | epochs | final loss | best validation accuracy (epoch) | test accuracy there "
             "| median epoch time | bytes between ranks (all epochs) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        best = run.best()
        lines.append(f"| {_cell(run.label)} | `{_cell(run.path)}` | {len(run.records)} | {_num(run.final_loss(), 4)} "
                     f"| {'-' if best is None else f'{best[1]:.4f} ({best[0]})'} "
                     f"| {'-' if best is None else _num(best[2], 4)} | {_seconds(run.median_epoch_time())} "
                     f"| {_bytes(run.total_bytes())} |")
    lines.append("")
    for picture in pictures:
        lines += [f"## {picture.title}", ""]
        if picture.skipped:
            lines += [f"Not drawn: {picture.skipped}.", ""]
        else:
            lines += [f"![{picture.title}]({picture.file})", ""]
    if plan is not None:
        lines += _plan(plan, runs)
    return "\n".join(lines)


def linked(text: str, files) -> list:
    """The pictures among ``files`` that the report ``text`` shows (a ``summary``'s links)."""
    return [name for name in files if f"]({name})" in text]


def _plan(plan, runs: list) -> list:
    lines = [f"## Plan: {_cell(plan.strategy)}, ranked by predicted epoch time", "",
             f"From `{_cell(plan.path)}`. A run measured a candidate when its records name it (field "
             "`candidate`, else `strategy`) or, without those, when its file is named after it.", "",
             "| rank | candidate | predicted epoch time | measured (median epoch) | runs | bytes per rank "
             "| peak memory | dominant |",
             "|---:|---|---:|---:|---|---:|---:|---|"]
    for row in compare(plan, runs):
        c = row.candidate
        lines.append(f"| {row.rank} | {_cell(c.name)} | {_seconds(c.predicted_epoch_s)} | {_seconds(row.measured_s)} "
                     f"| {', '.join(_cell(r) for r in row.runs) or '-'} | {_bytes(c.bytes_per_rank)} "
                     f"| {_bytes(c.peak_memory_bytes)} | {_cell(c.dominant or '-')} |")
    lines.append("")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")  # a name must not break the table


def _num(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _seconds(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def _bytes(value: Optional[int]) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{int(value)} B"

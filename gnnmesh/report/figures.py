"""The report's pictures, each a PNG of one fixed size (SIZE pixels).

matplotlib is imported only inside ``draw`` (the library never needs it), and only its
object API is used, never pyplot: no backend is switched and no global figure state kept,
so drawing a report inside another program's session leaves that session alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ConfigError
from .compare import compare
from .runs import ACCURACIES, TIER_PHASES

WIDTH_IN, HEIGHT_IN, DPI = 8, 4.5, 100
SIZE = (WIDTH_IN * DPI, int(HEIGHT_IN * DPI))   # (800, 450) pixels
MAX_CANDIDATES = 30     # bars beyond these are unreadable at this size; the markdown lists all
# tab10: one colour per run, the same in every picture
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf")
SPLITS = {"train_acc": ("train", ":"), "val_acc": ("validation", "-"), "test_acc": ("test", "--")}
RANK_STYLES = ("-", "--", ":", "-.")
INSTALL = 'pip install "gnnmesh[plot]"'


@dataclass(frozen=True)
class Picture:
    file: str
    title: str
    skipped: Optional[str] = None   # why it was not drawn


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(f"the report draws with matplotlib, which is not installed: {INSTALL}") from None


def draw(runs: list, plan, directory) -> list:
    """Draw every picture that some run (or the plan) has the data for into ``directory``;
    one Picture each, drawn or skipped."""
    require_matplotlib()
    colors = {run.label: COLORS[i % len(COLORS)] for i, run in enumerate(runs)}
    out = []
    for file, title, how in PICTURES:
        skipped = how(runs, plan, colors, Path(directory) / file)
        out.append(Picture(file, title, skipped))
    return out


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path) -> None:
    # no bbox_inches="tight": it would change the size; no version metadata: same input, same file
    figure.savefig(path, format="png", dpi=DPI, metadata={"Software": None})


def _epoch_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.grid(alpha=0.3)


def _marker(epochs: list) -> Optional[str]:
    return "o" if len(epochs) <= 30 else None   # a few points: show where they are


# ---------------------------------------------------------------------------- the pictures

def loss(runs, plan, colors, path) -> Optional[str]:
    drawn = [r for r in runs if r.has("loss")]
    if not drawn:
        return "no run records a loss"
    figure = _figure()
    ax = figure.subplots()
    for run in drawn:
        epochs, values = run.series("loss")
        ax.plot(epochs, values, color=colors[run.label], marker=_marker(epochs), markersize=3, label=run.label)
    ax.set(ylabel="training loss", title="Loss per epoch")
    _epoch_axis(ax)
    ax.legend()
    _save(figure, path)
    return None


def accuracy(runs, plan, colors, path) -> Optional[str]:
    drawn = [r for r in runs if any(r.has(f) for f in ACCURACIES)]
    if not drawn:
        return "no run records an accuracy"
    from matplotlib.lines import Line2D
    figure = _figure()
    ax = figure.subplots()
    splits = [f for f in ACCURACIES if any(r.has(f) for r in drawn)]
    for run in drawn:
        for field in splits:
            epochs, values = run.series(field)
            ax.plot(epochs, values, color=colors[run.label], linestyle=SPLITS[field][1],
                    marker=_marker(epochs), markersize=3)
    # one legend entry per run (colour) and per split (line style), not per pair
    handles = [Line2D([], [], color=colors[r.label], label=r.label) for r in drawn]
    handles += [Line2D([], [], color="black", linestyle=SPLITS[f][1], label=SPLITS[f][0]) for f in splits]
    ax.set(ylabel="accuracy", title="Accuracy per epoch")
    _epoch_axis(ax)
    ax.legend(handles=handles)
    _save(figure, path)
    return None


def rank_times(runs, plan, colors, path) -> Optional[str]:
    # one rank's "per-rank" time is its epoch time: only runs of several ranks are drawn
    drawn = [r for r in runs if max(len(r.ranks("rank_comm_time")), len(r.ranks("rank_compute_time"))) > 1]
    if not drawn:
        return "no run records per-rank times of several ranks"
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    figure = _figure()
    compute, comm = figure.subplots(1, 2, sharey=True)
    banded = False
    for run in drawn:
        color = colors[run.label]
        if run.has("rank_compute_time"):
            _per_rank(compute, run.ranks("rank_compute_time"), color)
        else:  # the records give the range over ranks only
            pairs = [(r["epoch"], r["compute_time_min"], r["compute_time_max"]) for r in run.records
                     if r.get("compute_time_min") is not None and r.get("compute_time_max") is not None]
            if pairs:
                epochs = [p[0] for p in pairs]
                compute.fill_between(epochs, [1e3 * p[1] for p in pairs], [1e3 * p[2] for p in pairs],
                                     color=color, alpha=0.3, linewidth=0)
                compute.plot(epochs, [1e3 * p[2] for p in pairs], color=color, linewidth=1)
                compute.plot(epochs, [1e3 * p[1] for p in pairs], color=color, linewidth=1)
                banded = True
        _per_rank(comm, run.ranks("rank_comm_time"), color)
    compute.set(ylabel="milliseconds", title="Compute time per rank")
    comm.set(title="Communication time per rank")
    for ax in (compute, comm):
        _epoch_axis(ax)
        ax.set_ylim(bottom=0)
    handles = [Line2D([], [], color=colors[r.label], label=r.label) for r in drawn]
    handles += [Line2D([], [], color="black", linestyle=RANK_STYLES[i], label=f"rank {i}")
                for i in range(min(len(RANK_STYLES), max(len(r.ranks("rank_comm_time")) for r in drawn)))]
    if banded:
        handles.append(Patch(color="gray", alpha=0.3, label="min-max over ranks"))
    comm.legend(handles=handles, fontsize="small")
    _save(figure, path)
    return None


def _per_rank(ax, series: list, color: str) -> None:
    for rank, (epochs, values) in enumerate(series):
        ax.plot(epochs, [1e3 * v for v in values], color=color, linestyle=RANK_STYLES[rank % len(RANK_STYLES)],
                linewidth=1.2)


def phase_bytes(runs, plan, colors, path) -> Optional[str]:
    drawn = [(r, r.phases()) for r in runs]
    drawn = [(r, p) for r, p in drawn if p]
    if not drawn:
        return "no run records bytes per communication phase"
    import matplotlib
    names = []
    for _, phases in drawn:
        names += [p for p in phases if p not in names]
    palette = matplotlib.colormaps["tab20"]
    shade = {p: palette(i % 20) for i, p in enumerate(names)}   # a phase has one colour in every panel
    figure = _figure()
    # a panel per run, each on its own scale: runs' volumes differ by orders of magnitude
    axes = figure.subplots(1, len(drawn), squeeze=False)[0]
    for ax, (run, phases) in zip(axes, drawn):
        epochs = run.epochs
        bottom = [0.0] * len(epochs)
        for phase, (when, values) in phases.items():
            by_epoch = dict(zip(when, values))
            height = [by_epoch.get(e, 0) / 2**20 for e in epochs]
            ax.bar(epochs, height, bottom=bottom, width=0.8 if len(epochs) <= 60 else 1.0,
                   color=shade[phase], linewidth=0)
            bottom = [b + h for b, h in zip(bottom, height)]
        ax.set_title(run.label, fontsize="medium")
        _epoch_axis(ax)
    axes[0].set_ylabel("MiB per epoch (all ranks)")
    from matplotlib.patches import Patch
    handles = [Patch(color=shade[p], label=TIER_PHASES.get(p, p)) for p in names]
    figure.legend(handles=handles, loc="outside right upper", fontsize="small")
    figure.suptitle("Bytes per phase per epoch")
    _save(figure, path)
    return None


def plan_times(runs, plan, colors, path) -> Optional[str]:
    if plan is None:
        return "no plan given (--plan PLAN.json)"
    rows = [row for row in compare(plan, runs) if row.candidate.predicted_epoch_s is not None]
    if not rows:
        return f"the {plan.strategy} plan predicts no epoch times (only bytes and memory)"
    shown = rows[:MAX_CANDIDATES]
    figure = _figure()
    ax = figure.subplots()
    width = 0.4
    xs = list(range(len(shown)))
    predicted = [1e3 * row.candidate.predicted_epoch_s for row in shown]
    ax.bar([x - width / 2 for x in xs], predicted, width, color="#1f77b4", label="predicted")
    measured = [(x, 1e3 * row.measured_s) for x, row in zip(xs, shown) if row.measured_s is not None]
    if measured:
        ax.bar([x + width / 2 for x, _ in measured], [m for _, m in measured], width, color="#ff7f0e",
               label="measured (median epoch)")
    values = [v for v in predicted + [m for _, m in measured] if v > 0]
    if values and max(values) / min(values) > 50:  # nominal-GPU predictions beside CPU measurements
        ax.set_yscale("log")
    slanted = {"rotation": 45, "ha": "right", "fontsize": "small"} if len(shown) > 8 else {}
    ax.set_xticks(xs, [row.candidate.name for row in shown], **slanted)
    more = f", best {len(shown)} of {len(rows)}" if len(rows) > len(shown) else ""
    ax.set(ylabel="epoch time (ms)", title=f"{plan.strategy} plan: epoch time per candidate, "
                                           f"best prediction first{more}")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    _save(figure, path)
    return None


PICTURES = (
    ("loss.png", "Loss per epoch", loss),
    ("accuracy.png", "Accuracy per epoch", accuracy),
    ("ranks.png", "Compute and communication time per rank", rank_times),
    ("bytes.png", "Bytes per phase per epoch", phase_bytes),
    ("plan.png", "Plan: predicted and measured epoch time", plan_times),
)
FILES = tuple(file for file, _, _ in PICTURES)

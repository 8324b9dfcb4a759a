"""Phase and elapsed time of long work (generating, parsing and caching datasets,
partitioning, writing parts) on stderr, so that a long run shows it is alive.

    with progress.phase("rmat: drawing 20,000,000 edges", total=20_000_000) as p:
        ...
        p.advance(len(batch))

Quiet unless ``enable()`` was called: the library prints nothing of its own accord, and the
command line enables it for its process (rank 0 of a job, not under ``--quiet``).

A phase shows only once it has lasted ``delay`` seconds (default 1; ``$GNNMESH_PROGRESS``
sets it, or ``off``), so quick work prints nothing and a command that fails fast still
prints its one error line. On a terminal a shown phase is one line redrawn a few times a
second (name, a bar and percentage when the total is known, elapsed seconds), kept with
the time taken when it ends. Elsewhere (a log, a pipe) it prints plain lines: when it
shows, every ``HEARTBEAT_S`` while it runs, and when it ends. Of nested phases the
innermost is drawn; plain lines are indented by depth.

Each phase has a daemon thread that wakes every ``REFRESH_S``: work that runs long between
advances (or has none, like METIS) still shows and ticks. The phase stops and joins it on
exit, so it never outlives the phase.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import Optional

DELAY_S = 1.0        # a phase shorter than this prints nothing
REFRESH_S = 0.25     # a terminal line is redrawn at most this often
HEARTBEAT_S = 10.0   # plain lines while a long phase runs
BAR_WIDTH = 20
ENV = "GNNMESH_PROGRESS"
PREFIX = "gnnmesh: "  # plain lines, like the program's warnings and errors

_reporter: Optional["Reporter"] = None


def enable(stream=None, *, delay: Optional[float] = None, refresh: float = REFRESH_S,
           heartbeat: float = HEARTBEAT_S) -> None:
    """Report phases on ``stream`` (default stderr) from now on. ``delay``: seconds a phase
    lasts before it shows (default ``$GNNMESH_PROGRESS``, else DELAY_S; ``off`` there leaves
    reporting disabled)."""
    global _reporter
    if delay is None:
        delay = delay_from_env()
    _reporter = None if delay is None else Reporter(stream or sys.stderr, delay, refresh, heartbeat)


def disable() -> None:
    global _reporter
    _reporter = None


def enabled() -> bool:
    return _reporter is not None


def delay_from_env() -> Optional[float]:
    """``$GNNMESH_PROGRESS``: seconds, or ``off`` (None); unset or unreadable: DELAY_S."""
    text = os.environ.get(ENV, "").strip().lower()
    if text in ("off", "none", "no", "false"):
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        return DELAY_S


def phase(name: str, total: Optional[float] = None) -> "Phase":
    """A context manager for one phase of work; ``total``: the units ``advance`` counts
    toward, when known."""
    return Phase(name, total, _reporter)


class Phase:
    """One phase of work (see ``phase``); reports nothing without a reporter."""

    def __init__(self, name: str, total: Optional[float], reporter: Optional["Reporter"]):
        self.name, self.total, self.done = name, total, 0
        self.reporter = reporter
        self.start = 0.0
        self.shown, self.depth, self.last_shown = False, 0, float("-inf")
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None

    def advance(self, amount: float = 1) -> None:
        self.update(self.done + amount)

    def update(self, done: float) -> None:
        """Set the units done so far (for work that knows where it is, not how much it did)."""
        self.done = done
        if self.reporter is not None:
            self.reporter.poll(self)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def fraction(self) -> Optional[float]:
        if not self.total:
            return None
        return min(max(self.done / self.total, 0.0), 1.0)

    def __enter__(self) -> "Phase":
        self.start = time.perf_counter()
        if self.reporter is not None:
            self.reporter.begin(self)
            self._ticker = threading.Thread(target=self._tick, name=f"progress: {self.name}", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        try:
            if self._ticker is not None:
                self._stop.set()
                self._ticker.join()
        finally:  # also when a stop signal lands in the join
            if self.reporter is not None:
                self.reporter.end(self, failed=kind is not None)
        return False

    def _tick(self) -> None:
        while not self._stop.wait(self.reporter.refresh or REFRESH_S):
            self.reporter.poll(self)


class Reporter:
    """Draws the phases of one process on one stream."""

    def __init__(self, stream, delay: float, refresh: float, heartbeat: float):
        self.stream, self.delay, self.refresh, self.heartbeat = stream, delay, refresh, heartbeat
        self.live = _is_terminal(stream)
        self.stack: list = []      # the phases running, outermost first
        self.drawn = False         # a terminal line is on screen, not yet ended
        self.lock = threading.Lock()  # the caller's thread and the phases' tickers write

    def begin(self, phase: Phase) -> None:
        with self.lock:
            self.stack.append(phase)
        self.poll(phase)

    def poll(self, phase: Phase) -> None:
        with self.lock:
            if not self.stack or self.stack[-1] is not phase:  # an inner phase has the line
                return
            now = time.perf_counter()
            if not phase.shown:
                if now - phase.start < self.delay:
                    return
                self._show_with_ancestors()
                if not self.live:  # its start line is out; the first heartbeat comes later
                    return
            if self.live and now - phase.last_shown >= self.refresh:
                self._draw(_status(phase))
            elif not self.live and now - phase.last_shown >= self.heartbeat:
                fraction = phase.fraction()
                done = "" if fraction is None else f"{100 * fraction:.0f}% "
                self._line(phase, f"{phase.name}: {done}after {phase.elapsed():.0f} s")
            else:
                return
            phase.last_shown = now

    def end(self, phase: Phase, failed: bool) -> None:
        with self.lock:
            if phase in self.stack:
                self.stack.remove(phase)
            if not phase.shown:
                return
            if failed:  # keep what is on screen; the error follows on a line of its own
                if self.drawn:
                    self._write("\n")
                    self.drawn = False
            elif self.live:
                self._draw(_status(phase, final=True))
                self._write("\n")
                self.drawn = False
            else:
                self._line(phase, f"{phase.name}: done in {phase.elapsed():.1f} s")

    def _show_with_ancestors(self) -> None:
        """Mark the innermost phase shown, and the outer ones it runs in, in order: their
        plain start lines come outermost first."""
        for depth, phase in enumerate(self.stack):
            if not phase.shown:
                phase.shown, phase.depth = True, depth
                if not self.live:
                    self._line(phase, f"{phase.name} ...")
                    phase.last_shown = time.perf_counter()

    def _draw(self, text: str) -> None:
        width = shutil.get_terminal_size((80, 24)).columns - 1  # a wrapped line cannot be redrawn
        self._write(f"\r{text[:max(width, 20)]}\x1b[K")
        self.drawn = True

    def _line(self, phase: Phase, text: str) -> None:
        self._write(f"{PREFIX}{'  ' * phase.depth}{text}\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stderr must not stop the work it reports on
            pass


def _status(phase: Phase, final: bool = False) -> str:
    """A terminal line: name, bar and percentage when the total is known, seconds."""
    parts = [phase.name]
    fraction = phase.fraction()
    if fraction is not None:
        filled = int(round(BAR_WIDTH * fraction))
        parts.append(f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {100 * fraction:3.0f}%")
    parts.append(f"done in {phase.elapsed():.1f} s" if final else f"{phase.elapsed():.1f} s")
    return "  ".join(parts)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False

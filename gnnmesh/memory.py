"""This process's memory high-water mark."""

from __future__ import annotations

import resource
import sys


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (VmHWM), in bytes."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere

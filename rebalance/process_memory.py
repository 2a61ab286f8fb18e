"""A process's resident memory, as a soak reads it: the broker adds it to its liveness samples, a member host
writes a `process_memory` event every `SAMPLE_EVERY_S`; the summary fits the slope over a run's second half."""

from __future__ import annotations

import os
import resource

SAMPLE_EVERY_S = 10.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size now (/proc/self/statm; elsewhere the peak, which is what the platform offers)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

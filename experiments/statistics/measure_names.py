"""The names the pages give a measure, where its metric's name says less than it counts.

`records lost` (per phase, and `whole run: records lost`) counts the records handled more than the latency
limit (3 s, seed 002's) after they were produced *plus* the records never handled
(`experiments.summary.phases`: over_limit + never_processed), while the `lost-records` check means only the
records never handled. The pages name it `LATE_OR_LOST` wherever they print it: in claims, tables and
readings. The metric keeps its name in the data (runs.csv, the campaign files' claims and detect tables),
so the data and the claims declared before the runs stay what they were.
"""

from __future__ import annotations

from experiments.scenario.model import LATENCY_LIMIT_MS

RECORDS_LOST = "records lost"                                # the metric's name in the data
LATE = f"records over {LATENCY_LIMIT_MS / 1000:g} s"         # handled later than the latency limit
LATE_OR_LOST = f"{LATE} or never handled"                    # what the pages call it
# `stable after (s)` measures from a change to the last assignment a member took before the next change, which
# is not when the group was stable (a group that never settles still has a last assignment): the pages name it
# for what it is; `settled after (s)` is the time to a group whose partitions are each owned once.
STABLE_AFTER = "stable after (s)"
LAST_ASSIGNMENT = "last assignment after (s)"


def measure_name(metric: str) -> str:
    """The metric as the pages name it: `scale-to-50: records lost` is `scale-to-50: records over 3 s or
    never handled`; every other metric keeps its name."""
    for data, page in ((RECORDS_LOST, LATE_OR_LOST), (STABLE_AFTER, LAST_ASSIGNMENT)):
        if metric == data or metric.endswith(f": {data}"):
            return metric[: len(metric) - len(data)] + page
    return metric

"""The names the pages give a measure, where its metric's name says less than it counts.

`records lost` (per phase, and `whole run: records lost`) counts the records handled more than the latency
limit (3 s, seed 002's) after they were produced *plus* the records never handled
(`experiments.summary.phases`: over_limit + never_processed), while the `lost-records` check means only the
records never handled. The pages name it `LATE_OR_LOST` wherever they print it: in claims, tables and
readings. The metric keeps its name in the data (runs.csv, the campaign files' claims and detect tables),
so the data and the claims declared before the runs stay what they were.
"""

from __future__ import annotations

RECORDS_LOST = "records lost"                                # the metric's name in the data
LATE_OR_LOST = "records over 3 s or never handled"           # what the pages call it


def measure_name(metric: str) -> str:
    """The metric as the pages name it: `scale-to-50: records lost` is `scale-to-50: records over 3 s or
    never handled`; every other metric keeps its name."""
    if metric == RECORDS_LOST or metric.endswith(f": {RECORDS_LOST}"):
        return metric[: len(metric) - len(RECORDS_LOST)] + LATE_OR_LOST
    return metric

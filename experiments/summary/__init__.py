"""The Spark summary of runs: events in, verdicts and tables out.

`summarize` reads every run's RUN_DIR/events/*.jsonl in one pass, with a schema built from the event
vocabulary, into Spark tables tagged with each row's `run` (`event_tables`); derives what the checks need
(consumed and lost offset ranges in `offset_ranges`, ownership intervals and per-partition owner spans in
`ownership`); runs every check of `experiments.summary.check_queries.CHECKS`; computes per-phase aggregates
(`phases`), Kafka's rebalance metrics and the herd cost of each membership change (`herd`), all grouped
by run (`pipeline`); and writes each run's RUN_DIR/summary/ as Parquet files and run.json (`output`, `run_summary`);
the report stage adds summary.md. Small results travel as pandas frames; the heavy lifting (records, joins, windows) stays
in Spark, so `--master` can point at a cluster for big logs.
"""

from experiments.summary.event_tables import EVENT_SCHEMA, EventTables, read_events, read_runs
from experiments.summary.output import markdown_table, write_summary
from experiments.summary.pipeline import DEFAULT_CHECKS, summarize, summarize_run, summarize_runs
from experiments.summary.run_summary import RunSummary, SummaryFacts
from experiments.summary.session import start_spark

__all__ = [
    "DEFAULT_CHECKS", "EVENT_SCHEMA", "EventTables", "RunSummary", "SummaryFacts", "markdown_table", "read_events",
    "read_runs", "start_spark", "summarize", "summarize_run", "summarize_runs", "write_summary",
]

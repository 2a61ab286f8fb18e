"""Seed 002's measures: consumer lag over time (Kafka's records-lag-max), per phase with the article's names,
and the whole run's records over the limit as a campaign metric."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.summary.lag import phase_lag

pytestmark = pytest.mark.timeout(900)


def _lag(spark, produced: list[tuple], taken: list[tuple], run_end: float = 6.5) -> pd.DataFrame:
    """lag_per_second over one run of two partitions: produced (tp, last_offset, t), taken (tp, last_offset, t)."""
    from experiments.summary.lag import lag_per_second

    t0 = 10_000_000_000
    produced_frame = spark.createDataFrame([(0, tp, last, t0 + int(t * 1e9)) for tp, last, t in produced],
                                           "run int, tp string, last_offset long, ts_ns long")
    taken_frame = spark.createDataFrame([(0, tp, last, float(t)) for tp, last, t in taken],
                                        "run int, tp string, last_offset long, t double")
    partitions = spark.createDataFrame([(0, "t0-0"), (0, "t0-1")], "run int, tp string")
    runs = spark.createDataFrame([(0, t0, run_end)], "run int, t0_ns long, run_end double")
    return lag_per_second(produced_frame, taken_frame, partitions, runs).toPandas().sort_values("second").set_index(
        "second")


@pytest.mark.spark
def test_lag_is_log_end_minus_position_and_a_new_owner_starting_over_raises_it(spark):
    # t0-0: 10 records a second, offsets 0-9 in second 0, 10-19 in second 1, ...; taken at once until second 2,
    # then nothing (a stall) until second 5, when a new owner starts again from the committed offset 15.
    produced = [("t0-0", 10 * s + 9, s + 0.5) for s in range(6)] + [("t0-1", 4, 0.2)]
    taken = [("t0-0", 9, 0.6), ("t0-0", 19, 1.6), ("t0-0", 24, 2.2), ("t0-0", 19, 5.3), ("t0-1", 4, 0.3)]
    lag = _lag(spark, produced, taken)
    assert list(lag.index) == [0, 1, 2, 3, 4, 5, 6]            # every second of the run, stalls included
    assert list(lag["lag_max"]) == [0, 0, 5, 15, 25, 40, 40]   # 30 -> 25 -> 40 ... once the new owner starts over
    assert lag.loc[5, "lag_total"] == 40 and lag.loc[0, "lag_total"] == 0


@pytest.mark.spark
def test_a_partition_never_taken_lags_by_all_it_holds(spark):
    lag = _lag(spark, [("t0-0", 9, 0.5), ("t0-1", 29, 1.5)], [("t0-0", 9, 0.9)], run_end=2.0)
    assert list(lag["lag_max"]) == [0, 30, 30] and list(lag["lag_total"]) == [0, 30, 30]


def test_a_phase_lag_is_the_largest_of_its_seconds():
    lag = pd.DataFrame({"second": [0, 1, 2, 3, 4], "lag_max": [7, 1, 9, 3, 2], "lag_total": 0})
    assert phase_lag(lag, 1.0, 3.0, first=False, last=False) == 9
    assert phase_lag(lag, 3.0, 4.0, first=False, last=False) == 3
    assert phase_lag(lag, 3.0, 4.0, first=False, last=True) == 3       # the last phase runs to the end
    assert phase_lag(lag, 0.5, 1.0, first=True, last=False) == 7       # the first from the run's start
    assert phase_lag(None, 0.0, 1.0, first=True, last=True) is None


@pytest.mark.spark
def test_the_phase_table_gives_each_phase_its_largest_lag(synthetic_runs):
    clean = synthetic_runs["clean"].tables
    planted = synthetic_runs["planted"].tables
    assert {"second", "lag_max", "lag_total"} <= set(clean["lag"].columns)
    assert (clean["phases"]["max_lag"] >= 0).all()
    # the planted run stalls one partition past the latency limit in its last phase: the lag shows it
    stalled = planted["phases"].set_index("phase").loc["crash-one", "max_lag"]
    assert stalled > clean["phases"].set_index("phase").loc["crash-one", "max_lag"]
    assert planted["lag"]["lag_max"].max() == planted["phases"]["max_lag"].max()


@pytest.mark.spark
def test_with_a_service_time_throughput_counts_a_record_when_its_handling_ended(spark):
    """A poll at 2.0 s returns 4 records that are handled one a second: the chart shows 1 a second over
    2-5 s (the backlog draining), not 4 at 2 s; a run without records_processed keeps the poll's time."""
    from experiments.summary.check_queries import CheckConfig
    from experiments.summary.phases import throughput

    t0_ms = 1_000_000
    consumed = spark.createDataFrame([(0, "t0-0", 2.0, 4), (1, "t0-0", 2.0, 4)],
                                     "run int, tp string, t double, count long")
    handled = spark.createDataFrame([(0, 5.5, t0_ms + 5500, [t0_ms + 2500, t0_ms + 3500, t0_ms + 4500, t0_ms + 5500])],
                                    "run int, t double, ts_ms long, done_list array<long>")
    empty = spark.createDataFrame([], "run int, t_produce double")
    never = spark.createDataFrame([], "run int, t_produce double, unseen boolean")
    deliveries = spark.createDataFrame([], "run int, t double, latency_ms double")
    table = throughput(empty, consumed, never, deliveries, CheckConfig(), handled).toPandas()
    per_second = {(row.run, row.second): row.processed for row in table.itertuples() if row.processed}
    assert per_second == {(0, 2): 1, (0, 3): 1, (0, 4): 1, (0, 5): 1, (1, 2): 4}


@pytest.mark.spark
def test_the_run_report_names_the_article_measures_and_draws_the_lag(synthetic_runs, tmp_path):
    from experiments.report.run_report import write_report
    from experiments.report.run_tables import strategy_table
    from experiments.summary.read_back import load_run

    run = synthetic_runs["planted"].folder.path
    report = write_report([run], tmp_path / "pages")
    assert "lag.png" in {image.name for image in report.images}
    table = strategy_table([load_run(run)])
    assert {"records over 3 s or never handled", "max end-to-end latency, ms", "time rebalancing, ms",
            "max consumer lag, records"} <= set(table["measure"])
    lost = table[(table["phase"] == "crash-one") & (table["measure"] == "records over 3 s or never handled")].iloc[0, 2]
    assert int(str(lost).replace(",", "")) > 0


def test_a_rebalance_that_began_at_a_phase_mark_belongs_to_that_phase_though_float_puts_it_a_hair_before():
    from experiments.summary.phases import phase_table

    mark, end, duration_ms = 19.568, 20.762579, 1194.579   # began at the mark; in floating point a hair before it
    assert end - duration_ms / 1000 < mark
    episodes = pd.DataFrame({"start": [end - duration_ms / 1000], "end": [end]})
    table = phase_table(pd.DataFrame(), episodes, [], [("steady-50", 0.0, mark), ("scale-to-100", mark, 55.0)])
    assert table["rebalances"].tolist() == [0, 1]
    assert table["rebalance_ms"].tolist() == [0.0, pytest.approx(1194.579)]

"""Pure helpers of the many-tables benchmark (bench/many.py, bench/support/measure.py): no Kafka, no Spark, no timing."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from bench.many import (
    Load,
    cycle_breakdown,
    fresh_summary,
    freshness,
    multiplied,
    quantile,
    record,
    steady_window,
    tick_plan,
    triggers,
    window_figures,
)
from bench.support.measure import COMMIT_LINE, commit_detail

LINE = ("2026-11-26 06:00:56,123 INFO icebergsync.job commit sink=bench/many version=1 table=lake.hot00 "
        "snapshot=123 records=40 dead_letters=0 files=1 bytes=999 commit_ms=12 frontier={\"bench.hot00\": {\"0\": 80}}")


def test_commit_line_gives_records_table_and_frontier() -> None:
    match = COMMIT_LINE.search(LINE)
    assert match is not None and match.group(1) == "40"
    assert commit_detail(LINE) == {"table": "lake.hot00", "frontier": {"bench.hot00": {"0": 80}}}
    assert commit_detail("INFO something else") == {}


def test_load_names_200_topics_by_kind_and_the_hot_ones_carry_most() -> None:
    load = Load()
    kinds = load.topics()
    assert len(kinds) == 200
    assert sum(1 for k in kinds.values() if k == "hot") == 5
    assert kinds["bench.hot00"] == "hot" and kinds["bench.idle99"] == "idle" and kinds["bench.warm44"] == "warm"
    rate = load.expected_rate()
    assert rate == {"hot": 400.0, "warm": 90.0, "rare": 50 / 120, "idle": 0.0}
    assert 0.75 < rate["hot"] / sum(rate.values()) < 0.85


def test_tick_plan_is_seeded_carries_fractions_and_never_touches_idle_topics() -> None:
    load = Load(hot_rate=3.0)  # 1.5 records a 0.5 s tick: 1, 2, 1, 2, …
    carry: dict[str, float] = {}
    rng = random.Random(1)
    plans = [tick_plan(load, rng, 0.5, carry) for _ in range(400)]
    assert [p["bench.hot00"] for p in plans[:4]] == [1, 2, 1, 2]
    assert sum(p["bench.hot03"] for p in plans) == 600
    assert not any(topic.startswith("bench.idle") for p in plans for topic in p)
    warm = [n for p in plans for t, n in p.items() if t.startswith("bench.warm")]
    assert set(warm) == {load.warm_batch}
    # 400 ticks of 0.5 s, 45 topics firing with probability 0.5/30: about 300 batches
    assert 200 < len(warm) < 400
    assert tick_plan(load, random.Random(1), 0.5, {}) == plans[0]  # the same seed, the same load


def test_record_is_json_with_a_millisecond_utc_stamp() -> None:
    value = json.loads(record(7, 1_700_000_000.1234, "warm"))
    assert value == {"id": 7, "produced_at": "2023-11-14T22:13:20.123Z", "kind": "warm", "amount": 2.59,
                     "note": "warm change 7"}


def test_quantile_nearest_rank() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile(list(map(float, range(101))), 0.95) == 95.0
    assert quantile([5.0], 0.95) == 5.0


def lines() -> list[dict[str, Any]]:
    return [
        {"t": 10.0, "records": 2, "table": "lake.a", "frontier": {"t.a": {"0": 2}}},
        {"t": 10.1, "records": 1, "table": "lake.b", "frontier": {"t.b": {"0": 1}}},
        {"t": 20.0, "records": 3, "table": "lake.a", "frontier": {"t.a": {"0": 5}}},
        {"t": 30.0, "records": 1, "table": "lake.b", "frontier": {"t.b": {"0": 2}}},
    ]


def test_freshness_takes_each_commits_offsets_from_the_previous_frontier() -> None:
    stamps = {"t.a": {0: 1000.0, 1: 1001.0, 2: 1015.0, 3: 1016.0, 4: 1017.0}, "t.b": {0: 1009.0, 1: 1025.0}}
    # start_epoch 1000: commit times 1010, 1010.1, 1020, 1030
    everything = freshness(lines(), 1000.0, stamps, {"t.a": 0, "t.b": 0}, (0, 100))
    assert everything == {"t.a": [10.0, 9.0, 5.0, 4.0, 3.0], "t.b": [pytest.approx(1.1), 5.0]}
    # Without starts the first commit of each topic is not counted; the window drops the early ones.
    assert freshness(lines(), 1000.0, stamps, None, (0, 100)) == {"t.a": [5.0, 4.0, 3.0], "t.b": [5.0]}
    assert freshness(lines(), 1000.0, stamps, {"t.a": 0, "t.b": 0}, (15, 25)) == {"t.a": [5.0, 4.0, 3.0]}


def test_triggers_group_lines_logged_together_and_the_window_starts_after_the_first_data_commit() -> None:
    assert triggers(lines()) == [{"t": 10.0, "tables": 2, "records": 3}, {"t": 20.0, "tables": 1, "records": 3},
                                 {"t": 30.0, "tables": 1, "records": 1}]
    assert steady_window(lines(), 60.0, 5.0, 99.0) == (15.0, 60.0)
    assert steady_window([], 60.0, 5.0, 20.0) == (20.0, 60.0)
    assert steady_window([], 10.0, 5.0, 20.0) == (20.0, 20.0)


def test_window_figures_count_inside_the_window_only() -> None:
    measured = {"cpu_timeline": [(0.0, 0.0), (60.0, 30.0), (120.0, 90.0)], "rss_timeline": [(5.0, 100), (50.0, 300), (90.0, 200)],
                "commit_lines": lines(), "peak_rss": 400}
    figures = window_figures(measured, (15.0, 75.0))
    assert figures["cpu_s"] == 37.5  # 7.5 at 15 s → 45 at 75 s, interpolated
    assert figures["cpu_per_min"] == 37.5
    assert figures["rows"] == 4 and figures["commits"] == 2 and figures["cpu_ms_per_row"] == 37_500 / 4
    assert figures["rss_median"] == 300 and figures["peak_rss"] == 400
    assert figures["commits_per_min_by_table"] == {"lake.a": 1.0, "lake.b": 1.0}
    assert figures["triggers"] == 2 and figures["trigger_period_median"] == 10.0 and figures["tables_per_trigger_median"] == 1


def test_fresh_summary_per_topic_then_across_topics() -> None:
    summary = fresh_summary({"t.a": [1.0, 2.0, 3.0], "t.b": [10.0]}, {"t.a": "hot", "t.b": "warm"})
    assert summary["per_topic"]["t.a"] == {"n": 3, "p50": 2.0, "p95": 3.0, "max": 3.0}
    assert summary["hot"]["topics"] == 1 and summary["warm"]["records_p50"] == 10.0
    assert summary["all"]["records"] == 4 and summary["all"]["topic_p50_median"] in (2.0, 10.0)


def test_multiplied_is_200_idle_syncs_plus_the_rows_at_the_hot_syncs_marginal_cost() -> None:
    idle = {"cpu_per_min": 0.5, "rss_median": 1000}
    hot = {"cpu_per_min": 10.5, "rows_per_min": 5000}
    out = multiplied(idle, hot, rows_per_min=20_000)
    assert out["rss"] == 200_000
    assert out["idle_cpu_per_min"] == 100.0
    assert out["marginal_cpu_ms_per_row"] == 2.0
    assert out["cpu_per_min"] == 140.0
    assert out["cpu_ms_per_row"] == 7.0


def test_cycle_breakdown_splits_a_trigger_into_staging_cut_and_upkeep() -> None:
    def commit(at: str, table: str, ms: int) -> str:
        return (f"2026-11-26 06:00:{at} INFO icebergsync.job commit sink=b/m version=1 table={table} snapshot=1 "
                f"records=1 dead_letters=0 files=1 bytes=1 commit_ms={ms} frontier={{}}")

    upkeep = "2026-11-26 06:00:{} INFO icebergsync.maintenance maintenance sink=b/m version=1 snapshot=2 rewrote …".format
    log = [
        "2026-11-26 06:00:00,000 INFO icebergsync starting",
        commit("10,000", "lake.a", 500), commit("10,001", "lake.b", 500),
        upkeep("11,000"), upkeep("16,000"),  # upkeep ends 6 s after the cut: later than the 5 s interval
        commit("20,000", "lake.a", 1000), commit("20,002", "lake.b", 1000), commit("20,003", "lake.c", 1000),
        "a line Spark wrote without a time",
        commit("30,000", "lake.a", 0),
    ]
    out = cycle_breakdown(log, 5.0, skip=0)
    assert out is not None
    assert out["triggers"] == 2
    # trigger 2: due at 16 (upkeep end), its cut started at 19: 3 s staging for 3 tables; trigger 3: due at 25
    # (20 + 5, no upkeep), cut at 30: 5 s for 1 table
    assert out["stage_s"] == pytest.approx(4.0)
    assert out["stage_s_per_table"] == pytest.approx(3.0)
    assert out["tables"] == 2 and out["upkeep_runs"] == 1 and out["period_s"] == pytest.approx(10.0, abs=0.01)
    assert out["cut_s"] == 0.5
    assert cycle_breakdown(log, 5.0, skip=3) is None

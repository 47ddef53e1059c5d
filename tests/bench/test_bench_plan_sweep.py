"""``primus bench plan --sweep`` on a small grid: every point's figures, their round trips as the
store dictates, and the Iceberg table of the largest point planned from its manifests."""

from __future__ import annotations

import pytest

from airflow_provider_primus.bench.plan_sweep import sweep

pytest.importorskip("pyiceberg")


def test_the_sweep_reports_each_point_and_the_iceberg_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = sweep(files=3, delay_ms=1.0, days=(1, 2), sources=(1, 2), workdir=tmp_path)
    points = {(p["days"], p["sources"]): p for p in result["sweep"]}
    assert set(points) == {(1, 1), (1, 2), (2, 1), (2, 2)}
    for (days, sources), point in points.items():
        assert set(point) == {
            "days",
            "sources",
            "files",
            "plan_s",
            "floor_s",
            "round_trips",
            "peak_rss_mb",
            "tasks_per_s",
            "cpu_s",
            "cpu_floor_s",
        }
        partitions = days * sources * 24
        assert point["files"] == 3 * partitions
        assert point["round_trips"] == partitions + point["files"]  # a listing per hour, a footer per file
        assert 0 < point["floor_s"] <= point["plan_s"] and point["peak_rss_mb"] > 0
        assert 0 < point["cpu_floor_s"] <= point["cpu_s"]
    iceberg = result["iceberg"]
    assert iceberg["files"] == points[(2, 2)]["files"]
    # The metadata file, the manifest list and one manifest per commit (a source's day): no listing.
    assert iceberg["round_trips"] == 2 + 2 * 2
    assert iceberg["listing_plan_s"] == points[(2, 2)]["plan_s"]
    assert iceberg["speedup"] == round(iceberg["listing_plan_s"] / iceberg["plan_s"], 1)

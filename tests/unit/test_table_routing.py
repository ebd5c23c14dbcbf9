"""Routing streams to tables and splitting the frontier per table (icebergsync/table_routing.py)."""

from __future__ import annotations

import re

import pytest

from icebergsync.table_routing import (
    identifier_part,
    resume_frontier,
    table_for,
    table_frontier,
)

DEBEZIUM = re.compile(r"shop\.(\w+)\.(\w+)")


def test_the_topic_names_its_table_as_an_identifier() -> None:
    assert table_for("db.{topic}", "orders") == "db.orders"
    assert table_for("db.{topic}", "shop.public.order-lines") == "db.shop_public_order_lines"
    assert table_for("db.t{topic}", "2024") == "db.t_2024"
    assert identifier_part("9lives") == "_9lives"


def test_the_groups_of_a_pattern_name_the_table() -> None:
    assert table_for("{1}.{2}", "shop.public.orders", DEBEZIUM) == "public.orders"
    assert table_for("lake.{2}", "shop.sales.order-lines", re.compile(r"shop\.(\w+)\.([\w-]+)")) == "lake.order_lines"


@pytest.mark.parametrize(("template", "stream", "message"), [
    ("{1}.{3}", "shop.public.orders", "no such group"),
    ("db.{1}", "elsewhere", "does not match"),
])
def test_a_stream_the_template_cannot_name_is_refused(template: str, stream: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        table_for(template, stream, DEBEZIUM)


def test_a_group_is_not_named_without_a_pattern() -> None:
    with pytest.raises(ValueError, match="no such group"):
        table_for("db.{1}", "orders")


def test_several_streams_may_go_to_one_table() -> None:
    pattern = re.compile(r"\w+\.(\w+)")
    routed = {stream: table_for("db.{1}", stream, pattern) for stream in ["eu.orders", "us.orders", "eu.lines"]}
    assert routed == {"eu.orders": "db.orders", "us.orders": "db.orders", "eu.lines": "db.lines"}


def test_a_table_carries_the_entries_of_its_own_streams() -> None:
    frontier = {"eu.orders": {"0": 5}, "us.orders": {"0": 7, "1": 2}, "eu.lines": {"0": 40}}
    orders = {"eu.orders", "us.orders"}.__contains__
    assert table_frontier(frontier, orders) == {"eu.orders": {"0": 5}, "us.orders": {"0": 7, "1": 2}}
    assert table_frontier(frontier, {"eu.payments"}.__contains__) == {}


def test_the_sync_resumes_each_stream_from_its_table_or_the_start() -> None:
    routed = {"orders": "db.orders", "lines": "db.lines", "refunds": "db.refunds", "notes": "db.orders"}
    progress = {
        "db.orders": {"orders": {"0": 9}, "moved": {"0": 3}},  # "moved" is routed elsewhere now: not taken
        "db.lines": {"lines": {"0": 30}},
        "db.refunds": None,  # no progress of the sink yet
    }
    initial = {"orders": {"0": 1}, "refunds": {"0": 4}, "notes": {"0": 2}, "moved": {"0": 0}}
    assert resume_frontier(routed, progress, initial) == {
        "orders": {"0": 9}, "lines": {"0": 30}, "refunds": {"0": 4}, "notes": {"0": 2},
    }

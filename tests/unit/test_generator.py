"""The generator's rows: each id's content is fixed (a restarted or upgraded job replays the same rows)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa

from spark_app.sources.generator import generate_arrow

# Rows as the generator made them when it was written: any change here changes tables being synced.
GOLDEN = {
    0: {"id": 0, "ts": datetime(2025, 1, 1, tzinfo=UTC), "vendor": "CMT", "pickup_zone": 97, "dropoff_zone": 6,
        "passenger_count": 5, "trip_distance": 33.19, "fare_amount": Decimal("94.27"), "tip_amount": 12.26,
        "total_amount": 107.03, "payment_type": "no_charge", "rate_code": 6, "store_and_forward": False,
        "pickup_date": date(2025, 1, 1), "notes": "trip 0 via airport zone 97"},
    7: {"id": 7, "ts": datetime(2025, 1, 1, 0, 0, 0, 70000, tzinfo=UTC), "vendor": "CURB", "pickup_zone": 240,
        "dropoff_zone": 225, "passenger_count": 3, "trip_distance": 19.22, "fare_amount": Decimal("55.86"),
        "tip_amount": 11.73, "total_amount": 68.09, "payment_type": "voided", "rate_code": 6,
        "store_and_forward": False, "pickup_date": date(2025, 1, 1), "notes": None},
    99_999: {"id": 99_999, "ts": datetime(2025, 1, 1, 0, 16, 39, 990000, tzinfo=UTC), "vendor": "CURB",
             "pickup_zone": 246, "dropoff_zone": 32, "passenger_count": 3, "trip_distance": 23.5,
             "fare_amount": Decimal("67.63"), "tip_amount": 0.0, "total_amount": 68.13, "payment_type": "cash",
             "rate_code": 5, "store_and_forward": False, "pickup_date": date(2025, 1, 1),
             "notes": "trip 99999 via late night zone 246"},
}


def test_each_id_has_the_content_it_always_had() -> None:
    for row_id, expected in GOLDEN.items():
        assert generate_arrow(row_id, row_id + 1).to_pylist() == [expected]
    batch = generate_arrow(0, 100_000).to_pylist()
    assert [batch[row_id] for row_id in GOLDEN] == list(GOLDEN.values())


def test_a_range_is_the_same_rows_however_it_is_split() -> None:
    whole = generate_arrow(9_990, 10_020)  # ids cross a power of ten: note texts change length
    pieces = pa.concat_tables([generate_arrow(start, min(start + 7, 10_020)) for start in range(9_990, 10_020, 7)])
    assert whole.equals(pieces)
    notes = generate_arrow(0, 100_000).column("notes")
    assert 0.24 < notes.null_count / len(notes) < 0.26

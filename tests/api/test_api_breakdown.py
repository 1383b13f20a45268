"""``/api/v1/breakdown`` and the Latency page's stage breakdown never add up past 100 %,
over records written to SQLite and PostgreSQL (raw rows and rollups alike)."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

import numpy as np
import pytest

from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.doubles import NOW
from tests.factories import make_records


@pytest.fixture
def overlapping(store):
    """Records whose reported stages add up to 140 % of their end-to-end time, half of them
    behind a gateway."""
    rows = make_records(
        np.random.default_rng(5), NOW - timedelta(hours=3), 600, span=timedelta(hours=3)
    )
    out = []
    for i, r in enumerate(rows):
        e2e = 1.0
        out.append(
            dataclasses.replace(
                r,
                ttft_s=0.5,
                tpot_s=None,
                e2e_s=e2e,
                preprocess_s=0.4,
                queue_s=0.3,
                prefill_s=0.2,
                decode_s=0.5,
                postprocess_s=None,
                gateway_s=0.1 if i % 2 else None,
            )
        )
    open_writer(store.engine).write_requests(out)
    return out


def test_breakdown_shares_add_up_to_at_most_one_when_the_stages_overlap(api: Api, overlapping):
    start = (NOW - timedelta(hours=3)).isoformat().replace("+00:00", "Z")
    body = api.get("/api/v1/breakdown", params={"start": start, "end": str(NOW.timestamp())})
    assert body.status_code == 200, body.text
    [group] = body.json()["groups"]
    stages = {s["stage"]: s for s in group["stages"]}
    n = len(overlapping)
    assert group["requests"] == n
    assert group["scaled_by"] == pytest.approx(1.0 / 1.4)
    assert stages["queue"]["seconds_total"] == pytest.approx(0.3 * n)  # as reported
    whole = n * 1.0 + 0.1 * (n // 2)
    assert stages["gateway"]["share"] == pytest.approx(0.1 * (n // 2) / whole)
    assert stages["preprocess"]["share"] == pytest.approx(0.4 / 1.4 * n / whole)
    total = sum(s["share"] or 0.0 for s in group["stages"])
    assert total == pytest.approx(1.0)
    assert total <= 1.0 + 1e-9
    assert group["unaccounted_share"] == pytest.approx(0.0, abs=1e-9)


def test_the_latency_pages_stage_bars_fill_at_most_the_whole_bar(api: Api, overlapping):
    page = api.get("/ui/latency", params={"range": "6h"})
    assert page.status_code == 200, page.text
    section = page.text.split('id="breakdown"', 1)[1].split("</section>", 1)[0]
    rows = section.split('class="hbar-row"')[1:]
    assert len(rows) == 2  # one bar per model
    for row in rows:
        widths = [float(w) for w in re.findall(r"width:([0-9.]+)%", row)]
        assert sum(widths) == pytest.approx(100.0, abs=0.05)
    assert "scaled down together" in section

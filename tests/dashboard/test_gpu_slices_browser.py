"""The Cost page's *By instance* rows of instances on fractional GPUs (issue 34), in Debian's
Chromium: two 3g.40gb MIG slices of one A100 80GB and two time-sliced shares of one H100, next to
a whole H100; each row says what slice it runs on and costs its fraction of the GPU."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.cost import CostModel, GpuPrice
from infersight.core.samples import GpuSample
from infersight.storage import cost as cost_store
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.writer import open_writer
from tests.dashboard.conftest import Live, Page, screenshot
from tests.peers import serving_app

pytestmark = [pytest.mark.e2e]
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
MODEL = CostModel(
    name="slices",
    currency="USD",
    gpu_prices={"A100": GpuPrice(Decimal("3.50")), "H100": GpuPrice(Decimal("2.80"))},
)
#: instance → (name, slice, parent, GPU instance id)
FLEET = {
    "mig-a": (f"{A100} MIG 3g.40gb", "mig:3g.40gb:3/7", "GPU-a100", 1),
    "mig-b": (f"{A100} MIG 3g.40gb", "mig:3g.40gb:3/7", "GPU-a100", 2),
    "ts-a": (H100, "share:1/4", "GPU-h100-shared", None),
    "ts-b": (H100, "share:3/4", "GPU-h100-shared", None),
    "whole": (H100, "", "", None),
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    path: Path = tmp_path_factory.mktemp("slice-pages") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    start = NOW - timedelta(hours=2)
    samples = [
        GpuSample(
            ts=start + timedelta(minutes=m),
            instance=instance,
            gpu_index=0,
            name=name,
            util_gpu=0.5,
            gpu_slice=part,
            parent_uuid=parent,
            gpu_instance_id=gi,
        )
        for instance, (name, part, parent, gi) in FLEET.items()
        for m in range(121)
    ]
    open_writer(engine).write_gpu_samples(samples)
    cost_store.put_model(engine, MODEL, NOW)
    settings = ApiSettings(run_jobs=False, cost_model=MODEL.name)
    with serving_app(create_app(settings, engine, lambda: NOW)) as url:
        yield Live(url)
    engine.dispose()


def test_the_cost_page_says_which_instances_run_on_a_slice(live, page: Page) -> None:
    response = page.goto(f"{live.url}/ui/cost?range=24h")
    assert response.status == 200
    table = page.tab.locator("table.cost-instances")

    def row(instance: str) -> str:
        return str(table.locator(f'tr[data-instance="{instance}"]').inner_text())

    # 2 h of an A100 at 3.50 is 7.00: a 3g.40gb slice holds 3/7 of it
    assert "on a slice: MIG 3g.40gb (3/7 of the GPU)" in row("mig-a")
    assert "3.00 USD" in row("mig-a")
    assert "0.86" in row("mig-a")  # GPU-hours: 3/7 of 2
    # 2 h of an H100 at 2.80 is 5.60: shares of 1/4 and 3/4
    assert "on a slice: time-sliced share (1/4 of the GPU)" in row("ts-a")
    assert "1.40 USD" in row("ts-a")
    assert "4.20 USD" in row("ts-b")
    assert "on a slice" not in row("whole")
    assert "5.60 USD" in row("whole")
    # the purchasing advice counts a slice as its fraction of a GPU of its parent's model
    advice = page.tab.locator("body").inner_text()
    assert "of the 5.7 GPU-hours in use" in advice
    assert "reserve 3 GPUs" in advice
    assert "MIG 3g.40gb\t3.50" not in advice
    assert page.problems == []
    page.tab.locator("table.cost-instances").scroll_into_view_if_needed()
    screenshot(page, "cost-gpu-slices")
    folder = Path("/tmp/shots/mig")
    if folder.exists():
        table.screenshot(path=str(folder / "cost-by-instance-slices.png"))

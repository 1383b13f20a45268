"""``infersight demo`` end to end: a real process, the embedded SQLite store, a readable report."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import func, select

from storage.engine import create_store_engine
from storage.tables import gpu_samples, requests


@pytest.mark.slow
def test_the_demo_plays_a_scenario_into_sqlite_and_reports_what_it_saw(tmp_path):
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    done = subprocess.run(
        [sys.executable, "-c", "from infersight.cli import main; main()", "--store", store,
         "demo", "--duration", "50m"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Latency per model" in out
    assert "meta-llama/Llama-3.1-8B-Instruct" in out
    assert "Where end-to-end time goes" in out
    # The first fault of the mixed incident (thermal throttling from 30 m) is inside 50 minutes;
    # the later ones are not and must not be reported.
    assert "thermal_throttle" in out
    assert "kv_pressure" not in out
    assert "stored" in done.stderr
    engine = create_store_engine(store)
    with engine.connect() as c:
        stored = c.execute(select(func.count()).select_from(requests)).scalar_one()
        gpus = c.execute(select(func.count()).select_from(gpu_samples)).scalar_one()
    engine.dispose()
    assert stored > 10_000
    assert gpus > 0


def test_a_bad_duration_is_refused_with_a_clear_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", "from infersight.cli import main; main()", "--store",
         f"sqlite:///{tmp_path / 'x.db'}", "demo", "--duration", "soon"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "not a duration" in done.stderr

"""End to end: a simulated serving process with a REAL host-side limit, profiled by the real
sidecar with py-spy, names that limit — one test per limit and per path the request takes.

* tokenizer: an incident blames the instance's host (``host_bound``); the service's trigger
  asks for a profile, the sidecar (writing to the store) takes it, and the incident's diagnosis
  becomes "… % of samples in the tokenizer";
* logging: ``infersight profile host-0 --seconds 3`` from the command line;
* GIL: ``POST /api/v1/profiles`` on a real ``infersight serve``, the sidecar shipping through
  central ingest (``--ship-to``, an ingest token) and claiming through it.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from infersight.core.burn import AlertState, Severity, Transition
from infersight.service.profiles import ProfileTrigger
from infersight.storage import incidents, migrate, signals
from infersight.storage import profiles as profile_store
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from tests.api.live import ADMIN_TOKEN, READ_TOKEN, serve
from tests.profiles.support import CLI, busy, sidecar, simulator
from tests.waiting import until

INGEST_TOKEN = "ingest-token-0123456789"


def test_a_tokenizer_bound_incident_is_profiled_and_named(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    now = datetime.now(UTC)
    with engine.begin() as connection:
        opened = incidents.apply_step(
            connection, "ttft", "model=m", AlertState(Severity.PAGE, now), Transition.OPENED,
            {"5m": 20.0}, now,
        )  # fmt: skip
    assert opened is not None
    headline = {"cause": "host_bound", "instance": "host-0", "confidence": 0.7, "evidence": []}
    signals.save_diagnosis(engine, opened.id, {"slo": "ttft"}, headline, now)
    trigger = ProfileTrigger(SqlStore(engine), seconds=3, rate=50)
    with (
        simulator("tokenizer", tmp_path) as (process, base),
        busy(base),
        sidecar(process.pid, tmp_path, ["--store", url]),
    ):
        assert trigger(datetime.now(UTC)) == 1

        def finished() -> Any:
            (profile,) = profile_store.list_profiles(engine, incident_id=opened.id)
            return None if profile.open else profile

        profile = until(finished, "the incident's profile")
    assert profile.error == ""
    assert profile.result is not None
    assert profile.result["shares"]["tokenizer"] > 0.5, profile.result
    assert trigger(datetime.now(UTC)) == 1
    diagnosis = signals.notes(engine, [opened.id])[opened.id].diagnosis
    assert diagnosis is not None
    assert diagnosis["cause"] == "host_bound"
    assert diagnosis["detail"] == "tokenizer"
    assert diagnosis["profile"]["sentence"].endswith("% of samples in the tokenizer")
    assert any(e["signal"] == "profile:tokenizer" for e in diagnosis["evidence"])
    assert profile.result["modules"][0]["frame"] == "infersight.simulator.tokenizer"
    engine.dispose()


def test_synchronous_logging_is_named_by_the_cli_profile(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with (
        simulator("logging", tmp_path) as (process, base),
        busy(base),
        sidecar(process.pid, tmp_path, ["--store", url]),
    ):
        done = subprocess.run(
            [*CLI, "profile", "host-0", "--seconds", "3", "--store", url],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "waiting for the sidecar of host-0" in done.stderr or "sampling" in done.stderr
    assert "sampling" in done.stderr
    shares = {
        line.split()[0]: float(line.split()[1])
        for line in done.stdout.splitlines()
        if line.startswith("  ") and line.split()[0] in ("gil", "lock", "logging", "tokenizer")
    }
    assert max(shares, key=shares.__getitem__) == "logging", done.stdout
    assert shares["logging"] > 50
    engine = create_store_engine(url)
    (profile,) = profile_store.list_profiles(engine, instance="host-0")
    engine.dispose()
    assert profile.result is not None
    assert profile.result["shares"]["logging"] > 0.5


def test_gil_contention_is_named_through_the_api_and_central_ingest(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    tokens = f"read:{READ_TOKEN},admin:{ADMIN_TOKEN},ingest:{INGEST_TOKEN}"
    token_file = tmp_path / "ingest.token"
    token_file.write_text(INGEST_TOKEN + "\n")
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    read = {"authorization": f"Bearer {READ_TOKEN}"}
    with serve(url, tmp_path, INFERSIGHT_API_TOKENS=tokens) as api:
        ship = ["--ship-to", api.url, "--ship-token-file", str(token_file)]
        with (
            simulator("gil", tmp_path) as (process, base),
            busy(base),
            sidecar(process.pid, tmp_path, ship),
        ):
            body = {"instance": "host-0", "seconds": 3, "rate": 50, "by": "test"}
            refused = httpx.post(f"{api.url}/api/v1/profiles", json=body, headers=read)
            assert refused.status_code == 403  # asking for a profile is an admin's action
            asked = httpx.post(f"{api.url}/api/v1/profiles", json=body, headers=admin)
            assert asked.status_code == 202, asked.text
            profile_id = asked.json()["id"]
            again = httpx.post(f"{api.url}/api/v1/profiles", json=body, headers=admin)
            assert again.status_code == 409

            def finished() -> Any:
                got = httpx.get(f"{api.url}/api/v1/profiles/{profile_id}", headers=read).json()
                return got if got["state"] in ("done", "failed") else None

            profile = until(finished, "the profile through the API")
    assert profile["error"] is None, profile
    shares = profile["result"]["shares"]
    assert max(shares, key=shares.__getitem__) == "gil", json.dumps(shares)
    assert shares["gil"] > 0.3
    assert profile["requested_by"] == "test"

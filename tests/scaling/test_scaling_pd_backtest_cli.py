"""``infersight scaling backtest --scenario quiet-pd`` (#30): every per-pool policy is shown —
static, the reactive-only GPU-utilisation and KEDA queue baselines, and infersight's — and the
output says which part of the day it replayed (the discrete-event simulator serves every
request, so the default is the afternoon's quiet spell and rebound, not the whole day)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from infersight.cli.commands_scaling import scaling

ROOT = Path(__file__).resolve().parents[2]
INFERSIGHT = str(Path(sys.executable).with_name("infersight"))
#: Ten minutes of the rebound: short enough for a test, long enough to scale.
WINDOW = ["--window", "14:00-14:10", "--cold-start", "60"]


def test_the_table_shows_every_pools_reactive_baselines_and_its_scope() -> None:
    done = subprocess.run(
        [INFERSIGHT, "scaling", "backtest", "--scenario", "quiet-pd",
         *WINDOW, "--quiet"],
        capture_output=True, text=True, cwd=ROOT, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    table = out.split("-----\n", 1)[1].splitlines()
    rows = [line for line in table if line and not line.startswith(" ")]
    assert [row.split()[0] for row in rows] == ["static", "reactive", "reactive", "infersight"]
    assert "GPU" in rows[1], out
    assert "queue" in rows[2], out
    assert out.count("  prefill pool") == 4
    assert out.count("  decode pool") == 4
    scope = next(line for line in out.splitlines() if line.startswith("scope:"))
    assert scope.startswith("scope: 14:00–14:10 of the synthetic day, not all of it: ")
    assert "--window 00:00-24:00 replays the whole day" in scope


def test_json_names_the_scope_and_runs_only_the_policies_asked() -> None:
    result = CliRunner().invoke(
        scaling,
        ["backtest", "--scenario", "quiet-pd", *WINDOW, "--policies", "static,reactive-queue",
         "--format", "json", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    names = [r["policy"] for r in data["results"]]
    assert len(names) == 2
    assert names[0].startswith("static")
    assert "queue" in names[1].lower()
    scope = data["scope"]
    assert (scope["start_s"], scope["end_s"], scope["whole_day"]) == (50_400.0, 51_000.0, False)
    assert 0 < scope["requests"] < scope["day_requests"]


def test_unknown_policies_are_refused() -> None:
    result = CliRunner().invoke(
        scaling, ["backtest", "--scenario", "quiet-pd", *WINDOW, "--policies", "magic"]
    )
    assert result.exit_code == 2
    assert "unknown policies ['magic']" in result.output
    plain = CliRunner().invoke(scaling, ["backtest", "--policies", "static"])
    assert plain.exit_code == 2
    assert "--policies goes with a P/D --scenario" in plain.output

"""``infersight scaling apply|list|show`` over a SQLite store."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from click.testing import CliRunner

from infersight.cli.commands_scaling_admin import scaling
from infersight.cli.settings import Settings
from infersight.core.scaling import Recommendation
from infersight.storage import migrate
from infersight.storage import scaling as scaling_store
from infersight.storage.engine import create_store_engine

POLICIES = """apiVersion: infersight/v1
kind: ScalingPolicy
metadata: {name: chat}
spec: {model: llama-8b, replicas: {min: 2, max: 12}, leadTime: 12m}
---
apiVersion: infersight/v1
kind: ScalingPolicy
metadata: {name: fleet}
spec: {}
"""


@dataclass
class Obj:
    settings: Settings


def test_scaling_apply_list_and_show(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    path = tmp_path / "policies.yaml"
    path.write_text(POLICIES)
    obj = Obj(Settings(database_url=url))
    runner = CliRunner()
    first = runner.invoke(scaling, ["apply", str(path)], obj=obj)
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == ["created chat", "created fleet"]
    assert runner.invoke(scaling, ["apply", str(path)], obj=obj).output.splitlines() == [
        "updated chat",
        "updated fleet",
    ]
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    now = time.time()
    scaling_store.record(
        engine,
        Recommendation("llama-8b", now, 3, 5, 5, 2, 9.5, "forecast", "the forecast needs 5", ()),
    )
    engine.dispose()
    table = runner.invoke(scaling, ["list"], obj=obj)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[1].split() == ["chat", "llama-8b", "2", "12", "720"]
    assert lines[2].split()[:2] == ["fleet", "(every"]
    assert lines[5].split()[:6] == ["llama-8b", "-", "3", "5", "0", "forecast"]
    assert lines[5].endswith("yes")
    shown = json.loads(runner.invoke(scaling, ["show", "llama-8b"], obj=obj).output)
    assert shown["policy"]["metadata"]["name"] == "chat"
    assert shown["policy"]["spec"]["leadTime"] == "12m"
    assert shown["recommendation"]["desired"] == 5

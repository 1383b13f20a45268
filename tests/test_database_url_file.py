"""``INFERSIGHT_DATABASE_URL_FILE``: the store URL read from a file (issue #33), so that its
password need not sit in the environment of every process that uses the store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infersight.cli import store_settings
from infersight.cli.settings import Settings, SidecarSettings
from infersight.config.parts import PREFIX, SECRET_FILE_MAX_BYTES
from infersight.core.errors import ConfigurationError
from infersight.storage.engine import create_store_engine
from tests.collector.harness import post_spans, sidecar_args, span_key, stored_keys, vllm_spans
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-password"


@pytest.fixture(autouse=True)
def no_store_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith(PREFIX):
            monkeypatch.delenv(name)


def test_every_role_reads_the_store_url_from_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"postgresql+psycopg://infersight:{SECRET}@db.example:5432/infersight"
    (tmp_path / "url").write_text(f"  {url}\n")
    monkeypatch.setenv("INFERSIGHT_DATABASE_URL_FILE", str(tmp_path / "url"))
    for role in (Settings, SidecarSettings):
        assert role().database_url == url
    assert store_settings.read().database_url == url  # the reading commands' light path too
    assert store_settings.read("sqlite:///given.db").database_url == "sqlite:///given.db"


def test_the_file_and_the_variable_together_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "url").write_text("sqlite:///from-file.db\n")
    monkeypatch.setenv("INFERSIGHT_DATABASE_URL_FILE", str(tmp_path / "url"))
    monkeypatch.setenv("INFERSIGHT_DATABASE_URL", "sqlite:///from-env.db")
    with pytest.raises(ConfigurationError, match="both set: set one of them"):
        Settings()
    with pytest.raises(ConfigurationError, match="both set"):
        store_settings.read()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read"),
        (b"\n  \n", "is empty"),
        (b"\xff\xfe" + SECRET.encode(), "not UTF-8"),
        (b"x" * (SECRET_FILE_MAX_BYTES + 1), "more than"),
    ],
)
def test_a_file_that_cannot_be_used_is_a_clear_error_without_its_content(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes | None, problem: str
) -> None:
    path = tmp_path / "url"
    if content is not None:
        path.write_bytes(content)
    monkeypatch.setenv("INFERSIGHT_DATABASE_URL_FILE", str(path))
    with pytest.raises(ConfigurationError, match=problem) as caught:
        Settings()
    assert "INFERSIGHT_DATABASE_URL_FILE" in caught.value.message
    assert SECRET not in caught.value.message


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith(PREFIX)}
    return subprocess.run(
        [sys.executable, "-c", "from infersight.cli import main; main()", *args],
        check=False, capture_output=True, text=True, timeout=120, cwd=cwd,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip


def test_the_command_line_uses_the_file_and_refuses_a_conflict(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    (tmp_path / "url").write_text(f"sqlite:///{store}\n")
    env = {"INFERSIGHT_DATABASE_URL_FILE": str(tmp_path / "url")}
    upgraded = _cli("db", "upgrade", env=env, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert store.exists()
    assert _cli("slo", "list", env=env, cwd=tmp_path).returncode == 0
    both = _cli(
        "slo", "list", env={**env, "INFERSIGHT_DATABASE_URL": "sqlite:///other.db"}, cwd=tmp_path
    )
    assert both.returncode == 2
    assert both.stderr.startswith("error: INFERSIGHT_DATABASE_URL and INFERSIGHT_DATABASE_URL_FILE")
    assert "Traceback" not in both.stderr
    assert not (tmp_path / "other.db").exists()


def test_a_sidecar_ships_to_the_store_its_file_names(tmp_path: Path) -> None:
    """The sidecar remakes its settings from the group's (``model_dump``): the URL the file held
    is the store it ships to, with nothing else naming one."""
    store = tmp_path / "store.db"
    (tmp_path / "url").write_text(f"sqlite:///{store}\n")
    env = {"INFERSIGHT_DATABASE_URL_FILE": str(tmp_path / "url")}
    assert _cli("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith(PREFIX)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from infersight.cli import main; main()", "sidecar",
         *sidecar_args(tmp_path / "spool", "from-file")],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip
    engine = create_store_engine(f"sqlite:///{store}")
    try:
        assert proc.stdout is not None
        match = re.search(r"http=(127\.0\.0\.1:\d+)", proc.stdout.readline())
        assert match
        spans = vllm_spans(5)
        assert post_spans(f"http://{match.group(1)}", spans).status_code == 200
        expected = {span_key(s) for s in spans}
        until(lambda: set(stored_keys(engine)) == expected, "the spans stored", process=proc)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
        engine.dispose()

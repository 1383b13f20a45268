"""``baseline compare`` names its candidate so that people can read it: a window by its UTC
range, a result file by its name (#16)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from infersight.cli.group import cli
from infersight.core.baseline_compare import window_label
from infersight.core.window import Window
from tests.baselines.test_cli import run, store_two_hours, url  # noqa: F401 - the store fixture
from tests.baselines.test_importers import DATA
from tests.doubles import NOW


def test_windows_read_as_utc_ranges():
    start = datetime(2026, 12, 2, 13, 20, tzinfo=UTC)
    assert window_label(Window(start, start + timedelta(minutes=4))) == "2026-12-02 13:20–13:24 UTC"
    assert (
        window_label(Window(start - timedelta(hours=14), start))
        == "2026-12-01 23:20 – 2026-12-02 13:20 UTC"
    )
    assert (
        window_label(Window(start + timedelta(seconds=30), start + timedelta(minutes=3)))
        == "2026-12-02 13:20:30–13:23:00 UTC"
    )


def test_a_window_candidate_is_labelled_with_its_range(url):  # noqa: F811
    store_two_hours(url)
    start, end = NOW - timedelta(hours=2), NOW
    window = ["--start", start.isoformat(), "--end", end.isoformat(), "--model", "llama-8b"]
    runner = CliRunner()
    captured = runner.invoke(cli, ["--store", url, "baseline", "capture", "prod", *window])
    assert captured.exit_code == 0, captured.output
    compared = runner.invoke(cli, ["--store", url, "baseline", "compare", "prod", *window])
    assert compared.exit_code == 0, compared.output
    expected = window_label(Window(start, end))
    assert compared.output.splitlines()[0].startswith(f"baseline prod vs {expected}: ")
    assert "window@" not in compared.output
    as_json = runner.invoke(cli, ["--store", url, "baseline", "compare", "prod", *window, "--json"])
    assert json.loads(as_json.output)["candidate"] == expected


def test_a_file_candidate_is_labelled_with_the_files_name(url, tmp_path):  # noqa: F811
    imported = run(url, "import", str(DATA / "vllm_result.json"), "--name", "vllm-main")
    assert imported.exit_code == 0, imported.output
    pr = tmp_path / "pr-1234-vllm.json"
    pr.write_text((DATA / "vllm_result.json").read_text())
    compared = run(url, "compare", "vllm-main", "--file", str(pr), "--json")
    assert compared.exit_code == 0, compared.output
    assert json.loads(compared.output)["candidate"] == "pr-1234-vllm.json"
    summary = tmp_path / "summary.md"
    run(url, "compare", "vllm-main", "--file", str(pr), "--markdown", str(summary))
    assert "Candidate `pr-1234-vllm.json`" in summary.read_text()

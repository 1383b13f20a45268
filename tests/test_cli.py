"""The ``infersight`` command as a user runs it (#16): what it imports before it runs, one line
and its own exit status for a store it cannot use, the one migrate-or-not rule, and
``--store`` accepted before and after every command that uses the store."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from infersight.cli import group as cli_module
from infersight.cli.demo_report import progress_bar
from infersight.cli.group import cli
from infersight.config.parts import DEFAULT_DATABASE_URL
from infersight.simulator.fleet import Progress
from tests.conftest import fresh_database
from tests.peers import free_port

ROOT = Path(__file__).resolve().parents[1]
CLI = "from infersight.cli import main; main()"
#: What a command that does not reach the store must not load before it runs.
#: The exit statuses documented in ``infersight --help`` and docs/cli.md.
EXIT_UNAVAILABLE, EXIT_NO_SCHEMA = 3, 4
HEAVY = ("sqlalchemy", "fastapi", "uvicorn", "numpy", "yaml", "alembic", "pydantic", "httpx")


def run(*args: str, cwd: Path = ROOT, code: str = CLI) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSIGHT_")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def loaded_after(*args: str) -> set[str]:
    """The top-level packages loaded once ``infersight ARGS`` has run (in a subprocess)."""
    code = (
        "import sys, json\n"
        "from infersight.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
    )
    done = run(*args, code=code)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["db", "--help"], ["slo", "--help"]])
def test_help_and_version_import_neither_the_store_nor_the_api_nor_pydantic(
    args: list[str],
) -> None:
    loaded = loaded_after(*args)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


#: What a command that only reads the store must not load: the API, Alembic (``storage.revisions``
#: reads the revisions) and pydantic (``infersight.cli.store_settings`` reads the store's settings,
#: ``service.slo_documents`` writes SLO documents).
NOT_FOR_READING = {"fastapi", "uvicorn", "alembic", "httpx", "starlette", "pydantic"}


def test_slo_list_imports_the_store_but_not_the_api_migrations_or_rule_export(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    assert run("--store", store, "db", "upgrade").returncode == 0
    spec = tmp_path / "slo.yaml"
    spec.write_text(
        "apiVersion: infersight/v1\nkind: SLO\nmetadata: {name: chat-ttft}\n"
        "spec: {sli: {latency: {metric: ttft, threshold: 2s}}, window: 1d, objective: 0.99}\n"
    )
    assert run("--store", store, "slo", "apply", str(spec)).returncode == 0
    loaded = loaded_after("--store", store, "slo", "list")
    assert "sqlalchemy" in loaded  # it did read the store
    assert not loaded & (NOT_FOR_READING | {"pydantic_settings"}), sorted(loaded & NOT_FOR_READING)
    modules = run(
        "--store",
        store,
        "slo",
        "list",
        code="import sys\nfrom infersight.cli import main\ntry:\n    main()\nexcept SystemExit:\n"
        "    pass\nprint('prometheus_rules' in str(sorted(sys.modules)), file=sys.stderr)",
    )
    assert modules.stderr.strip().endswith("False")


@pytest.mark.parametrize(
    ("command", "also_not"),
    [
        (["baseline", "list"], NOT_FOR_READING),
        (["db", "current"], NOT_FOR_READING),
        (
            ["cost", "show", "--last", "1h"],
            NOT_FOR_READING - {"pydantic"},  # the cost settings
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_reading_commands_import_neither_alembic_nor_the_api(
    tmp_path: Path, command: list[str], also_not: set[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    assert run("--store", store, "db", "upgrade").returncode == 0
    loaded = loaded_after("--store", store, *command)
    assert "sqlalchemy" in loaded
    assert not loaded & also_not, sorted(loaded & also_not)


def test_the_help_names_the_same_default_store_as_the_settings() -> None:
    assert cli_module.DEFAULT_STORE == DEFAULT_DATABASE_URL
    assert DEFAULT_DATABASE_URL in CliRunner().invoke(cli, ["--help"]).output


def test_the_help_documents_the_exit_statuses() -> None:
    text_ = CliRunner().invoke(cli, ["--help"]).output
    assert "Exit status:" in text_
    for code, words in [(3, "cannot be reached"), (4, "db upgrade")]:
        assert any(
            line.strip().startswith(f"{code} ") and words in line for line in text_.splitlines()
        )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_sqlite_store_in_a_missing_directory_is_one_line_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path}/no/such/dir/x.db"
    for command in (["slo", "list"], ["slo", "apply", str(ROOT / "infersight/cli/demo_slos.yaml")]):
        done = run("--store", store, *command)
        assert done.returncode == EXIT_UNAVAILABLE, done.stderr
        assert one_line(done) == (
            f"error: cannot reach the store at {store}: unable to open database file:"
            " directory does not exist"
        )
    assert not (tmp_path / "no").exists()


def test_an_unreachable_postgresql_store_is_one_line_without_its_password() -> None:
    store = f"postgresql://nobody:s3cret@127.0.0.1:{free_port()}/x"
    done = run("--store", store, "slo", "list")
    assert done.returncode == EXIT_UNAVAILABLE
    line = one_line(done)
    assert line.startswith("error: cannot reach the store at postgresql://nobody:***@127.0.0.1:")
    assert "s3cret" not in done.stderr


READERS = [
    ["slo", "list"],
    ["slo", "export-rules"],
    ["baseline", "list"],
    ["cost", "show", "--last", "1h"],
    ["db", "maintain"],
]


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_reading_command_on_a_fresh_sqlite_file_says_run_db_upgrade_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "fresh.db"
    done = run("--store", f"sqlite:///{path}", *command)
    assert done.returncode == EXIT_NO_SCHEMA, done.stderr
    assert one_line(done) == (
        f"error: the store at sqlite:///{path} has no schema: run `infersight db upgrade`"
    )
    assert not path.exists()


def test_a_reading_command_on_an_empty_sqlite_file_says_run_db_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    done = run("--store", f"sqlite:///{path}", "slo", "list")
    assert done.returncode == EXIT_NO_SCHEMA, done.stderr
    assert "has no schema: run `infersight db upgrade`" in one_line(done)


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.mark.postgres
def test_a_reading_command_on_a_postgresql_store_without_schema_says_run_db_upgrade(
    empty_postgres: str,
) -> None:
    for command in (["slo", "list"], ["baseline", "list"]):
        done = run("--store", empty_postgres, *command)
        assert done.returncode == EXIT_NO_SCHEMA, done.stderr
        assert "has no schema: run `infersight db upgrade`" in one_line(done)


def test_db_current_on_a_fresh_file_reports_no_schema_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    done = run("db", "current", "--store", f"sqlite:///{path}")
    assert done.returncode == EXIT_NO_SCHEMA
    assert done.stdout.startswith("current: none (not migrated); head: ")
    assert not path.exists()


def test_serve_no_migrate_probes_a_fresh_sqlite_file_without_creating_it(tmp_path: Path) -> None:
    """``serve --no-migrate`` only probes the store, on the gate's own thread (where the
    command's "only reads" does not reach: a context variable is not inherited by threads);
    the probe must not create the file that ``db upgrade`` would."""
    from infersight.service.admin import ping
    from infersight.service.store import open_store
    from infersight.storage.engine import no_schema

    path = tmp_path / "fresh.db"
    store = open_store(f"sqlite:///{path}")
    failed: list[BaseException] = []

    def probe() -> None:
        try:
            ping(store)  # what ``serve --no-migrate`` runs
        except Exception as exc:
            failed.append(exc)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    store.dispose()
    assert len(failed) == 1
    assert isinstance(failed[0], Exception)
    assert no_schema(failed[0])  # "run db upgrade", as every reading command says
    assert not path.exists()


def test_a_writing_command_creates_and_migrates_a_fresh_store(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    store = f"sqlite:///{path}"
    applied = run("slo", "apply", str(ROOT / "infersight/cli/demo_slos.yaml"), "--store", store)
    assert applied.returncode == 0, applied.stderr
    listed = run("slo", "list", "--json", "--store", store)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)


def leaves(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            yield from leaves(sub, (*path, name))
    else:
        yield path


def test_every_command_accepts_store_after_its_name() -> None:
    runner = CliRunner()
    for path in leaves(cli):
        help_text = runner.invoke(cli, [*path, "--help"]).output
        assert "--store URL" in help_text, path


def test_store_after_the_command_is_the_store_it_uses(tmp_path: Path) -> None:
    runner = CliRunner()
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    done = runner.invoke(cli, ["db", "upgrade", "--store", f"sqlite:///{first}"])
    assert done.exit_code == 0, done.output
    assert first.exists()
    # after the command, it wins over the group's
    done = runner.invoke(
        cli, ["--store", f"sqlite:///{first}", "db", "upgrade", "--store", f"sqlite:///{second}"]
    )
    assert done.exit_code == 0, done.output
    assert f"sqlite:///{second} is at revision" in done.output


def test_the_group_store_reaches_simulate(tmp_path: Path) -> None:
    path = tmp_path / "sim.db"
    done = run(
        "--store",
        f"sqlite:///{path}",
        "simulate",
        "--scenario",
        "quiet-day",
        "--duration",
        "1m",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["store"]["inserted"] > 0


def test_the_demo_progress_off_a_terminal_is_plain_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show, done = progress_bar()  # standard error is captured here: not a terminal
    for virtual_s in (600.0, 1200.0, 1200.0):
        show(Progress(virtual_s=virtual_s, duration_s=1200.0, requests=42, wall_s=1.0))
    done()
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines()[:2] == [
        "   50%  0:10:00 simulated, 42 requests",  # the first at once
        "  100%  0:20:00 simulated, 42 requests",  # the last, however soon
    ]


def test_the_demo_progress_on_a_terminal_redraws_in_place(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = [0.0]
    show, done = progress_bar(tty=True, clock=lambda: now[0])
    for step in range(3):
        now[0] = float(step * 2)
        show(Progress(virtual_s=step * 100.0, duration_s=1200.0, requests=step, wall_s=1.0))
    done()
    done()  # the demo calls it twice when interrupted: one newline
    err = capsys.readouterr().err
    assert err.count("\r") == 3
    assert err.endswith("requests\n")


BROKEN_YAML = "apiVersion: infersight/v1\nkind: SLO\nmetadata:\n  name: x\nspec: [unclosed\n"


@pytest.mark.parametrize(
    "command",
    [
        ["slo", "apply"],
        ["slo", "export-rules"],
        ["cost", "apply"],
        ["scaling", "apply"],
        ["simulate", "--scenario"],
        ["demo", "--slos"],
        ["demo", "--scenario"],
        ["demo", "--virtual", "--scenario"],
    ],
    ids=" ".join,
)
def test_a_spec_file_that_does_not_parse_is_named_with_its_line(
    tmp_path: Path, command: list[str]
) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text(BROKEN_YAML)
    done = run("--store", f"sqlite:///{tmp_path / 'x.db'}", *command, str(spec))
    assert done.returncode == 2
    assert one_line(done) == (
        f"error: {spec}, line 6, column 1: not valid YAML or JSON: expected ',' or ']', but got"
        " '<stream end>' (while parsing a flow sequence at line 5, column 7)"
    )
    assert not (tmp_path / "x.db").exists()  # refused before the store was created


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"backend": "vllm",\n "completed": 10,\n "duration": }\n', "line 3, column 14"),
        ('{"completed": 10}\n{"completed": 11}\n{"completed": \n', "line 3, column 15"),
    ],
    ids=["json", "json-lines"],
)
def test_a_result_file_that_does_not_parse_is_named_with_its_line(
    tmp_path: Path, text: str, where: str
) -> None:
    result = tmp_path / "result.json"
    result.write_text(text)
    done = run(
        "--store",
        f"sqlite:///{tmp_path / 'x.db'}",
        "baseline",
        "import",
        str(result),
        "--name",
        "b",
    )
    assert done.returncode == 2
    assert one_line(done).startswith(f"error: {result}, {where}: not valid JSON")


def test_a_spec_file_that_parses_but_is_invalid_is_named(tmp_path: Path) -> None:
    spec = tmp_path / "invalid.yaml"
    spec.write_text("apiVersion: infersight/v1\nkind: SLO\nmetadata:\n  name: x\nspec: {}\n")
    done = run("--store", f"sqlite:///{tmp_path / 'x.db'}", "slo", "apply", str(spec))
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == f"error: {spec}: invalid SLO document"

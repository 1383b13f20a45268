"""``infersight``: one command line for the sidecar, the service, the demo and the store.

Settings are built here once and handed down; subcommands live in their own modules.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

import click

from infersight import __version__
from infersight.cli.store_settings import DEFAULT_DATABASE_URL, PREFIX, StoreSettings
from infersight.cli.store_settings import read as read_store_settings
from infersight.core.errors import InfersightError, InvalidInput, SchemaMissing, Unavailable

if TYPE_CHECKING:
    from infersight.cli.settings import Settings
    from infersight.service.store import Store
    from infersight.simulator.scenario import Scenario

# What ``infersight --help`` and every command import before they run is only click and the
# error hierarchy: the settings (pydantic), the store (SQLAlchemy, numpy, Alembic), the API
# (FastAPI) and the spec parsers (yaml) are imported by the commands that use them
# (``tests/test_cli.py`` keeps it so; ``bench/bench_cli.py`` times it).

#: ``config.parts.DEFAULT_DATABASE_URL``, repeated in ``infersight.cli.store_settings`` so that
#: ``--help`` needs no pydantic (``tests/test_store_settings.py`` checks that they agree).
DEFAULT_STORE = DEFAULT_DATABASE_URL

#: Exit statuses, documented in ``infersight --help`` and docs/cli.md.
EXIT_OK = 0
#: The command ran and failed (a regressed comparison, a plan that does not fit), or was aborted.
EXIT_FAILED = 1
#: A usage error or invalid input (a bad flag, a spec file that does not parse).
EXIT_USAGE = 2
#: The store (or another dependency) cannot be reached: retry later.
EXIT_UNAVAILABLE = 3
#: The store answers but has no schema: run ``infersight db upgrade``.
EXIT_NO_SCHEMA = 4

EPILOG = f"""\b
Exit status:
  {EXIT_OK}  success
  {EXIT_FAILED}  the command failed or was aborted
  {EXIT_USAGE}  usage error or invalid input
  {EXIT_UNAVAILABLE}  the store (or another dependency) cannot be reached: retry later
  {EXIT_NO_SCHEMA}  the store has no schema: run `infersight db upgrade`

\b
The store: --store URL (before or after the command) or INFERSIGHT_DATABASE_URL.
Commands that store what they are given (db upgrade, apply, slo apply, cost apply, budget
apply, scaling apply, baseline capture|import, report weekly, loadtest --save,
simulate --store, demo, serve) create and migrate the store; every other command only
reads it and never creates or migrates it.
"""


class Context:
    """What the ``infersight`` group hands its commands: the store URL given on the command
    line and the settings, read from the environment when a command first asks for them."""

    def __init__(self, store: str | None = None) -> None:
        self._store = store
        self._settings: Settings | None = None

    @property
    def store(self) -> str | None:
        """The ``--store`` URL given (``None``: the settings' URL)."""
        return self._store

    @store.setter
    def store(self, url: str | None) -> None:
        if url != self._store:
            self._store, self._settings = url, None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from infersight.cli.settings import Settings  # noqa: PLC0415 (pydantic: when used)

            settings = Settings()
            if self._store:
                settings = settings.model_copy(update={"database_url": self._store})
            self._settings = settings
        return self._settings

    @property
    def store_settings(self) -> StoreSettings:
        """The store URL and retention, without pydantic unless the environment sets store
        variables that need validating (``infersight.cli.store_settings``)."""
        if self._settings is not None:
            return StoreSettings(self._settings.database_url, self._settings.retention())
        return read_store_settings(self._store)

    def open_store(self, *, light: bool = False) -> Store:
        """The store the settings name, opened the one way (``service.store.open_store``);
        ``light``: from the light store settings (a command that only reads: no pydantic
        unless store variables need validating), with the default timeouts."""
        # Imported here: ``infersight sidecar`` must bind before SQLAlchemy is loaded.
        from infersight.service.store import open_store  # noqa: PLC0415

        if light:
            return open_store(self.store_settings.database_url)
        return open_store(self.settings)


pass_context = click.make_pass_decorator(Context, ensure=True)


def current_settings(ctx: click.Context) -> Settings:
    """The settings the ``infersight`` group built, or the environment's when a command runs
    on its own (as tests invoke it)."""
    from infersight.cli.settings import Settings  # noqa: PLC0415

    settings = getattr(ctx.obj, "settings", None)
    return settings if isinstance(settings, Settings) else Settings()


def open_store(ctx: click.Context, *, light: bool = False) -> Store:
    """The store of ``current_settings`` (``light``: of ``store_settings``), opened the one way
    (``Context.open_store``), also for a command run on its own (as tests invoke it)."""
    context = ctx.find_object(Context)
    if context is not None:
        return context.open_store(light=light)
    from infersight.service.store import open_store as open_settings  # noqa: PLC0415

    if light:
        return open_settings(store_settings(ctx).database_url)
    return open_settings(current_settings(ctx))


def store_settings(ctx: click.Context) -> StoreSettings:
    """``current_settings``'s store URL and retention for a command that only reads: the same
    values, without building the pydantic settings (``infersight.cli.store_settings``)."""
    context = ctx.find_object(Context)
    if context is not None:
        return context.store_settings
    settings = getattr(ctx.obj, "settings", None)  # a command run on its own, given settings
    if settings is not None:
        return StoreSettings(settings.database_url, settings.retention())
    return read_store_settings()


def _given_store(ctx: click.Context) -> str | None:
    context = ctx.find_object(Context)
    return context.store if context is not None else None


def _set_store(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--store`` after a command: it replaces the group's (and the environment's) URL."""
    if value:
        context = ctx.find_object(Context)
        if context is not None:
            context.store = value
        else:
            ctx.obj = Context(value)
    return value or _given_store(ctx)


F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def read_spec_file(path: Path, parse: Callable[[bytes], T], limit: int | None = None) -> T:
    """``parse`` of the file at ``path``; its ``InvalidInput`` names the file (and, for YAML
    that does not parse, the line and column) in one line. With ``limit``, at most one byte
    more than that is read (a pipe or a device too), for ``parse`` to refuse."""
    if limit is None:
        data = path.read_bytes()
    else:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    try:
        return parse(data)
    except InvalidInput as exc:
        raise InvalidInput(_spec_error(path, data, exc.message), details=exc.details) from None


def read_scenario(ref: str | Path) -> Scenario:
    """The scenario ``ref`` names: a file (whose errors name it and the line, as
    ``read_spec_file``'s do) or a shipped scenario's name."""
    from infersight.simulator.specs import load_scenario  # noqa: PLC0415 (the simulator: when used)

    path = Path(ref)
    if path.is_file():
        return read_spec_file(path, lambda _data: load_scenario(path))
    return load_scenario(ref)


def _at(mark: Any, lead: str = ",") -> str:
    return f"{lead} line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _spec_error(path: Path, data: bytes, message: str) -> str:
    """``FILE[, line L, column C]: MESSAGE``, the YAML parser's message cut to its problem."""
    if "not valid YAML" in message:
        import yaml  # noqa: PLC0415 (only when a file does not parse)

        try:
            for _ in yaml.safe_load_all(data):
                pass
        except yaml.MarkedYAMLError as error:
            return f"{path}{_at(error.problem_mark)}: not valid YAML or JSON: " + (
                f"{error.problem} ({error.context}{_at(error.context_mark, ' at')})"
                if error.problem and error.context
                else error.problem or error.context or "unreadable"
            )
        except yaml.YAMLError:
            pass
    prefix = f"{path}: "
    return message if message.startswith(prefix) else prefix + message


STORE_HELP = "Store URL (overrides INFERSIGHT_DATABASE_URL and the group's --store)."


def store_option(*, expose: bool = False, help: str = STORE_HELP) -> Callable[[F], F]:
    """``--store URL`` as a command's option, shared by every command that uses the store.

    The group's ``--store`` and the command's mean the same: ``infersight --store URL db
    upgrade`` and ``infersight db upgrade --store URL``. With ``expose`` the command also
    receives the URL given (the command's, else the group's; ``None`` when neither was).
    """
    return click.option(
        "--store",
        metavar="URL",
        default=None,
        expose_value=expose,
        is_eager=True,
        callback=_set_store,
        help=help,
    )


def add_store_option(command: click.Command) -> click.Command:
    """Give ``command`` and its subcommands ``--store`` where they lack it (idempotent)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_store_option(sub)
    elif not any(param.name == "store" for param in command.params):
        store_option()(command)
    return command


#: The extra (``pyproject.toml``) that installs what a command needs beyond the core, named
#: when it is missing; a command not listed needs the core only (``all`` is said for it).
EXTRAS: dict[str, str] = {
    "sidecar": "sidecar",
    "serve": "server",
    "report": "server",  # its HTML report is rendered with Jinja, the dashboard's templates
    "simulate": "simulator",
    "demo": "all",  # the demo runs every role: the simulator, sidecars, the API
    "loadtest": "loadtest",
}


class LazyGroup(click.Group):
    """A group whose heavier subcommands are imported only when they run.

    ``infersight db …`` then starts fast and works on a base install without the collector's
    or the simulator's extras.
    """

    lazy: ClassVar[dict[str, tuple[str, str, str]]] = {
        "sidecar": (
            "infersight.cli.commands_sidecar",
            "sidecar",
            "Run the collector next to one inference server.",
        ),
        "simulate": (
            "infersight.cli.commands_simulate",
            "simulate",
            "Run a simulated fleet scenario.",
        ),
        "serve": ("infersight.cli.commands_serve", "serve", "Run the API, dashboard and jobs."),
        "profile": (
            "infersight.cli.commands_profile",
            "profile",
            "Profile an instance's serving process through its sidecar.",
        ),
        "slo": ("infersight.cli.commands_slo", "slo", "Apply and list SLO specs."),
        "apply": (
            "infersight.cli.commands_apply",
            "apply",
            "Apply SLO, CostModel, ScalingPolicy and Budget documents, all or nothing.",
        ),
        "demo": (
            "infersight.cli.commands_demo",
            "demo",
            "Play a simulated fleet with incidents and report.",
        ),
        "cost": ("infersight.cli.commands_cost", "cost", "Show and configure unit costs."),
        "budget": (
            "infersight.cli.commands_budget",
            "budget",
            "Apply and list budgets (spend per period, burn-rate alerts).",
        ),
        "report": ("infersight.cli.commands_report", "report", "Generate cost reports."),
        "baseline": (
            "infersight.cli.commands_baseline",
            "baseline",
            "Capture, import and compare performance baselines.",
        ),
        "loadtest": (
            "infersight.cli.commands_loadtest",
            "loadtest",
            "Drive an OpenAI-compatible endpoint and measure it.",
        ),
        "capacity": (
            "infersight.cli.commands_capacity",
            "capacity",
            "Plan instances and GPU memory.",
        ),
        # ``infersight.cli.commands_scaling`` owns the group (backtest);
        # ``commands_scaling_admin.register`` adds apply / list / show to it.
        "scaling": (
            "infersight.cli.commands_scaling",
            "scaling",
            "Scaling policies and replica recommendations.",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attribute, _ = self.lazy[cmd_name]
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                extra = EXTRAS.get(cmd_name, "all")
                raise click.ClickException(
                    f"'{cmd_name}' needs an optional dependency that is not installed ({exc.name});"
                    f" install infersight[{extra}]"
                ) from exc
            command: click.Command = getattr(module, attribute)
            return add_store_option(command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a database error that means the store is out of reach or was never
        migrated becomes one ``Unavailable`` / ``SchemaMissing`` with a one-line message."""
        from infersight.service.admin import creating  # noqa: PLC0415 (no SQLAlchemy in it)

        try:
            # A command that only reads never creates the store; ``db upgrade`` and the
            # commands that migrate create it (``service.admin.migrate``).
            with creating(False):
                return super().invoke(ctx)
        except Exception as exc:
            error = _store_error(exc, ctx)
            if error is None:
                raise
            raise error from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        eager = []
        for name in click.Group.list_commands(self, ctx):
            command = click.Group.get_command(self, ctx, name)
            if command is not None:
                eager.append((name, command.get_short_help_str(60)))
        lazy = [(name, spec[2]) for name, spec in self.lazy.items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(eager + lazy))


def _store_error(exc: Exception, ctx: click.Context) -> Unavailable | None:
    if "sqlalchemy" not in sys.modules:  # no command reached the store
        return None
    from infersight.service.admin import store_error  # noqa: PLC0415

    context = ctx.find_object(Context)
    url = context.store_settings.database_url if context is not None else DEFAULT_STORE
    return store_error(exc, url)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(__version__, prog_name="infersight")
@click.option(
    "--store",
    metavar="URL",
    default=None,
    help=f"Store URL (overrides INFERSIGHT_DATABASE_URL; default {DEFAULT_STORE}).",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, store: str | None, verbose: int) -> None:
    """SLO and cost observability for LLM inference fleets."""
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    ctx.obj = Context(store)


@cli.group()
def db() -> None:
    """Schema migrations and upkeep of the store."""


@db.command("upgrade")
@store_option()
@click.argument("revision", default="head")
@pass_context
def db_upgrade(context: Context, revision: str) -> None:
    """Migrate the store up to REVISION (default: the newest)."""
    from infersight.service.admin import reaching, redact, upgrade  # noqa: PLC0415

    store = context.open_store()
    with reaching(context.settings.database_url):
        current = upgrade(store, revision)
    click.echo(f"{redact(context.settings.database_url)} is at revision {current}")


@db.command("downgrade")
@store_option()
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_context
def db_downgrade(context: Context, revision: str, yes: bool) -> None:
    """Migrate the store down to REVISION ('base' removes every table and its data)."""
    from infersight.service.admin import downgrade, reaching, redact  # noqa: PLC0415

    if not yes:
        click.confirm(
            f"Downgrade {redact(context.settings.database_url)} to {revision}?", abort=True
        )
    store = context.open_store()
    with reaching(context.settings.database_url):
        current = downgrade(store, revision)
    click.echo(f"now at revision {current or 'base'}")


@db.command("current")
@store_option()
@pass_context
def db_current(context: Context) -> None:
    """Print the store's revision and the newest one this version ships."""
    # Not Alembic: two strings need neither Alembic nor pydantic.
    from infersight.service.admin import current_revision, head_revision, reaching  # noqa: PLC0415

    store = context.open_store(light=True)
    try:
        with reaching(context.store_settings.database_url):
            current = current_revision(store)
    except SchemaMissing:  # a SQLite file that does not exist: not created by asking
        current = None
    finally:
        store.dispose()
    click.echo(f"current: {current or 'none (not migrated)'}; head: {head_revision()}")
    if current is None:
        sys.exit(EXIT_NO_SCHEMA)


@db.command("maintain")
@store_option()
@pass_context
def db_maintain(context: Context) -> None:
    """Create upcoming daily partitions, apply retention, drop far-future partitions."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from infersight.service.admin import maintain, reaching  # noqa: PLC0415

    store = context.open_store()
    with reaching(context.settings.database_url):
        report = maintain(store, datetime.now(UTC), context.settings.retention())
    click.echo(
        f"partitions created: {len(report.created)}, dropped: {len(report.dropped)}, "
        f"rollup rows deleted: {report.rollups_deleted}"
    )
    for name in report.dropped:
        click.echo(f"  dropped {name}")


def _fail(error: InfersightError) -> NoReturn:
    click.echo(f"error: {error.message}", err=True)
    for key, value in error.details.items():
        click.echo(f"  {key}: {value}", err=True)
    if isinstance(error, SchemaMissing):
        sys.exit(EXIT_NO_SCHEMA)
    sys.exit(EXIT_UNAVAILABLE if isinstance(error, Unavailable) else EXIT_USAGE)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FAILED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except InfersightError as exc:
        _fail(exc)
    except Exception as exc:
        message = _settings_error(exc)
        if message is None:
            raise
        click.echo(f"error: {message}", err=True)
        sys.exit(EXIT_USAGE)


def _settings_error(exc: Exception) -> str | None:
    """pydantic's refusal of a setting (``INFERSIGHT_*``), as one line naming the variables,
    without the values (one may be a secret); ``None`` for any other error."""
    errors = getattr(exc, "errors", None)
    if type(exc).__name__ != "ValidationError" or not callable(errors):
        return None
    if not str(getattr(exc, "title", "")).endswith("Settings"):
        return None
    problems = []
    for error in errors(include_input=False, include_url=False):
        where = error.get("loc") or ()
        name = PREFIX + str(where[0]).upper() if where else "the settings"
        problems.append(f"{name}: {error.get('msg', 'invalid')}")
    return "invalid setting: " + "; ".join(problems)

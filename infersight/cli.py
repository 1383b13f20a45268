"""``infersight``: one command line for the sidecar, the service, the demo and the store.

Settings are built here once and handed down; subcommands live in their own modules.
"""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar, NoReturn

import click

from config.parts import DEFAULT_DATABASE_URL
from core.errors import InfersightError, Unavailable
from infersight import __version__
from infersight.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


@dataclass
class Context:
    settings: Settings

    def engine(self) -> Engine:
        # Imported here: ``infersight sidecar`` must bind before SQLAlchemy is loaded.
        from storage.engine import create_store_engine  # noqa: PLC0415

        return create_store_engine(self.settings.database_url)


pass_context = click.make_pass_decorator(Context)


def current_settings(ctx: click.Context) -> Settings:
    """The settings the ``infersight`` group built, or the environment's when a command runs
    on its own (as tests invoke it)."""
    settings = getattr(ctx.obj, "settings", None)
    return settings if isinstance(settings, Settings) else Settings()


class LazyGroup(click.Group):
    """A group whose heavier subcommands are imported only when they run.

    ``infersight db …`` then starts fast and works on a base install without the collector's
    or the simulator's extras.
    """

    lazy: ClassVar[dict[str, tuple[str, str, str]]] = {
        "sidecar": (
            "infersight.commands_sidecar",
            "sidecar",
            "Run the collector next to one inference server.",
        ),
        "simulate": ("infersight.commands_simulate", "simulate", "Run a simulated fleet scenario."),
        "serve": ("infersight.commands_serve", "serve", "Run the API, dashboard and jobs."),
        "slo": ("infersight.commands_slo", "slo", "Apply and list SLO specs."),
        "demo": (
            "infersight.commands_demo",
            "demo",
            "Play a simulated fleet with incidents and report.",
        ),
        "cost": ("infersight.commands_cost", "cost", "Show and configure unit costs."),
        "report": ("infersight.commands_report", "report", "Generate cost reports."),
        "baseline": (
            "infersight.commands_baseline",
            "baseline",
            "Capture, import and compare performance baselines.",
        ),
        "loadtest": (
            "infersight.commands_loadtest",
            "loadtest",
            "Drive an OpenAI-compatible endpoint and measure it.",
        ),
        "capacity": ("infersight.commands_capacity", "capacity", "Plan instances and GPU memory."),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attribute, _ = self.lazy[cmd_name]
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise click.ClickException(
                    f"'{cmd_name}' needs an optional dependency that is not installed ({exc.name});"
                    " install infersight[all]"
                ) from exc
            command: click.Command = getattr(module, attribute)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        eager = []
        for name in click.Group.list_commands(self, ctx):
            command = click.Group.get_command(self, ctx, name)
            if command is not None:
                eager.append((name, command.get_short_help_str(60)))
        lazy = [(name, spec[2]) for name, spec in self.lazy.items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(eager + lazy))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="infersight")
@click.option(
    "--store",
    metavar="URL",
    default=None,
    help=f"Store URL (overrides INFERSIGHT_DATABASE_URL; default {DEFAULT_DATABASE_URL}).",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, store: str | None, verbose: int) -> None:
    """SLO and cost observability for LLM inference fleets."""
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = Settings()
    if store:
        settings = settings.model_copy(update={"database_url": store})
    ctx.obj = Context(settings)


@cli.group()
def db() -> None:
    """Schema migrations and upkeep of the store."""


@db.command("upgrade")
@click.argument("revision", default="head")
@pass_context
def db_upgrade(context: Context, revision: str) -> None:
    """Migrate the store up to REVISION (default: the newest)."""
    from storage import migrate  # noqa: PLC0415 (Alembic: only the db commands need it)
    from storage.engine import reaching, redact  # noqa: PLC0415

    engine = context.engine()
    with reaching(context.settings.database_url):
        migrate.upgrade(engine, revision)
        current = migrate.current(engine)
    click.echo(f"{redact(context.settings.database_url)} is at revision {current}")


@db.command("downgrade")
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_context
def db_downgrade(context: Context, revision: str, yes: bool) -> None:
    """Migrate the store down to REVISION ('base' removes every table and its data)."""
    from storage import migrate  # noqa: PLC0415
    from storage.engine import reaching, redact  # noqa: PLC0415

    if not yes:
        click.confirm(
            f"Downgrade {redact(context.settings.database_url)} to {revision}?", abort=True
        )
    engine = context.engine()
    with reaching(context.settings.database_url):
        migrate.downgrade(engine, revision)
        current = migrate.current(engine)
    click.echo(f"now at revision {current or 'base'}")


@db.command("current")
@pass_context
def db_current(context: Context) -> None:
    """Print the store's revision and the newest one this version ships."""
    from storage import migrate  # noqa: PLC0415
    from storage.engine import reaching  # noqa: PLC0415

    with reaching(context.settings.database_url):
        current = migrate.current(context.engine())
    click.echo(f"current: {current or 'none (not migrated)'}; head: {migrate.head()}")


@db.command("maintain")
@pass_context
def db_maintain(context: Context) -> None:
    """Create upcoming daily partitions, apply retention, drop far-future partitions."""
    from storage.engine import reaching  # noqa: PLC0415
    from storage.maintenance import maintain  # noqa: PLC0415

    with reaching(context.settings.database_url):
        report = maintain(context.engine(), datetime.now(UTC), context.settings.retention())
    click.echo(
        f"partitions created: {len(report.created)}, dropped: {len(report.dropped)}, "
        f"rollup rows deleted: {report.rollups_deleted}"
    )
    for name in report.dropped:
        click.echo(f"  dropped {name}")


#: Exit status when the store (or another dependency) cannot be reached: retry later.
EXIT_UNAVAILABLE = 3


def _fail(error: InfersightError) -> NoReturn:
    click.echo(f"error: {error.message}", err=True)
    for key, value in error.details.items():
        click.echo(f"  {key}: {value}", err=True)
    sys.exit(EXIT_UNAVAILABLE if isinstance(error, Unavailable) else 2)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except InfersightError as exc:
        _fail(exc)

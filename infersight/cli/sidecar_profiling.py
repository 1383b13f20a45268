"""The sidecar's profiler options (``--profile-target`` …) and its wiring.

Kept apart from ``cli.commands_sidecar`` so that the sidecar's start-up imports nothing more
than the collector's profiler (the store's channel is imported in the profiler's thread, on
its first poll, like the store writer in the shipper's).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from infersight.collector.profiling import (
    ProfilePoller,
    Profiler,
    ProfilerConfig,
    ProfileTarget,
    RemoteChannel,
)
from infersight.core.profile import MAX_RATE, MAX_SECONDS

F = TypeVar("F", bound=Callable[..., Any])


def profile_options(command: F) -> F:
    """The ``--profile-*`` options of ``infersight sidecar``."""
    options = [
        click.option(
            "--profile-target",
            default=None,
            metavar="PID|PIDFILE|NAME",
            help="Enable profiles (docs/profiles.md): the serving process to sample with "
            "py-spy when asked — a pid, a pid file's path, or a name its command line contains. "
            "Needs SYS_PTRACE and a shared process namespace.",
        ),
        click.option(
            "--profile-max-seconds",
            default=30.0,
            show_default=True,
            type=click.FloatRange(1.0, MAX_SECONDS),
            help="The longest profile this sidecar takes (requests are capped to it).",
        ),
        click.option(
            "--profile-rate",
            default=50,
            show_default=True,
            type=click.IntRange(1, MAX_RATE),
            help="The most samples per second a profile takes (requests are capped to it).",
        ),
        click.option(
            "--profile-native/--profile-no-native",
            default=True,
            show_default=True,
            help="Sample native frames too (GIL and lock waits become measurable; py-spy then "
            "pauses the process briefly for each sample).",
        ),
        click.option(
            "--profile-poll",
            default=5.0,
            show_default=True,
            type=click.FloatRange(0.1, 300.0),
            help="Seconds between two looks for a profile request.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def profile_poller(
    options: dict[str, Any], instance: str, store_url: Callable[[], str]
) -> ProfilePoller | None:
    """The poller the options ask for (``None`` without ``--profile-target``); checked
    before the sidecar listens."""
    target = options.get("profile_target")
    if not target:
        return None
    config = ProfilerConfig(
        ProfileTarget(target),
        max_seconds=options["profile_max_seconds"],
        max_rate=options["profile_rate"],
        native=options["profile_native"],
        poll_s=options["profile_poll"],
    )
    ship_to = options.get("ship_to")
    channel: Any
    if ship_to:
        token_file: Path | None = options.get("ship_token_file")
        token = token_file.read_text().strip() if token_file is not None else ""
        channel = RemoteChannel(ship_to, token)
    else:
        url = store_url()

        def channel() -> Any:
            from infersight.service.profiles import StoreChannel  # noqa: PLC0415
            from infersight.service.store import open_store  # noqa: PLC0415

            return StoreChannel(open_store(url))

    return ProfilePoller(instance, Profiler(config), channel)

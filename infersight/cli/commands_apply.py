"""``infersight apply -f FILE…``: every versioned document kind in one stream, all or nothing.

The files may mix SLO (infersight/v1 or OpenSLO v1), CostModel, ScalingPolicy and Budget
documents (YAML, several per file, or JSON; ``-f -`` reads standard input). Every document is
read and checked before the store is opened; then they are stored in one transaction
(``service.apply``): one bad document, or one write the store refuses, and nothing is stored.
``--dry-run`` makes the same checks and writes against the store and rolls them back, saying
what applying would do.

``apply_files`` is the same path for the per-area commands (``slo apply``, ``cost apply``,
``scaling apply``, ``budget apply``), each reading its own kind and printing its own lines.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from infersight.cli.group import current_settings, open_store, read_spec_file
from infersight.core.errors import Conflict, InvalidInput

if TYPE_CHECKING:
    from collections.abc import Sequence

    from infersight.service.apply import Outcome
    from infersight.service.documents import Document, DocumentKind

#: What ``-f -`` reads.
STDIN = Path("/dev/stdin")


def read_files(files: Sequence[Path], kinds: Sequence[DocumentKind[Any]]) -> list[Document[Any]]:
    """Every document of ``files`` (each held to the reader's size), each one of ``kinds``; a
    kind and name stands once across them. An error names the file (and the document)."""
    from infersight.service.documents import MAX_BYTES, check_names, read  # noqa: PLC0415

    documents: list[Document[Any]] = []
    for path in files:
        found = read_spec_file(path, lambda data: read(data, kinds), limit=MAX_BYTES)
        documents += [dataclasses.replace(d, source=str(path)) for d in found]
    check_names(documents)
    return documents


def apply_files(
    ctx: click.Context,
    files: Sequence[Path],
    kinds: Sequence[DocumentKind[Any]],
    *,
    dry_run: bool = False,
) -> Outcome:
    """Read ``files`` (``read_files``), then store every document in one transaction (rolled
    back for ``dry_run``, which neither creates nor migrates the store)."""
    from infersight.service.admin import migrate  # noqa: PLC0415 (Alembic: a command that stores)
    from infersight.service.apply import apply  # noqa: PLC0415

    documents = read_files(files, kinds)
    settings = current_settings(ctx)
    store = open_store(ctx)
    try:
        if not dry_run:
            migrate(store)
        return apply(
            store,
            documents,
            now=datetime.now(UTC),
            cost_model=settings.cost_model,
            dry_run=dry_run,
        )
    finally:
        store.dispose()


@click.command("apply")
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    required=True,
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    help="A file of documents (repeatable; - reads standard input).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check every document against the store, say what applying would do, store nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@click.pass_context
def apply(ctx: click.Context, files: tuple[Path, ...], dry_run: bool, as_json: bool) -> None:
    """Create or replace the SLO, CostModel, ScalingPolicy and Budget documents in FILEs.

    All or nothing: every document is checked first and all are stored in one transaction. A
    changed budget becomes its next version; an unchanged one is left alone. Budgets must be
    in the currency of the cost model in use (INFERSIGHT_COST_MODEL), which the same files may
    apply.
    """
    from infersight.service.apply import KINDS  # noqa: PLC0415

    paths = [STDIN if str(p) == "-" else p for p in files]
    try:
        outcome = apply_files(ctx, paths, KINDS, dry_run=dry_run)
    except (InvalidInput, Conflict) as exc:
        raise type(exc)(f"{exc.message} (nothing was applied)", details=exc.details) from None
    if as_json:
        click.echo(json.dumps(outcome.to_dict(), indent=2))
        return
    for applied in outcome.applied:
        d = applied.document
        used = " (in use)" if applied.in_use else ""
        click.echo(f"{d.kind} {d.name}: {applied.said(dry_run)}{used}")
        for note in applied.notes:
            click.echo(note, err=True)
    kinds = Counter(a.document.kind for a in outcome.applied)
    counted = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
    count = len(outcome.applied)
    noun = "document" if count == 1 else "documents"
    if dry_run:
        click.echo(f"dry run: {count} {noun} ({counted}) checked; nothing was stored")
    else:
        click.echo(f"applied {count} {noun} ({counted}) in one transaction")

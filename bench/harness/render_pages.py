"""Every dashboard page of a store rendered at one fixed time, as a digest per page and range.

``python render_pages.py URL NOW`` renders, with the code of whatever ``infersight`` is on the
path (``bench_pages --before`` runs it once with each checkout's), every page of the navigation
(``api.dashboard.routes.VIEWS``), the newest incident's page and the first SLO's page at the
ranges in ``RANGES``, each twice (cold caches, then warm), straight from the views and their
templates (no HTTP, no jobs; the page's own timing line is fixed), and prints one JSON object:
``"page range pass"`` → the SHA-256 of the HTML. Two checkouts that answer the same print the
same object. The evaluation runs once at ``NOW`` first, as ``serve`` would have.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import datetime
from typing import Any, Final

from infersight.api.context import build_context
from infersight.api.dashboard import shared
from infersight.api.dashboard.context import parse_context
from infersight.api.dashboard.routes import VIEWS, _render
from infersight.api.dashboard.views import incident, slo
from infersight.api.settings import ApiSettings
from infersight.storage import incidents, slo_store
from infersight.storage.engine import create_store_engine

RANGES: Final = ("default", "1h", "24h", "7d", "30d")


def digests(url: str, now: datetime) -> dict[str, str]:
    engine = create_store_engine(url)
    try:
        app = build_context(
            ApiSettings(insecure_no_auth=True, run_jobs=False), engine, clock=lambda: now
        )
        app.evaluator.run(now)
        pages: list[tuple[str, Any, str, dict[str, str], str]] = [
            (view.NAME, view.page, view.DEFAULT_RANGE, {}, f"{view.NAME}.html") for view in VIEWS
        ]
        newest = incidents.list_incidents(engine, "all", 1)
        if newest:
            pages.append(("incident", incident.page, incident.DEFAULT_RANGE,
                          {"incident_id": str(newest[0].id)}, incident.TEMPLATE))  # fmt: skip
        specs = slo_store.list_slos(engine)
        if specs:
            pages.append(("slo", slo.page, slo.DEFAULT_RANGE, {"slo_name": specs[0].name},
                          slo.TEMPLATE))  # fmt: skip
        out = {}
        for name, build, default, extra, template in pages:
            for span in RANGES:
                query = dict(extra) if span == "default" else {**extra, "range": span}
                ctx = parse_context(query, now, app.settings.max_query_days, default)
                for run in ("cold", "warm"):
                    data = build(app, ctx, query)
                    values = {"ctx": ctx, "menus": shared.menus(app, ctx), "page": name,
                              "auth_on": False, "role": "admin", **data}  # fmt: skip
                    html = _render(template, elapsed_ms=1.0, stale_note="", **values).body
                    out[f"{name} {span} {run}"] = hashlib.sha256(bytes(html)).hexdigest()
        return out
    finally:
        engine.dispose()


if __name__ == "__main__":
    print(json.dumps(digests(sys.argv[1], datetime.fromisoformat(sys.argv[2]))))

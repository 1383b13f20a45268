"""``/docs`` groups the operations by area: every operation of the OpenAPI document carries
exactly one tag (none falls under "default"), and every tag used is declared with a
description (issue 35, item 11)."""

from __future__ import annotations

from collections.abc import Callable

from infersight.api.openapi import TAGS
from tests.api.conftest import ADMIN_TOKEN, Api


def test_every_operation_has_one_declared_tag(make_api: Callable[..., Api]):
    document = make_api(api_tokens=f"admin:{ADMIN_TOKEN}").get("/openapi.json").json()
    declared = {t["name"]: t.get("description") for t in document.get("tags", [])}
    assert list(declared) == [name for name, _ in TAGS]
    assert all(declared.values())
    used: dict[str, set[str]] = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            name = f"{method.upper()} {path}"
            tags = operation.get("tags", [])
            assert len(tags) == 1, f"{name}: {tags}"
            assert tags[0] in declared, f"{name}: {tags[0]} is not declared"
            used.setdefault(tags[0], set()).add(name)
    # The areas a reader looks for, with their operations under them.
    assert "GET /api/v1/latency" in used["queries"]
    assert "PUT /api/v1/slos/{name}" in used["slos"]
    assert "POST /api/v1/silences" in used["incidents"]
    assert "GET /api/v1/scaling/keda/{model}" in used["scaling"]
    assert "POST /api/v1/ingest" in used["ingest"]
    assert used["health"] == {"GET /healthz"}
    assert set(used) == set(declared)

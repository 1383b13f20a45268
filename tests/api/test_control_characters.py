"""No control character reaches a route (#32): a NUL (or any other control character, which no
label, name or value can hold) in a path, a query parameter, a form field or a body document's
strings is answered 400 in the error shape (the dashboard's page under ``/ui/``), on both
stores; and a weekly report's week whose window cannot be represented is a 400, not a 500."""

from __future__ import annotations

import json
import re

import pytest

from tests.api.conftest import Api

#: Every request the issue found answered 500 on PostgreSQL, and their kin.
_API_GETS = [
    "/api/v1/latency?instance=%00",
    "/api/v1/throughput?instance=%00",
    "/api/v1/breakdown?instance=%00",
    "/api/v1/cost?model=a%00b",
    "/api/v1/slos/a%00b",
    "/api/v1/latency?instance=x%1Fy",
    "/api/v1/latency?instance=%7F",
    "/api/v1/latency?in%00stance=x",
]
_UI_GETS = [
    "/ui/latency?instance=%00",
    "/ui/overview?instance=%00",
    "/ui/overview?model=%0A",
]


def _refused(response, name: str | None = None) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert "control characters" in error["message"]
    if name is not None:
        assert error["details"]["name"] == name
    return error


@pytest.mark.parametrize("url", _API_GETS)
def test_a_control_character_in_a_query_or_path_is_refused(api: Api, url: str):
    _refused(api.get(url))


@pytest.mark.parametrize("url", _UI_GETS)
def test_a_control_character_on_a_dashboard_page_gets_the_error_page(api: Api, url: str):
    response = api.get(url)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "control characters" in response.text


def test_the_refusal_names_the_parameter(api: Api):
    error = _refused(api.get("/api/v1/latency?instance=%00"), "instance")
    assert error["details"]["in"] == "query parameter"
    assert _refused(api.get("/api/v1/slos/a%00b"))["details"] == {"in": "path"}


def test_a_control_character_in_a_json_body_string_is_refused(api: Api):
    body = {"matchers": {"model": "a\u0000b"}, "duration_s": 600, "comment": "x"}
    error = _refused(api.request("POST", "/api/v1/silences", json=body), "matchers.model")
    assert error["details"]["in"] == "body"
    key = {"matchers": {"mo\u0001del": "a"}, "duration_s": 600}
    _refused(api.request("POST", "/api/v1/silences", json=key), "matchers")
    raw = json.dumps(body).encode()  # the same with no content type: read as JSON, as FastAPI
    _refused(api.request("POST", "/api/v1/silences", content=raw))


def test_line_breaks_in_a_body_document_are_text_not_refused(api: Api):
    document = {
        "apiVersion": "infersight/v1",
        "kind": "SLO",
        "metadata": {"name": "lines", "description": "two\nlines\tand a tab"},
        "spec": {
            "sli": {"latency": {"metric": "ttft", "threshold": "150ms"}},
            "window": "28d",
            "objective": "99%",
        },
    }
    response = api.put("/api/v1/slos/lines", json=document)
    assert response.status_code == 201, response.text


def test_a_nul_escaped_in_a_yaml_document_is_refused(api: Api):
    slo = 'apiVersion: infersight/v1\nkind: SLO\nmetadata: {name: "a\\0b"}\n'
    headers = {"content-type": "application/yaml"}
    _refused(api.put("/api/v1/slos/ab", content=slo, headers=headers), "metadata.name")
    current = api.get("/api/v1/cost/model").json()
    current["spec"]["currency"] = "US\u0000"
    model = json.dumps(current).replace("\\u0000", "\\0")  # YAML's escape for NUL
    response = api.put("/api/v1/cost/model", content=model, headers=headers)
    assert response.status_code == 400, response.text


def test_a_control_character_in_a_form_field_is_refused(api: Api):
    response = api.request(
        "POST",
        "/ui/login",
        content=b"token=abc%00&next=/ui/overview",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    assert "control characters" in response.text


def test_clean_requests_pass_the_guard(api: Api):
    assert api.get("/api/v1/latency?instance=gpu-0%20a").status_code == 200
    assert api.get("/api/v1/slos/absent").status_code == 404
    assert api.get("/ui/overview?model=m").status_code == 200


@pytest.mark.parametrize("week", ["9999-W52", "9999-W53"])
def test_a_week_past_the_last_representable_is_a_400(api: Api, week: str):
    for partial in ("true", "false"):
        response = api.request("POST", f"/api/v1/reports/weekly?week={week}&partial={partial}")
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_input"
        assert week in error["message"] or "no such ISO week" in error["message"]


def test_the_last_representable_week_has_simply_not_started(api: Api):
    response = api.request("POST", "/api/v1/reports/weekly?week=9999-W51&partial=true")
    assert response.status_code == 400
    assert "has not started" in response.json()["error"]["message"]


def _request_strings(document: dict) -> list[tuple[str, dict, str]]:
    """Every string schema of a request in ``document``: (where, schema, kind)."""
    schemas = document["components"]["schemas"]
    found: list[tuple[str, dict, str]] = []

    def walk(schema, where: str, kind: str, seen: frozenset[str]) -> None:
        if isinstance(schema, list):
            for item in schema:
                walk(item, where, kind, seen)
            return
        if not isinstance(schema, dict):
            return
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            if name not in seen:
                walk(schemas[name], f"{where}>{name}", kind, seen | {name})
            return
        # A binary body (central ingest's batch) is bytes, not text: no character rule.
        text = schema.get("format") != "binary"
        if schema.get("type") == "string" and "enum" not in schema and text:
            found.append((where, schema, kind))
        for name, item in (schema.get("properties") or {}).items():
            walk(item, f"{where}.{name}", kind, seen)
        for key in ("items", "additionalProperties", "anyOf"):
            walk(schema.get(key), where, kind, seen)

    for path, item in document["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                name = f"{method} {path} {parameter['name']}"
                walk(parameter["schema"], name, "parameter", frozenset())
            for media in operation.get("requestBody", {}).get("content", {}).values():
                walk(media["schema"], f"{method} {path} body", "body", frozenset())
    return found


def test_the_openapi_document_says_no_request_string_holds_a_control_character(api: Api):
    strings = _request_strings(api.get("/openapi.json").json())
    assert len(strings) > 50
    for where, schema, kind in strings:
        # ECMA's $ is the end of the text, where Python's admits a newline before it.
        pattern = re.compile(re.sub(r"\$(?=\||$)", r"\\Z", schema["pattern"]))
        for control in ("\x00", "\x1b", "\x1f"):
            assert not pattern.search(f"1{control}"), where
        if kind == "parameter":
            assert not pattern.search("1\n"), where
            assert not pattern.search("1\x7f"), where


def test_the_openapi_document_says_when_a_token_check_is_answered_429(make_api):
    document = make_api(api_tokens="read:read-token-0123456789").get("/openapi.json").json()
    answers = document["paths"]["/api/v1/latency"]["get"]["responses"]
    assert "Retry-After" in answers["429"]["headers"]

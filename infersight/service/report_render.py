"""Renderings of a weekly cost report's JSON body: CSV, HTML (Jinja2 template
``dashboards/reports/weekly.html`` with the charts drawn as inline SVG; no scripts, no CDN),
the one-line summary and the Slack message.

Every number cell of the HTML and every CSV field holds the exact value of the JSON (decimal
strings as they are, floats through ``repr``), so a reader can check the report against
``GET /api/v1/cost``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from jinja2 import Environment, PackageLoader, select_autoescape

from infersight.core.savings import Category
from infersight.service.cost_view import unit_cost_text

CSV_COLUMNS: Final = (
    "section",
    "date",
    "model",
    "instance",
    "cost",
    "idle_cost",
    "input_cost",
    "output_cost",
    "gpu_hours",
    "idle_gpu_hours",
    "energy_kwh",
    "requests",
    "tokens",
    "input_tokens",
    "output_tokens",
    "good_tokens",
    "good_basis",
    "cost_per_million_tokens",
    "cost_per_million_input_tokens",
    "cost_per_million_output_tokens",
    "cost_per_million_good_tokens",
    "tokens_per_joule",
    "utilisation",
    "group",
    "usage_cost",
)


def _csv_row(section: str, day: str, line: Mapping[str, Any]) -> list[str]:
    labels, per = line["labels"], line["cost_per_million_tokens"]
    values: dict[str, Any] = {
        "section": section,
        "date": day,
        "model": labels.get("model", ""),
        "instance": labels.get("instance", ""),
        **{k: line[k] for k in CSV_COLUMNS if k in line},
        "cost_per_million_tokens": per["total"],
        "cost_per_million_input_tokens": per["input"],
        "cost_per_million_output_tokens": per["output"],
        "cost_per_million_good_tokens": per["good"],
    }
    return _cells(values)


def _attribution_row(dimension: str, share: Mapping[str, Any]) -> list[str]:
    """One tenant's, team's or workload's share of the week (``attribution_<dimension>``):
    ``group`` the value as shown (``(unattributed)``, ``(other)``), ``cost`` its allocation
    (idle included), ``idle_cost`` its idle share and ``usage_cost`` the rest."""
    goodput = share["goodput"]
    values: dict[str, Any] = {
        "section": f"attribution_{dimension}",
        "group": share["label"],
        "cost": share["allocation"],
        "idle_cost": share["idle"],
        "usage_cost": share["usage"],
        "gpu_hours": share["gpu_hours"],
        "requests": share["requests"],
        "tokens": share["input_tokens"] + share["output_tokens"],
        "input_tokens": share["input_tokens"],
        "output_tokens": share["output_tokens"],
        "good_tokens": goodput["good_tokens"],
        "good_basis": goodput["basis"],
        "cost_per_million_tokens": share["cost_per_million_tokens"],
        "cost_per_million_good_tokens": goodput["cost_per_million_good_tokens"],
    }
    return _cells(values)


def _cells(values: Mapping[str, Any]) -> list[str]:
    """``values`` in ``CSV_COLUMNS`` order, a column it lacks empty. Floats are written with
    repr so that they read back to the same value."""
    cells = [values.get(k) for k in CSV_COLUMNS]
    return ["" if v is None else repr(v) if isinstance(v, float) else str(v) for v in cells]


def render_csv(body: Mapping[str, Any]) -> str:
    """One row per group: the week by model and by instance, each day, the total, and who
    spent it (each tenant's, team's and workload's share, when the report has them)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for section in ("by_model", "by_instance"):
        for line in body[section]["groups"]:
            writer.writerow(_csv_row(section, "", line))
    for day in body["daily"]:
        writer.writerow(_csv_row("daily", day["date"], day["total"]))
    writer.writerow(_csv_row("total", "", body["by_model"]["total"]))
    for dimension, attributed in (body.get("attribution") or {}).items():
        for share in attributed["shares"]:
            writer.writerow(_attribution_row(dimension, share))
    return out.getvalue()


_ENV: Environment | None = None


def _environment() -> Environment:
    global _ENV  # noqa: PLW0603 - one template environment per process, built on first use
    if _ENV is None:
        _ENV = Environment(
            loader=PackageLoader("infersight.dashboards", "reports"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        _ENV.filters["money"] = lambda v: "–" if v is None else f"{Decimal(v):,.2f}"
        _ENV.filters["unit"] = unit_cost_text
        _ENV.filters["pct"] = lambda v: "–" if v is None else f"{v:.0%}"
        _ENV.filters["num"] = lambda v: "–" if v is None else f"{v:,}"
        _ENV.filters["label"] = lambda labels: (
            ", ".join(v or "(unattributed)" for v in labels.values()) or "all"
        )
        _ENV.filters["stamp"] = stamp
        _ENV.filters["shorten"] = shorten
    return _ENV


def stamp(text: str | None) -> str:
    """An RFC 3339 time of the body as a reader wants it: ``2026-12-06 16:32 UTC`` (to the
    minute; the exact value stays in the JSON and the element's ``datetime``)."""
    if not text:
        return "–"
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def shorten(text: str, most: int) -> str:
    """``text`` of at most ``most`` characters, cut in its middle (the two ends of a model id or
    an instance name are what tell them apart)."""
    if len(text) <= most:
        return text
    head = (most - 1) // 2
    return text[:head] + "…" + text[len(text) - (most - 1 - head) :]


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    text: str


def _bars(items: list[tuple[str, float, str]]) -> list[Bar]:
    return [Bar(label, max(value, 0.0), text) for label, value, text in items]


def charts(body: Mapping[str, Any]) -> dict[str, list[Bar]]:
    """The four charts' bars (drawn as SVG by the template)."""
    cur = body["currency"]
    per_model = [
        (g["labels"]["model"] or "(unattributed)", float(v), unit_cost_text(v, cur))
        for g in body["by_model"]["groups"]
        if (v := g["cost_per_million_tokens"]["total"]) is not None
    ]
    return {
        "daily_cost": _bars(
            [
                (d["date"][5:], float(d["total"]["cost"]), f"{Decimal(d['total']['cost']):,.2f}")
                for d in body["daily"]
            ]
        ),
        "cost_per_million": _bars(per_model),
        "utilisation": _bars(
            [
                (i["instance"], i["utilisation"], f"{i['utilisation']:.0%}")
                for i in body["by_instance"]["instances"]
                if i["utilisation"] is not None
            ]
        ),
        "idle_cost": _bars(
            [
                (i["instance"], float(i["idle_cost"]), f"{Decimal(i['idle_cost']):,.2f}")
                for i in body["by_instance"]["instances"]
            ]
        ),
    }


def render_html(body: Mapping[str, Any]) -> str:
    """A self-contained page: no scripts, no CDN, charts as inline SVG."""
    template = _environment().get_template("weekly.html")
    return template.render(
        report=body, charts=charts(body), categories=[c.name.lower() for c in Category]
    )


def summary_line(body: Mapping[str, Any]) -> str:
    s, cur = body["summary"], body["currency"]
    per = s["cost_per_million_tokens"]
    good = s["cost_per_million_good_tokens"]
    title = body.get("title") or body["period"]
    if body.get("notice"):
        return f"Week {title}: {body['notice']}"
    text = (
        f"Week {title}: {Decimal(s['cost']):,.2f} {cur} for {s['tokens']:,} tokens"
        f" ({'n/a' if per is None else unit_cost_text(per)} {cur} per million,"
        f" good {'n/a' if good is None else unit_cost_text(good)});"
        f" idle {Decimal(s['idle_cost']):,.2f} {cur}"
    )
    if body["savings"]:
        top = body["savings"][0]
        saving = Decimal(top["estimated_saving"])
        text += f"; first saving: {top['kind']} on {top['scope']} (~{saving:,.2f} {cur})"
    if body["cost_model"]["example_prices"]:
        text += " [example prices]"
    return text


def slack_payload(body: Mapping[str, Any], link: str) -> dict[str, Any]:
    text = summary_line(body)
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": f"Cost report {body['period']}"[:150]},
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
    ]
    savings = [
        f"{s['rank']}. *{s['kind']}* ({s['category']}) on `{s['scope']}`: "
        f"~{Decimal(s['estimated_saving']):,.2f} {body['currency']}"
        for s in body["savings"][:5]
    ]
    if savings:
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(savings)[:3000]}}
        )
    if link:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open report"},
                        "url": link,
                    }
                ],
            }
        )
    return {"text": text[:3000], "blocks": blocks}

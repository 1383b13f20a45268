"""View-models of the Cost, Baselines and Capacity pages.

They read modules that land separately (cost accounting, baselines, capacity planning); until
a page's source is there, the page says so plainly instead of showing empty charts.
"""

from __future__ import annotations

from typing import Any

from api.dashboard_context import Context


def cost_summary(_state: Any, _ctx: Context) -> dict[str, Any] | None:
    """Fleet cost per million tokens over the range, or ``None`` when cost is not configured."""
    return None


def cost(_state: Any, _ctx: Context) -> dict[str, Any]:
    return {"available": False, "reason": "Cost accounting is not configured on this server."}


def baselines(_state: Any, _ctx: Context, _name: str) -> dict[str, Any]:
    return {"available": False, "reason": "No baselines are stored yet."}


def capacity(_state: Any, _ctx: Context) -> dict[str, Any]:
    return {"available": False, "reason": "No load-test runs are stored yet."}

"""The cost of a window under a cost model (``cost``: what ``GET /api/v1/cost``, the Cost and
Overview pages and ``infersight cost show`` price), and the JSON form of cost answers, shared by
``GET /api/v1/cost``, the CLI and the reports.

Money, hours and kWh are decimal strings with six places (never rounded through a binary
float); ratios (utilisation, tokens per joule) are numbers. Good tokens say what they were
measured against (``good_basis``: ``slo``, ``cost_model`` or ``mixed``) and, in
``good_tokens.rules``, which limits held for which series (``core.goodput``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from infersight.core.cost import CostLine, CostModel, CostResult, InstanceCost, Money, quantize
from infersight.core.goodput import GoodBasis, GoodLimits, GoodRule, basis_of
from infersight.core.query import Selector
from infersight.core.slo import SloSpec
from infersight.core.timestamps import iso
from infersight.core.window import Resolution, Window

if TYPE_CHECKING:
    from infersight.storage.seam import Store

#: The most models a rule names in words (the API lists them all).
NAMED_MODELS = 3


def cost(
    store: Store,
    window: Window,
    model: CostModel,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    *,
    finest: Resolution,
    slos: Sequence[SloSpec] | None = None,
) -> CostResult:
    """What ``window`` cost under ``model`` per group of ``group_by``, with each instance's
    cost (``finest``: the finest rollups retention keeps for the window; ``slos``: the stored
    SLOs good tokens are held to, when the caller has read them already)."""
    return store.cost.cost(window, model, selector, group_by, finest=finest, slos=slos)


def idle_method(store: Store, floor: float, window: Window) -> str:
    """How the idle GPU time of ``window`` under the utilisation ``floor`` is measured: from
    raw samples, or ``interpolated`` within rollup bins."""
    return store.cost.idle_method(floor, window)


def amount(value: Decimal) -> str:
    """A Decimal quantity as the API writes it: a string with six decimal places."""
    return str(quantize(value))


def unit_cost_text(value: str | Decimal | None, currency: str = "", digits: int = 3) -> str:
    """A unit cost (per million tokens) for people: two places from 1 up, else ``digits``
    significant digits (``0.0042``), so that a small unit cost never shows as 0.00; the
    currency after it when given; ``–`` for none."""
    if value is None:
        return "–"
    number = Decimal(value)
    if number == 0 or abs(number) >= 1:
        text = f"{number:,.2f}"
    else:
        places = min(6, max(2, digits - 1 - abs(number).adjusted()))
        text = f"{number:.{places}f}"
    return f"{text} {currency}" if currency else text


def _money(value: Money | None) -> str | None:
    return None if value is None else amount(value.amount)


def line_dict(line: CostLine) -> dict[str, Any]:
    return {
        "labels": dict(line.labels),
        "requests": line.requests,
        "tokens": line.tokens,
        "input_tokens": line.input_tokens,
        "output_tokens": line.output_tokens,
        "good_tokens": line.good_tokens,
        "good_basis": line.good_basis,
        "gpu_hours": amount(line.gpu_hours),
        "idle_gpu_hours": amount(line.idle_gpu_hours),
        "energy_kwh": amount(line.energy_kwh),
        "cost": amount(line.cost),
        "input_cost": amount(line.input_cost),
        "output_cost": amount(line.output_cost),
        "idle_cost": amount(line.idle_cost),
        "cost_per_million_tokens": {
            "total": _money(line.cost_per_million_tokens),
            "input": _money(line.cost_per_million_input_tokens),
            "output": _money(line.cost_per_million_output_tokens),
            "good": _money(line.cost_per_million_good_tokens),
        },
        "tokens_per_joule": line.tokens_per_joule,
        "utilisation": line.utilisation,
    }


def instance_dict(instance: InstanceCost) -> dict[str, Any]:
    return {
        "instance": instance.instance,
        "gpus": instance.gpus,
        "gpu_names": list(instance.gpu_names),
        "gpu_hours": amount(instance.gpu_hours),
        "idle_gpu_hours": amount(instance.idle_gpu_hours),
        "energy_kwh": amount(instance.energy_kwh),
        "gpu_cost": amount(instance.gpu_cost.amount),
        "energy_cost": amount(instance.energy_cost.amount),
        "overhead_cost": amount(instance.overhead_cost.amount),
        "cost": amount(instance.total.amount),
        "idle_cost": amount(instance.idle_cost.amount),
        "utilisation": instance.utilisation,
        "served": instance.served,
        "unpriced_gpus": list(instance.unpriced),
        # Issue 34: the fractions of GPUs the instance ran on (its GPU-hours and cost are
        # those fractions of the parent GPUs'); empty for whole GPUs.
        "gpu_slices": [
            {
                "kind": s.kind,
                "profile": s.profile,
                "fraction": f"{s.fraction.numerator}/{s.fraction.denominator}",
                "fraction_decimal": amount(s.fraction_decimal),
                "text": s.describe(),
            }
            for s in instance.slices
        ],
    }


def cost_dict(result: CostResult) -> dict[str, Any]:
    """The JSON answer of ``GET /api/v1/cost`` (the weekly report embeds the same shape)."""
    return {
        "start": iso(result.window.start),
        "end": iso(result.window.end),
        "currency": result.currency,
        "cost_model": {"name": result.model_name, "example_prices": result.example_prices},
        "group_by": list(result.group_by),
        "groups": [line_dict(g) for g in result.groups],
        "total": line_dict(result.total),
        "instances": [instance_dict(i) for i in result.instances],
        "unpriced_gpus": list(result.unpriced),
        "unmetered_instances": list(result.unmetered),
        "good_tokens_method": "exact" if result.good_tokens_exact else "partial",
        "good_tokens": {
            "basis": good_basis(result),
            "method": "exact" if result.good_tokens_exact else "partial",
            "rules": [rule_dict(rule, series) for rule, series in result.good_rules],
            "text": good_text(result),
        },
    }


def good_basis(result: CostResult) -> str:
    """``slo``, ``cost_model`` or ``mixed``: what the result's good tokens were measured against."""
    return basis_of(rule.basis.value for rule, _ in result.good_rules)


def rule_dict(rule: GoodRule, series: tuple[Mapping[str, str], ...]) -> dict[str, Any]:
    return {
        "basis": rule.basis.value,
        "slos": list(rule.slos),
        "limits": rule.limits.as_dict(),
        "series": len(series),
        "models": sorted({s["model"] for s in series}),
    }


def _seconds(value: float) -> str:
    return f"{value * 1e3:.4g} ms" if value < 1 else f"{value:.4g} s"


def limits_text(limits: GoodLimits) -> str:
    """``TTFT ≤ 500 ms, TPOT ≤ 35 ms``."""
    names = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "end-to-end"}
    return ", ".join(f"{names[field]} ≤ {_seconds(value)}" for field, value in limits.items())


def _models(series: tuple[Mapping[str, str], ...]) -> str:
    models = sorted({s["model"] or "(no model)" for s in series})
    shown = ", ".join(models[:NAMED_MODELS])
    return shown + (f" and {len(models) - NAMED_MODELS} more" if len(models) > NAMED_MODELS else "")


def good_text(result: CostResult) -> str:
    """What "good" meant in ``result``, in words (the Cost page and the weekly report)."""
    slo = [(r, s) for r, s in result.good_rules if r.basis is GoodBasis.SLO]
    fallback = [(r, s) for r, s in result.good_rules if r.basis is GoodBasis.COST_MODEL]
    parts = [f"{', '.join(r.slos)} ({limits_text(r.limits)}) for {_models(s)}" for r, s in slo]
    text = "tokens of requests within their SLO: " + "; ".join(parts) if parts else ""
    for rule, series in fallback:
        limits = f"the cost model's goodRequest limits ({limits_text(rule.limits)})"
        if text:
            text += f"; no latency SLO covers {_models(series)}: within {limits}"
        else:
            text = f"tokens of requests within {limits}: no latency SLO covers these requests"
    return text or "no requests in this range"

"""Savings opportunities: where a window's money went to waste, ordered as a performance
engineer would work through them.

Free configuration changes come first (consolidating under-used instances, batching, queue
limits, prefix caching), then model-level changes that need engineering but no new hardware
(quantisation, compilation), then hardware. Within a category the larger saving comes
first. Every opportunity carries the measured evidence that triggered it and an estimated
saving over the same window; the estimates are deliberately conservative and each rule's
assumption is written next to it (``RULES``), so an operator can judge them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum
from typing import Final

from infersight.core.cost import ZERO, quantize

# What other modules use (and the types its answers carry); the tuning constants and
# helpers left out are this module's own.
__all__ = ["RULES", "Category", "Evidence", "InstanceFacts", "Opportunity", "find_savings"]

#: Utilisation an instance is consolidated towards (headroom for bursts stays).
TARGET_UTILISATION: Final = 0.6
UNDER_USED: Final = 0.3
#: Batching: the scheduler keeps requests waiting while the GPU has headroom.
BATCH_WAITING: Final = 1.0
BATCH_UTILISATION: Final = 0.6
#: Queue limits: share of tokens that met the latency objective below this.
GOOD_SHARE: Final = 0.95
#: Prefix caching: prefill holds this share of GPU time, and the cache hits below the floor.
PREFILL_SHARE: Final = 0.25
PREFIX_HIT_FLOOR: Final = 0.1
PREFIX_SHARED: Final = Decimal("0.3")
"""Assumed share of prompt tokens that are a shared prefix (system prompts, few-shot)."""
#: Quantisation: decode (memory-bandwidth bound) holds this share of GPU time.
DECODE_SHARE: Final = 0.5
QUANTISED_SPEEDUP: Final = Decimal("1.5")
"""Conservative decode speed-up of 8-bit weights (published INT8/FP8 results are 1.8-2x)."""
COMPILED_SPEEDUP: Final = Decimal("1.2")
"""Conservative speed-up of graph compilation (TensorRT-style engines report 1.3-2x)."""
COMPILED_ENGINES: Final = frozenset({"trtllm"})


class Category(IntEnum):
    """In the order a performance engineer works: free first, hardware last."""

    CONFIGURATION = 1
    MODEL = 2
    HARDWARE = 3


@dataclass(frozen=True, slots=True)
class Evidence:
    signal: str
    value: float
    threshold: float


@dataclass(frozen=True, slots=True)
class Opportunity:
    kind: str
    category: Category
    scope: str
    action: str
    evidence: tuple[Evidence, ...]
    estimated_saving: Decimal
    assumption: str


@dataclass(frozen=True, slots=True)
class InstanceFacts:
    """What the rules know about one instance over the window (amounts in one currency)."""

    instance: str
    model: str
    engine: str
    cost: Decimal
    idle_cost: Decimal
    input_cost: Decimal
    output_cost: Decimal
    gpu_cost: Decimal
    price_per_gpu_hour: Decimal | None
    utilisation: float | None
    served: bool
    tokens: int = 0
    good_tokens: int = 0
    prefill_share: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    prefix_cache_hit_ratio: float | None = None

    @property
    def busy_cost(self) -> Decimal:
        return self.cost - self.idle_cost

    @property
    def good_share(self) -> float | None:
        return self.good_tokens / self.tokens if self.tokens else None


def _ratio(value: float) -> Decimal:
    return Decimal(f"{min(max(value, 0.0), 1.0):.6f}")


def _consolidation(facts: Sequence[InstanceFacts]) -> list[Opportunity]:
    out = []
    for f in facts:
        if not f.served and f.cost > 0:
            out.append(
                Opportunity(
                    "consolidation",
                    Category.CONFIGURATION,
                    f.instance,
                    f"{f.instance} served no requests: scale it to zero or give it work",
                    (Evidence("requests", 0.0, 1.0), Evidence("idle_cost", float(f.cost), 0.0)),
                    quantize(f.cost),
                    "the whole cost of an instance that did no work",
                )
            )
    by_model: dict[str, list[InstanceFacts]] = defaultdict(list)
    for f in facts:
        if f.served and f.utilisation is not None:
            by_model[f.model].append(f)
    for model, group in sorted(by_model.items()):
        mean = sum(f.utilisation or 0.0 for f in group) / len(group)
        if len(group) < 2 or mean >= UNDER_USED:
            continue
        needed = max(1, math.ceil(len(group) * mean / TARGET_UTILISATION))
        spare = len(group) - needed
        if spare <= 0:
            continue
        cost = sum((f.cost for f in group), ZERO)
        out.append(
            Opportunity(
                "consolidation",
                Category.CONFIGURATION,
                f"model={model}",
                f"serve {model} on {needed} instance(s) instead of {len(group)}",
                (
                    Evidence("utilisation_mean", mean, UNDER_USED),
                    Evidence("instances", float(len(group)), float(needed)),
                ),
                quantize(cost * Decimal(spare) / Decimal(len(group))),
                f"the same work at {TARGET_UTILISATION:.0%} utilisation on fewer instances",
            )
        )
    return out


def _batching(f: InstanceFacts) -> Opportunity | None:
    waiting, util = f.requests_waiting, f.utilisation
    if not f.served or waiting is None or util is None:
        return None
    if waiting < BATCH_WAITING or util >= BATCH_UTILISATION:
        return None
    saving = f.busy_cost * (1 - _ratio(util / 0.7))
    return Opportunity(
        "batching",
        Category.CONFIGURATION,
        f.instance,
        "raise the batch limits (max_num_seqs / max_num_batched_tokens): requests wait "
        "while the GPU has headroom",
        (
            Evidence("requests_waiting_mean", waiting, BATCH_WAITING),
            Evidence("utilisation", util, BATCH_UTILISATION),
            *(
                [Evidence("requests_running_mean", f.requests_running, 0.0)]
                if f.requests_running is not None
                else []
            ),
        ),
        quantize(saving),
        "the same tokens at 70 % utilisation need proportionally less GPU time",
    )


def _queue_limits(f: InstanceFacts) -> Opportunity | None:
    good = f.good_share
    if good is None or good >= GOOD_SHARE:
        return None
    evidence = [Evidence("good_token_share", good, GOOD_SHARE)]
    if f.requests_waiting is not None:
        evidence.append(Evidence("requests_waiting_mean", f.requests_waiting, 0.0))
    return Opportunity(
        "queue_limits",
        Category.CONFIGURATION,
        f.instance,
        "bound the queue (admission control): shed load early instead of serving it late",
        tuple(evidence),
        quantize(f.busy_cost * (1 - _ratio(good))),
        "the cost of tokens that missed the latency objective",
    )


def _prefix_caching(f: InstanceFacts) -> Opportunity | None:
    share, hit = f.prefill_share, f.prefix_cache_hit_ratio
    if share is None or share < PREFILL_SHARE or (hit is not None and hit >= PREFIX_HIT_FLOOR):
        return None
    evidence = [Evidence("prefill_share", share, PREFILL_SHARE)]
    if hit is not None:
        evidence.append(Evidence("prefix_cache_hit_ratio", hit, PREFIX_HIT_FLOOR))
    return Opportunity(
        "prefix_caching",
        Category.CONFIGURATION,
        f.instance,
        "enable prefix caching: prefill is a large share of GPU time and the cache rarely hits",
        tuple(evidence),
        quantize(f.input_cost * PREFIX_SHARED),
        f"{PREFIX_SHARED:.0%} of prompt tokens are a shared prefix (check the hit ratio after)",
    )


def _model_level(facts: Sequence[InstanceFacts]) -> list[Opportunity]:
    out = []
    by_model: dict[str, list[InstanceFacts]] = defaultdict(list)
    for f in facts:
        if f.served:
            by_model[f.model].append(f)
    for model, group in sorted(by_model.items()):
        output = sum((f.output_cost for f in group), ZERO)
        busy = sum((f.busy_cost for f in group), ZERO)
        total = sum((f.input_cost + f.output_cost for f in group), ZERO)
        decode = float(output / total) if total else 0.0
        if decode >= DECODE_SHARE:
            out.append(
                Opportunity(
                    "quantisation",
                    Category.MODEL,
                    f"model={model}",
                    f"quantise {model}'s weights to 8 bits (FP8/INT8) and validate its quality",
                    (Evidence("decode_cost_share", decode, DECODE_SHARE),),
                    quantize(output * (1 - 1 / QUANTISED_SPEEDUP)),
                    f"decode is memory-bound; 8-bit weights speed it up {QUANTISED_SPEEDUP}x",
                )
            )
        engines = {f.engine for f in group}
        if busy > 0 and not engines & COMPILED_ENGINES:
            out.append(
                Opportunity(
                    "compilation",
                    Category.MODEL,
                    f"model={model}",
                    f"compile {model}'s graph (CUDA graphs, TensorRT-LLM, torch.compile)",
                    (Evidence("compiled_engine", 0.0, 1.0),),
                    quantize(busy * (1 - 1 / COMPILED_SPEEDUP)),
                    f"a compiled engine serves the same tokens {COMPILED_SPEEDUP}x faster",
                )
            )
    return out


def _hardware(facts: Sequence[InstanceFacts], cheapest: Decimal | None) -> list[Opportunity]:
    out: list[Opportunity] = []
    if cheapest is None:
        return out
    for f in facts:
        price, util = f.price_per_gpu_hour, f.utilisation
        if not f.served or price is None or util is None or price <= cheapest:
            continue
        if util >= UNDER_USED:
            continue
        out.append(
            Opportunity(
                "hardware",
                Category.HARDWARE,
                f.instance,
                f"move {f.instance} to a cheaper GPU ({cheapest}/h) if the model fits its memory",
                (
                    Evidence("utilisation", util, UNDER_USED),
                    Evidence("price_per_gpu_hour", float(price), float(cheapest)),
                ),
                quantize(f.gpu_cost * (1 - cheapest / price)),
                "the same GPU-hours at the cheapest priced GPU; under-used GPUs rarely need "
                "the faster one",
            )
        )
    return out


def find_savings(
    facts: Sequence[InstanceFacts], cheapest_price: Decimal | None = None
) -> list[Opportunity]:
    """Every opportunity the rules find, configuration first, then model, then hardware;
    larger savings first within a category. Opportunities that save nothing are dropped."""
    found = _consolidation(facts)
    for f in facts:
        for rule in (_batching, _queue_limits, _prefix_caching):
            opportunity = rule(f)
            if opportunity is not None:
                found.append(opportunity)
    found += _model_level(facts)
    found += _hardware(facts, cheapest_price)
    found = [o for o in found if o.estimated_saving > 0]
    return sorted(found, key=lambda o: (o.category, -o.estimated_saving, o.kind, o.scope))


RULES: Final = {
    "consolidation": "an instance served nothing, or a model's instances average under "
    f"{UNDER_USED:.0%} utilisation",
    "batching": f"requests wait (mean ≥ {BATCH_WAITING:g}) while utilisation is under "
    f"{BATCH_UTILISATION:.0%}",
    "queue_limits": f"under {GOOD_SHARE:.0%} of tokens met the latency objective",
    "prefix_caching": f"prefill holds ≥ {PREFILL_SHARE:.0%} of GPU time and the prefix cache "
    f"hits under {PREFIX_HIT_FLOOR:.0%} (or is not reported)",
    "quantisation": f"decode holds ≥ {DECODE_SHARE:.0%} of a model's cost",
    "compilation": "a model is served by an engine that does not compile its graph",
    "hardware": f"an instance under {UNDER_USED:.0%} utilisation runs on a GPU dearer than the "
    "cheapest priced one",
}

"""The spans a disaggregated prefill/decode proxy makes of one user request: llm-d's routing
sidecar (``llm-d-inference-scheduler`` / ``llm-d-router``, ``pkg/sidecar/proxy``).

It runs beside the decode instance and, for a request the scheduler gave a prefill endpoint,
sends the prompt to the prefill instance, then (or, for SGLang and Mooncake, at the same time)
to its own decode instance, whose response it streams back. Its spans, all carrying
``llm_d.pd_proxy.*`` attributes:

* the request: ``forward_request`` (SERVER; earlier releases: ``llm_d.pd_proxy.request``),
  ``llm_d.pd_proxy.disaggregation_used`` telling whether it was split;
* the prefill leg: ``prefill`` (INTERNAL; earlier: ``llm_d.pd_proxy.prefill``), with
  ``llm_d.pd_proxy.prefill_target`` (host:port of the prefill instance);
* the decode leg: ``decode`` (INTERNAL; earlier: ``llm_d.pd_proxy.decode``), the parent of the
  decode instance's own request span (vLLM's ``llm_request``).

Each becomes a ``StageFragment`` of a ``PD_STAGES`` kind (the prefill target as its
``detail``); ``collector.assembly.fold_disaggregated`` makes the user's request of them and
of the decode instance's record. The HTTP server span otelhttp wraps around them
(``llm_d.pd_proxy.POST /v1/…``) carries no ``llm_d.pd_proxy.*`` attribute and stays a link.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from infersight.collector.mapping.base import Skipped, StageFragment, stage_fragment
from infersight.collector.mapping.spans import SpanView, as_str
from infersight.core.records import MAX_LABEL_LEN

PREFIX: Final = "llm_d.pd_proxy."
#: Span name → P/D stage, current names and those of earlier releases.
STAGES: Final = {
    "forward_request": "pd_request",
    "llm_d.pd_proxy.request": "pd_request",
    "prefill": "pd_prefill",
    "llm_d.pd_proxy.prefill": "pd_prefill",
    "decode": "pd_decode",
    "llm_d.pd_proxy.decode": "pd_decode",
}
PREFILL_TARGET: Final = "llm_d.pd_proxy.prefill_target"


def claims(span: SpanView) -> bool:
    return span.name in STAGES and span.has_prefix(PREFIX)


def map_span(span: SpanView) -> StageFragment | Skipped:
    outcome = stage_fragment(span, STAGES[span.name])
    target = as_str(span.attributes.get(PREFILL_TARGET))[:MAX_LABEL_LEN]
    if target and isinstance(outcome, StageFragment):
        return dataclasses.replace(outcome, detail=target)
    return outcome

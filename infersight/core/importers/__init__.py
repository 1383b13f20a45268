"""Importers of other load testers' result files: each turns a parsed JSON document into a
``core.baseline.Baseline`` (pure: the caller reads and decodes the files).

``FORMATS`` names them; ``detect`` guesses the format of a document; ``parse`` dispatches.
A second, per-request document (vLLM keeps it inside the result with ``--save-detailed``;
LLMPerf's individual responses; AIPerf's ``profile_export.jsonl`` records; GuideLLM keeps
its ``requests`` in the report) gives the
baseline its distributions; without it a baseline has percentiles only.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from infersight.core.baseline import Baseline
from infersight.core.errors import InvalidInput
from infersight.core.importers import aiperf, guidellm, llmperf, vllm

FORMATS: Final = ("vllm", "llmperf", "aiperf", "guidellm")


def detect(doc: Any) -> str:
    """The format of a result document, or ``InvalidInput`` when it is none of them."""
    if isinstance(doc, Mapping):
        for name, module in (
            ("guidellm", guidellm),
            ("aiperf", aiperf),
            ("llmperf", llmperf),
            ("vllm", vllm),
        ):
            if module.looks_like(doc):
                return name
    raise InvalidInput(
        "not a vllm bench serve, LLMPerf summary, AIPerf export or GuideLLM report document",
        details={"formats": list(FORMATS)},
    )


def parse(
    doc: Any,
    *,
    name: str,
    created_at: datetime,
    fmt: str | None = None,
    description: str = "",
    samples: Any = None,
    benchmark: int | None = None,
) -> Baseline:
    """A baseline from a result document (``fmt`` guessed when ``None``; ``benchmark``: which
    benchmark of a GuideLLM report holding several)."""
    fmt = fmt or detect(doc)
    if fmt == "vllm":
        if samples is not None:
            raise InvalidInput("vllm keeps per-request values in the result (--save-detailed)")
        return vllm.parse(doc, name=name, created_at=created_at, description=description)
    if fmt == "llmperf":
        return llmperf.parse(
            doc, name=name, created_at=created_at, description=description, individual=samples
        )
    if benchmark is not None and fmt != "guidellm":
        raise InvalidInput("only a GuideLLM report holds several benchmarks to choose from")
    if fmt == "guidellm":
        if samples is not None:
            raise InvalidInput("guidellm keeps per-request values in the report")
        return guidellm.parse(
            doc, name=name, created_at=created_at, description=description, benchmark=benchmark
        )
    if fmt == "aiperf":
        return aiperf.parse(
            doc, name=name, created_at=created_at, description=description, records=samples
        )
    raise InvalidInput(f"unknown result format {fmt!r}", details={"formats": list(FORMATS)})

"""The engine-neutral view of one OTLP span that mappers read, and typed attribute access.

A ``SpanView`` is built from the protobuf ``Span`` once (``from_proto``); mappers never see
protobuf. Attribute readers return ``None`` for absent or unparseable values so that a mapper
can tell "not reported" from zero.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from infersight.core.records import MAX_LABEL_LEN

AttrValue = str | bool | int | float | bytes | tuple[Any, ...] | None

#: OTLP span status codes.
STATUS_UNSET: Final = 0
STATUS_OK: Final = 1
STATUS_ERROR: Final = 2
#: OTLP span kinds SERVER and CLIENT.
KIND_SERVER: Final = 2
KIND_CLIENT: Final = 3
#: Span events that mark a streamed chunk arriving at a client: OpenLLMetry's (one per chunk;
#: ``llm.content.completion.chunk`` in its older releases) and OpenInference's (the first
#: chunk only). The earliest of them, minus the span's start, is the client's TTFT.
CHUNK_EVENTS: Final = frozenset(
    {
        "gen_ai.content.completion.chunk",
        "llm.content.completion.chunk",
        "First Token Stream Event",
    }
)

_RUST_DURATION = re.compile(
    r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)\s*(ns|µs|μs|us|ms|s)\s*$"
)
_UNIT_SECONDS: Final = {
    "ns": 1e-9,
    "µs": 1e-6,
    "μs": 1e-6,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
}


def attr_size(value: AttrValue) -> int:
    """An attribute value's size against the per-value limit: bytes of a string or bytes,
    summed over an array's items, 8 for a number or a bool."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, tuple):
        return sum(attr_size(item) for item in value)
    return 8


_NO_ATTRIBUTES: Final[Mapping[str, Any]] = MappingProxyType({})


class SpanView(NamedTuple):
    """One span with its resource attributes; ids are lowercase hex ("" when absent).

    A ``NamedTuple`` rather than a frozen dataclass: one is built for every span received,
    and a tuple is the cheapest immutable value to build (a quarter of the dataclass's cost).
    """

    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    parent_span_id: str = ""
    kind: int = 0
    attributes: Mapping[str, AttrValue] = _NO_ATTRIBUTES
    resource: Mapping[str, AttrValue] = _NO_ATTRIBUTES
    scope: str = ""
    status_code: int = STATUS_UNSET
    status_message: str = ""
    #: When the first streamed-chunk event (``CHUNK_EVENTS``) on the span happened; 0: none.
    first_chunk_ns: int = 0

    @property
    def duration_s(self) -> float | None:
        if self.start_ns <= 0 or self.end_ns < self.start_ns:
            return None
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def service(self) -> str:
        value = self.resource.get("service.name")
        return value if isinstance(value, str) else ""

    def attr(self, *names: str) -> AttrValue:
        """The first of ``names`` present on the span."""
        for name in names:
            if name in self.attributes:
                return self.attributes[name]
        return None

    def label(self, names: tuple[str, ...]) -> str:
        """``as_str(self.attr(*names))`` cut to ``MAX_LABEL_LEN`` characters."""
        attributes = self.attributes
        for name in names:
            if name in attributes:
                return as_str(attributes[name])[:MAX_LABEL_LEN]
        return ""

    def has_prefix(self, prefix: str) -> bool:
        return any(key.startswith(prefix) for key in self.attributes)


def as_float(value: AttrValue) -> float | None:
    """A number from a numeric or numeric-string attribute; NaN and infinities are kept so
    that validation can reject them as absurd rather than treating them as absent."""
    if type(value) is float:  # the common case first: this runs for every timing read
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def as_int(value: AttrValue) -> int | None:
    if type(value) is int:  # the common case first (``bool`` is not ``int`` here)
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    number = as_float(value)
    if number is None or not math.isfinite(number) or number != int(number):
        return None
    return int(number)


def as_str(value: AttrValue) -> str:
    if type(value) is str or isinstance(value, str):
        return value
    if value is None or isinstance(value, bytes | tuple):
        return ""
    return str(value)


def parse_duration(value: AttrValue) -> float | None:
    """Seconds from a Rust ``Duration`` debug string (``"1.234ms"``, ``"12µs"``, ``"1.5s"``)
    or from a bare number of seconds."""
    if isinstance(value, str):
        match = _RUST_DURATION.match(value)
        if match:
            return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return as_float(value)


#: Finish-reason attributes already read (the same few strings come on every span), up to
#: ``_FINISH_CACHE_SIZE`` of them, each at most ``_FINISH_CACHE_LEN`` characters.
_FINISH_CACHE: Final[dict[str, str]] = {}
_FINISH_CACHE_SIZE: Final = 256
_FINISH_CACHE_LEN: Final = 64


def first_finish_reason(value: AttrValue) -> str:
    """vLLM sends ``gen_ai.response.finish_reasons`` as a JSON-encoded list in a string;
    the semantic conventions send a string array."""
    if isinstance(value, tuple):
        return as_str(value[0]) if value else ""
    text = as_str(value)
    known = _FINISH_CACHE.get(text)
    if known is not None:
        return known
    reason = _first_in_text(text)
    if len(text) <= _FINISH_CACHE_LEN and len(_FINISH_CACHE) < _FINISH_CACHE_SIZE:
        _FINISH_CACHE[text] = reason
    return reason


def _first_in_text(text: str) -> str:
    text = text.strip()
    if text.startswith("["):
        try:
            decoded = json.loads(text)
        except ValueError:
            return text
        if isinstance(decoded, list) and decoded:
            return as_str(decoded[0]) if not isinstance(decoded[0], str) else decoded[0]
        return ""
    return text

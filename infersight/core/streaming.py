"""What a client measures of one streamed OpenAI-compatible response: one definition.

Both load generators — ``loadgen``'s asyncio runner and its Locust user — feed the lines of
the server-sent-event stream to a ``StreamTiming`` with the time each line was read and turn
it into a ``RequestResult``; so the two engines cannot drift apart on what TTFT means.

* **TTFT**: send → the first chunk that carries content (a role-only first chunk, as vLLM
  sends, is not a token).
* **TPOT**: first → last content chunk ÷ (output tokens − 1) — the engine's definition, which
  leaves TTFT out — with the token count from the usage chunk when the server sends one (a
  chunk may carry several tokens), else the number of content chunks.
* **ITL**: the gaps between consecutive content chunks.
* **E2E**: send → ``data: [DONE]`` (lines after it are read but not timed: the caller drains
  the body so the connection goes back to its pool).

A failure inside the stream (vLLM sends ``{"error": …}`` as a chunk), a chunk that is not
JSON, or a stream that ends without content makes the result ``ok=False`` with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final

from infersight.core.loadtest import RequestResult

MAX_ERROR_CHARS: Final = 200
DONE: Final = "[DONE]"


def content(event: dict[str, Any]) -> str:
    """The text a chunk adds: ``delta.content`` (chat) or ``text`` (completions)."""
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return text if isinstance(text, str) else ""


@dataclass
class StreamTiming:
    """The arrival times of a response's content chunks, its usage count, and any failure."""

    tokens: list[float] = field(default_factory=list)
    usage_tokens: int | None = None
    error: str = ""
    #: When ``[DONE]`` arrived: the end of the request, though the body is still read out.
    done: float | None = None

    def feed(self, line: str, clock: Callable[[], float]) -> None:
        """One line of the body; ``clock`` is read once for each ``data:`` line until DONE."""
        if not line.startswith("data:") or self.done is not None:
            return
        data = line[5:].strip()
        if data == DONE:
            self.done = clock()
            return
        self.event(data, clock())

    def event(self, data: str, now: float) -> None:
        """One ``data:`` payload read at ``now``."""
        try:
            event = json.loads(data)
        except ValueError:
            self.error = "the server sent a chunk that is not JSON"
            return
        if not isinstance(event, dict):
            return
        if "error" in event:  # vLLM reports a failure inside the stream
            self.error = str(event["error"])[:MAX_ERROR_CHARS]
            return
        if content(event):
            self.tokens.append(now)
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]

    def fail(self, error: str) -> None:
        self.error = error[:MAX_ERROR_CHARS]

    def end(self, now: float) -> float:
        """When the request ended: at ``[DONE]`` when it came and nothing failed, else ``now``."""
        return self.done if self.done is not None and not self.error else now

    def result(
        self,
        *,
        seq: int,
        phase: int,
        sent_s: float,
        sent: float,
        end: float,
        input_tokens: int,
        trace_id: str,
    ) -> RequestResult:
        """The request's result; ``sent`` and ``end`` on the clock the chunks were timed by."""
        tokens = self.tokens
        if not self.error and not tokens:
            self.error = "the stream ended without any content"
        out = self.usage_tokens if self.usage_tokens is not None else len(tokens)
        ttft = tokens[0] - sent if tokens else None
        tpot = (tokens[-1] - tokens[0]) / (out - 1) if tokens and out > 1 else None
        return RequestResult(
            seq=seq,
            phase=phase,
            sent_s=sent_s,
            e2e_s=end - sent,
            ttft_s=ttft,
            tpot_s=tpot,
            itl_s=tuple(b - a for a, b in pairwise(tokens)),
            input_tokens=input_tokens,
            output_tokens=out,
            ok=not self.error,
            error=self.error,
            trace_id=trace_id,
        )

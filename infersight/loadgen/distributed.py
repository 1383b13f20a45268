"""What the Locust engine's processes tell each other, and how their results become one run.

Nothing here imports Locust (it patches the standard library with gevent on import): the CLI,
the master and the workers share these plain pieces.

* ``RunSpec``: what every worker needs to send requests exactly as the asyncio engine would
  (endpoint, length distributions or the replayed shapes, long-tail mix, seed, timeout). The
  master sends it to each worker that says hello, so a worker that joins late from another
  host (``locust --worker --master-host …``) gets it too. The API key travels in it (Locust's
  own master–worker traffic is not encrypted either: keep the master port on a trusted net).
* A request's **record**: a short list (send time on the wall clock, E2E, TTFT, TPOT, the
  gaps, token counts, status, error, trace id). Durations are measured on the worker's
  monotonic clock; only the send time is wall-clock, so hosts need synchronised clocks (NTP
  keeps them within milliseconds) to place requests in phases, not to time them.
* ``merge``: every worker's records, from the file the master appended them to as they came,
  into one ``LoadTestRun`` — sorted by send time, numbered, each in the phase it was sent in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import numpy as np

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import Phase, RequestResult
from infersight.loadgen.client import Endpoint
from infersight.loadgen.workload import LongTail, Replay, Sampled, Workload, parse_lengths

#: Records the merged run keeps; past this a run is counted but not kept (a week-long run at
#: hundreds of requests a second would not fit in memory).
MAX_RECORDS: Final = 2_000_000

CONFIG_MSG: Final = "infersight_config"
HELLO_MSG: Final = "infersight_hello"
RESULTS_MSG: Final = "infersight_results"
DONE_MSG: Final = "infersight_done"
# The API key travels to the Locust processes in the environment, never on a command line.
API_KEY_ENV: Final = "INFERSIGHT_LOADTEST_API_KEY"


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What a worker needs to generate the run's requests (JSON-able both ways)."""

    base_url: str
    model: str
    chat: bool = True
    api_key: str = field(default="", repr=False)
    ignore_eos: bool = True
    input_tokens: str = "lognormal:512:0.5"
    output_tokens: str = "lognormal:256:0.5"
    long_output: int | None = None  # a long-tail run's long requests
    long_fraction: float = 0.02
    replay: tuple[tuple[int, int], ...] = ()
    seed: int | None = None
    timeout_s: float = 600.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["replay"] = tuple((int(i), int(o)) for i, o in known.get("replay", ()))
        spec = cls(**known)
        spec.endpoint()  # a bad URL or model fails here, not in every user
        return spec

    def endpoint(self) -> Endpoint:
        return Endpoint(
            self.base_url,
            self.model,
            chat=self.chat,
            api_key=self.api_key,
            ignore_eos=self.ignore_eos,
        )

    def rng(self, worker: int) -> np.random.Generator:
        """A worker's own stream: seeded runs repeat, and no two workers send the same prompts."""
        if self.seed is None:
            return np.random.default_rng()
        return np.random.default_rng([self.seed, max(0, worker)])

    def workload(self, worker: int, workers: int, rng: np.random.Generator) -> Workload:
        """The worker's workload; a replay starts each worker at its own share of the shapes."""
        workload: Workload
        if self.replay:
            share = len(self.replay) * max(0, worker) // max(1, workers)
            workload = Replay(self.replay[share:] + self.replay[:share])
        else:
            inputs, outputs = parse_lengths(self.input_tokens), parse_lengths(self.output_tokens)
            workload = Sampled(inputs, outputs, rng)
        if self.long_output is not None:
            workload = LongTail(workload, self.long_output, self.long_fraction, rng)
        return workload


def encode(result: RequestResult, sent_epoch: float) -> list[Any]:
    """A result as a worker sends it (``sent_epoch``: the wall-clock send time)."""
    return [
        sent_epoch,
        result.e2e_s,
        result.ttft_s,
        result.tpot_s,
        list(result.itl_s),
        result.input_tokens,
        result.output_tokens,
        result.ok,
        result.error,
        result.trace_id,
    ]


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("not finite")
    return number


def _optional(value: Any) -> float | None:
    return None if value is None else _finite(value)


def decode(record: Sequence[Any], t0_epoch: float, phases: Sequence[Phase]) -> RequestResult:
    """A record as a result of the run that began at ``t0_epoch`` (seq is set by ``merge``)."""
    sent, e2e, ttft, tpot, itl, inputs, outputs, ok, error, trace_id = record
    sent_s = _finite(sent) - t0_epoch
    return RequestResult(
        seq=0,
        phase=phase_at(phases, sent_s),
        sent_s=sent_s,
        e2e_s=_finite(e2e),
        ttft_s=_optional(ttft),
        tpot_s=_optional(tpot),
        itl_s=tuple(_finite(g) for g in itl),
        input_tokens=int(inputs),
        output_tokens=int(outputs),
        ok=bool(ok),
        error=str(error)[:256],
        trace_id=str(trace_id)[:32],
    )


def phase_at(phases: Sequence[Phase], t: float) -> int:
    """The phase running ``t`` seconds into the run (the first before it, the last after)."""
    current = phases[0].index
    for p in phases:
        if t >= p.start_s:
            current = p.index
    return current


def running(phases: Sequence[Phase], t: float) -> Phase | None:
    """The phase running ``t`` seconds into the run; ``None`` outside every phase (once the
    last has ended)."""
    for p in phases:
        if p.start_s <= t < p.end_s:
            return p
    return None


def users_at(phases: Sequence[Phase], t: float) -> int | None:
    """How many users the run holds ``t`` seconds in; ``None`` once the last phase ended."""
    phase = running(phases, t)
    return None if phase is None else phase.concurrency


@dataclass
class Merged:
    results: list[RequestResult]
    per_worker: dict[int, int]
    dropped: int = 0
    bad: int = 0


def read_records(path: Path) -> Iterator[tuple[int, list[Any]]]:
    """(worker index, record) for each line the master wrote."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            worker, *record = json.loads(line)
            yield int(worker), record


def merge(path: Path, t0_epoch: float, phases: Sequence[Phase], limit: int = MAX_RECORDS) -> Merged:
    """Every worker's records as one sorted, numbered list (the first ``limit`` kept)."""
    merged = Merged([], {})
    for worker, record in read_records(path):
        merged.per_worker[worker] = merged.per_worker.get(worker, 0) + 1
        if len(merged.results) >= limit:
            merged.dropped += 1
            continue
        try:
            merged.results.append(decode(record, t0_epoch, phases))
        except (TypeError, ValueError):
            merged.bad += 1  # a worker of another version, or a corrupted line
    merged.results.sort(key=lambda r: r.sent_s)
    merged.results = [replace(r, seq=i) for i, r in enumerate(merged.results, 1)]
    return merged


def check_workers(workers: int, remote: int) -> None:
    if workers < 0 or remote < 0 or workers + remote < 1:
        raise InvalidInput("a Locust run needs at least one worker (local or remote)")

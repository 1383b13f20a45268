"""Arrival processes (Poisson, diurnal, bursts) and request mixes (lengths, tenants, priorities).

``ArrivalStream`` turns a process, a mix and an instance's fault schedule into a deterministic
sequence of arrivals, drawn in vectorised blocks (non-homogeneous processes by thinning).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from infersight.core.errors import InvalidInput
from infersight.simulator.faults import FaultSchedule

DAY_S: Final = 86400.0
_BLOCK: Final = 2048

FloatArray = npt.NDArray[np.float64]


class ArrivalProcess(Protocol):
    """A (possibly time-varying) arrival rate in requests per second."""

    @property
    def max_rate(self) -> float: ...

    def rates(self, t: FloatArray) -> FloatArray: ...


@dataclass(frozen=True, slots=True)
class Poisson:
    rate: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.rate) or self.rate < 0:
            raise InvalidInput("poisson rate must be ≥ 0")

    @property
    def max_rate(self) -> float:
        return self.rate

    def rates(self, t: FloatArray) -> FloatArray:
        return np.full_like(t, self.rate)


@dataclass(frozen=True, slots=True)
class Diurnal:
    """A daily cycle: ``mean·(1 + amplitude·cos(2π(t − peak)/period))``."""

    mean_rate: float
    amplitude: float = 0.6
    peak_s: float = 14 * 3600.0
    period_s: float = DAY_S

    def __post_init__(self) -> None:
        if not math.isfinite(self.mean_rate) or self.mean_rate < 0:
            raise InvalidInput("diurnal mean_rate must be ≥ 0")
        if not 0.0 <= self.amplitude <= 1.0:
            raise InvalidInput("diurnal amplitude must be in [0, 1]")
        if not self.period_s > 0:
            raise InvalidInput("diurnal period must be positive")

    @property
    def max_rate(self) -> float:
        return self.mean_rate * (1.0 + self.amplitude)

    def rates(self, t: FloatArray) -> FloatArray:
        phase = 2.0 * math.pi * (t - self.peak_s) / self.period_s
        return self.mean_rate * (1.0 + self.amplitude * np.cos(phase))


@dataclass(frozen=True, slots=True)
class Bursts:
    """A base rate with periodic bursts: ``burst_rate`` for ``duration_s`` every ``every_s``."""

    base_rate: float
    burst_rate: float
    every_s: float
    duration_s: float
    offset_s: float = 0.0

    def __post_init__(self) -> None:
        if min(self.base_rate, self.burst_rate) < 0:
            raise InvalidInput("burst rates must be ≥ 0")
        if not 0 < self.duration_s <= self.every_s:
            raise InvalidInput("bursts need 0 < duration ≤ every")

    @property
    def max_rate(self) -> float:
        return max(self.base_rate, self.burst_rate)

    def rates(self, t: FloatArray) -> FloatArray:
        in_burst = np.mod(t - self.offset_s, self.every_s) < self.duration_s
        return np.where(in_burst, self.burst_rate, self.base_rate)


def scaled(process: ArrivalProcess, factor: float) -> ArrivalProcess:
    """``process`` with every rate multiplied by ``factor`` (a share of routed traffic)."""
    if not math.isfinite(factor) or factor <= 0:
        raise InvalidInput("a traffic share must be positive")
    if isinstance(process, Poisson):
        return Poisson(process.rate * factor)
    if isinstance(process, Diurnal):
        return replace(process, mean_rate=process.mean_rate * factor)
    if isinstance(process, Bursts):
        return replace(
            process, base_rate=process.base_rate * factor, burst_rate=process.burst_rate * factor
        )
    raise InvalidInput(f"cannot split an arrival process of type {type(process).__name__}")


class LengthKind(StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    LOGNORMAL = "lognormal"


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution, clipped to ``[minimum, maximum]``.

    ``fixed``: always ``median``; ``uniform``: between min and max; ``lognormal``: median
    ``median`` and log-space standard deviation ``sigma`` (ShareGPT-like mixes are ~0.6–1.0).
    """

    kind: LengthKind
    median: int
    sigma: float = 0.0
    minimum: int = 1
    maximum: int = 4096

    def __post_init__(self) -> None:
        if not isinstance(self.kind, LengthKind):
            object.__setattr__(self, "kind", LengthKind(str(self.kind)))
        if not 1 <= self.minimum <= self.median <= self.maximum:
            raise InvalidInput("lengths need 1 ≤ minimum ≤ median ≤ maximum")
        if not math.isfinite(self.sigma) or self.sigma < 0:
            raise InvalidInput("sigma must be ≥ 0")

    def sample(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        if self.kind is LengthKind.FIXED:
            values = np.full(n, float(self.median))
        elif self.kind is LengthKind.UNIFORM:
            values = rng.uniform(self.minimum, self.maximum + 1, n)
        else:
            values = np.exp(rng.normal(math.log(self.median), self.sigma, n))
        clipped: npt.NDArray[np.int64] = np.clip(
            np.floor(values), self.minimum, self.maximum
        ).astype(np.int64)
        return clipped


@dataclass(frozen=True, slots=True)
class Weighted:
    """A label value and its share of the traffic."""

    value: str
    weight: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.weight) or self.weight <= 0:
            raise InvalidInput("label weights must be positive")


#: A step's extra GPU time while adapter sequences are in its batch (see ``LoraServing``).
LORA_STEP_OVERHEAD: Final = 0.08
#: vLLM's ``--max-loras`` bound here.
MAX_LORA: Final = 256


@dataclass(frozen=True, slots=True)
class LoraServing:
    """A base model serving LoRA adapters (vLLM ``--enable-lora --lora-modules``).

    ``adapters``: each adapter's name and share of the deployment's requests (the rest ask for
    the base model); ``max_lora``: adapters one batch may hold (vLLM ``--max-loras``: a
    request of another adapter waits, the requests behind it may go first). The adapters'
    weights are small next to the base model's, so a step costs ``step_overhead`` more GPU
    time (8 % by default: the batched LoRA kernels' extra, rank-16-sized matmuls) whenever its
    batch holds an adapter's sequence; KV and memory are the base model's."""

    adapters: tuple[Weighted, ...]
    max_lora: int = 4
    step_overhead: float = LORA_STEP_OVERHEAD

    def __post_init__(self) -> None:
        if not self.adapters:
            raise InvalidInput("lora needs at least one adapter")
        names = [a.value for a in self.adapters]
        if len(set(names)) != len(names):
            raise InvalidInput("lora adapter names must be unique", details={"adapters": names})
        for a in self.adapters:
            if not a.value or len(a.value) > 256 or not a.value.isprintable() or "," in a.value:
                raise InvalidInput(
                    f"lora adapter name {a.value!r} is not a valid label (1 to 256 printable "
                    "characters, no comma)"
                )
            if not 0.0 < a.weight <= 1.0:
                raise InvalidInput(f"lora adapter {a.value!r}: its share must be in (0, 1]")
        if sum(a.weight for a in self.adapters) > 1.0 + 1e-9:
            raise InvalidInput("lora adapter shares must add up to at most 1")
        if not 1 <= self.max_lora <= MAX_LORA:
            raise InvalidInput(f"lora.max_lora must be in [1, {MAX_LORA}]")
        if not math.isfinite(self.step_overhead) or not 0.0 <= self.step_overhead <= 1.0:
            raise InvalidInput("lora.step_overhead must be in [0, 1]")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.value for a in self.adapters)


#: Child sequences a parallel-sampling request may ask for (``n``).
MAX_PARALLEL_N: Final = 16


@dataclass(frozen=True, slots=True)
class Parallel:
    """Parallel sampling (OpenAI ``n`` > 1): ``share`` of the requests ask for ``n``
    sequences, ``n`` drawn uniformly from ``choices``. The engine computes the prompt once and
    decodes every sequence, each to its own output length (``engine``)."""

    share: float
    choices: tuple[int, ...] = (2,)

    def __post_init__(self) -> None:
        if not math.isfinite(self.share) or not 0.0 < self.share <= 1.0:
            raise InvalidInput("parallel.share must be in (0, 1]")
        if not self.choices:
            raise InvalidInput("parallel.n needs at least one choice")
        for n in self.choices:
            if not 2 <= n <= MAX_PARALLEL_N:
                raise InvalidInput(f"parallel.n must be in [2, {MAX_PARALLEL_N}], not {n}")


@dataclass(frozen=True, slots=True)
class RequestMix:
    """What the requests look like: lengths, ``max_tokens``, tenants and priorities."""

    input: LengthDist
    output: LengthDist
    max_tokens: int = 1024
    tenants: tuple[Weighted, ...] = (Weighted("default", 1.0),)
    priorities: tuple[Weighted, ...] = (Weighted("standard", 1.0),)
    temperature: float = 0.7
    top_p: float = 0.95
    #: Time an API gateway in front of the server adds (half on the way in, half out).
    gateway_s: float = 0.0
    #: Requests with ``n`` > 1 sequences (``None``: every request asks for one).
    parallel: Parallel | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.gateway_s) or not 0.0 <= self.gateway_s <= 60.0:
            raise InvalidInput("gateway time must be in [0, 60] s")
        if self.max_tokens < 1:
            raise InvalidInput("max_tokens must be ≥ 1")
        if not self.tenants or not self.priorities:
            raise InvalidInput("a mix needs at least one tenant and one priority")


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request as the client sends it."""

    t: float
    input_tokens: int
    output_tokens: int
    max_tokens: int
    tenant: str
    priority: str
    gateway_s: float = 0.0
    #: The client's W3C trace id (``traceparent``), which the server's span joins; else drawn.
    trace_id: str = ""
    #: The client's span the request was sent from (``traceparent``): the server span's parent.
    parent_span_id: str = ""
    #: The LoRA adapter the request asks for ("": the base model).
    adapter: str = ""
    #: Parallel sampling: the output lengths of the request's other sequences (its ``n`` is
    #: one more than their number; ``output_tokens`` is the first sequence's).
    sibling_outputs: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        return 1 + len(self.sibling_outputs)


def _choice(
    rng: np.random.Generator, options: tuple[Weighted, ...], n: int
) -> npt.NDArray[np.int64]:
    if len(options) == 1:
        return np.zeros(n, dtype=np.int64)
    weights = np.array([o.weight for o in options])
    return rng.choice(len(options), size=n, p=weights / weights.sum())


class ArrivalStream:
    """The arrivals of one instance, lazily drawn up to any horizon."""

    def __init__(
        self,
        process: ArrivalProcess,
        mix: RequestMix,
        rng: np.random.Generator,
        faults: FaultSchedule,
        *,
        max_input_tokens: int,
        adapters: tuple[Weighted, ...] = (),
    ) -> None:
        """``adapters``: LoRA adapters and their shares of the traffic (the rest asks for the
        base model)."""
        self._process = process
        self._adapters = adapters
        self._mix = mix
        self._rng = rng
        self._faults = faults
        self._max_input = max_input_tokens
        self._bound = process.max_rate * faults.max_rate_factor()
        self._t = 0.0
        self._buffer: deque[Arrival] = deque()

    def peek_time(self) -> float:
        """The time of the next arrival (``inf`` when the process is silent)."""
        while not self._buffer:
            if self._bound <= 0 or not self._fill():
                return math.inf
        return self._buffer[0].t

    def pop_until(self, t: float) -> list[Arrival]:
        out: list[Arrival] = []
        while self.peek_time() <= t:
            out.append(self._buffer.popleft())
        return out

    def _fill(self) -> bool:
        rng, mix = self._rng, self._mix
        gaps = rng.exponential(1.0 / self._bound, _BLOCK)
        times = self._t + np.cumsum(gaps)
        self._t = float(times[-1])
        rates = self._process.rates(times)
        fx = [self._faults.effects(float(t)) for t in times] if self._faults.faults else None
        if fx is not None:
            rates = rates * np.array([e.rate_factor for e in fx])
        keep = rng.random(_BLOCK) * self._bound < rates
        n = int(keep.sum())
        if n == 0:
            return math.isfinite(self._t) and self._t < 1e12
        times = times[keep]
        inputs = mix.input.sample(rng, n).astype(np.float64)
        if fx is not None:
            factors = np.array([e.input_factor for e, k in zip(fx, keep, strict=True) if k])
            inputs = inputs * factors
        inputs_i = np.clip(inputs, 1, self._max_input).astype(np.int64)
        outputs = mix.output.sample(rng, n)
        tenants = _choice(rng, mix.tenants, n)
        priorities = _choice(rng, mix.priorities, n)
        # Drawn after the rest, and only when configured: a mix without them keeps its stream.
        adapters = self._draw_adapters(n)
        siblings = self._draw_siblings(n)
        for i in range(n):
            self._buffer.append(
                Arrival(
                    t=float(times[i]),
                    input_tokens=int(inputs_i[i]),
                    output_tokens=int(outputs[i]),
                    max_tokens=mix.max_tokens,
                    tenant=mix.tenants[tenants[i]].value,
                    priority=mix.priorities[priorities[i]].value,
                    gateway_s=mix.gateway_s,
                    adapter=adapters[i] if adapters else "",
                    sibling_outputs=siblings[i] if siblings else (),
                )
            )
        return True

    def _draw_adapters(self, n: int) -> list[str]:
        """Each request's adapter ("" for the base model) by the adapters' shares."""
        if not self._adapters:
            return []
        bounds = np.cumsum([a.weight for a in self._adapters])
        picks = np.searchsorted(bounds, self._rng.random(n), side="right")
        names = [a.value for a in self._adapters]
        return [names[k] if k < len(names) else "" for k in picks]

    def _draw_siblings(self, n: int) -> list[tuple[int, ...]]:
        """Each request's other sequences' output lengths (``()``: ``n`` = 1)."""
        parallel = self._mix.parallel
        if parallel is None:
            return []
        rng = self._rng
        chosen = rng.random(n) < parallel.share
        sizes = rng.choice(np.array(parallel.choices), size=n)
        counts = np.where(chosen, sizes - 1, 0)
        outputs = self._mix.output.sample(rng, int(counts.sum())).tolist()
        out: list[tuple[int, ...]] = []
        at = 0
        for k in counts.tolist():
            out.append(tuple(int(v) for v in outputs[at : at + k]))
            at += k
        return out

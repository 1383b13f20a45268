"""Profiles of a serving process: folded stacks → hottest frames and host-side classification.

A sidecar samples the serving process with py-spy (``collector.profiling``) and hands the
folded stacks it wrote (``--format raw``: one ``frame;frame;…;frame COUNT`` line per distinct
stack, outermost first) to ``summarise``, which keeps a bounded summary: the hottest frames
folded by module and function (``self``: where the samples' innermost Python frame is;
``top``: every frame on the stack, inclusive), the same folded by module (``modules``), the
heaviest stacks, and the shares
of four host-side limits:

* **tokenizer** — samples with a Python frame in a tokenizer module (a path with ``tokeniz``
  in it: ``tokenizers``, ``transformers/tokenization_utils*``, ``…/tokenizer.py``);
* **logging** — samples inside the standard library's ``logging`` package (handlers'
  ``emit``, ``flush``, the stream's writes and an ``fsync`` beneath them);
* **GIL** — thread-samples waiting to take the GIL. With native stacks (``--native``), a
  thread whose innermost Python frame is followed only by the interpreter's and the C
  library's frames, ending in a condition-variable wait (``pthread_cond_timedwait`` /
  ``pthread_cond_wait``, ``take_gil``), is waiting for the GIL: CPython's ``take_gil`` waits
  on that condition variable, and nothing else in the interpreter does between a Python frame
  and the C library. Without native stacks this cannot be told from sleeping, and the summary
  says so (``measured`` lists what was);
* **lock** — thread-samples blocked acquiring a lock (a semaphore wait under a Python frame)
  whose innermost Python frame is not an idle wait by design (``queue.get``,
  ``Condition.wait``, ``Event.wait``, ``Thread.join``, an executor's worker).

The shares are of the *busy* thread-samples: sampling every thread (``--idle``) also sees
threads parked in ``epoll_wait``, ``select``, a sleep or an idle worker's wait, which are
counted (``idle_samples``) but left out of the denominator, so an event loop that waits for
requests does not dilute a tokenizer that burns the rest of the time.

Pure: no I/O. Every input is bounded (``MAX_LINES``, ``MAX_DEPTH``, ``MAX_FRAME_CHARS``) and
so is the summary (``TOP_FRAMES``, ``TOP_STACKS``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infersight.core.errors import InvalidInput

#: Bounds on what is read of py-spy's output and kept in a summary.
MAX_LINES: Final = 200_000
MAX_DEPTH: Final = 256
MAX_FRAME_CHARS: Final = 300
TOP_FRAMES: Final = 25
TOP_STACKS: Final = 30
#: Bounds on a profile request.
MAX_SECONDS: Final = 60.0
MIN_SECONDS: Final = 1.0
MAX_RATE: Final = 200
MIN_RATE: Final = 1
DEFAULT_SECONDS: Final = 5.0
DEFAULT_RATE: Final = 50
#: Below this share of busy samples a limit is not named.
NAMED_SHARE: Final = 0.15
#: A profile with fewer busy samples names no limit (too few to say).
NAMED_SAMPLES: Final = 20


class Limit(StrEnum):
    """The host-side limits a profile can name."""

    TOKENIZER = "tokenizer"
    GIL = "gil"
    LOCK = "lock"
    LOGGING = "logging"


#: How a limit reads in a sentence ("62 % of samples in the tokenizer").
PHRASES: Final[dict[str, str]] = {
    Limit.TOKENIZER: "in the tokenizer",
    Limit.GIL: "waiting on the GIL",
    Limit.LOCK: "waiting on locks",
    Limit.LOGGING: "in logging",
}


class ProfileState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    #: No profile could be taken; ``error`` says why ("not permitted: …").
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    """What a sidecar is asked to do: sample ``instance``'s serving process for ``seconds`` at
    ``rate`` samples per second."""

    id: int
    instance: str
    seconds: float
    rate: int
    #: The claim's secret: the result is accepted only with it (``storage.profiles.complete``).
    nonce: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "instance": self.instance, "seconds": self.seconds,
                "rate": self.rate, "nonce": self.nonce}  # fmt: skip


def check_bounds(seconds: float, rate: int) -> tuple[float, int]:
    """``(seconds, rate)`` if within bounds, else ``InvalidInput``."""
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise InvalidInput(f"seconds must be within {MIN_SECONDS:g} … {MAX_SECONDS:g}")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise InvalidInput(f"rate must be within {MIN_RATE} … {MAX_RATE} samples per second")
    return float(seconds), int(rate)


class ProfileChannel(Protocol):
    """How a sidecar receives profile requests and hands back results: the store directly
    (``service.profiles.StoreChannel``) or the API's ingest routes
    (``collector.profiling.RemoteChannel``)."""

    def claim(self, instance: str) -> ProfileRequest | None:
        """The oldest pending request for ``instance``, now marked running; ``None``."""
        ...

    def complete(
        self, request: ProfileRequest, result: Mapping[str, Any] | None, error: str
    ) -> None:
        """Store the summary (``error`` "") or why there is none (``result`` None) of a
        request this channel claimed (its instance and nonce go with it)."""
        ...


# -- parsing ----------------------------------------------------------------------------------

_PY_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*\.py[cx]?):(?P<line>\d+)\)$")
_NATIVE_FRAME = re.compile(r"^(?P<func>.*) \((?P<lib>[^()]*)\)$")
_THREAD = re.compile(r"^thread \(0?x?[0-9a-fA-F]+\)")

#: Leaf native calls of a thread that waits for work (left out of the busy samples).
_IDLE_CALLS: Final = frozenset({
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "pselect", "__select", "poll",
    "ppoll", "__poll", "clock_nanosleep", "nanosleep", "__clock_nanosleep", "pause",
    "sigwait", "sigwaitinfo", "sigtimedwait", "accept", "accept4", "__libc_accept",
    "wait4", "waitpid", "__waitpid",
})  # fmt: skip
#: Condition-variable waits: ``take_gil`` waits on one.
_COND_WAITS: Final = frozenset({
    "pthread_cond_timedwait", "pthread_cond_wait", "__pthread_cond_wait",
    "__pthread_cond_timedwait", "pthread_cond_clockwait", "take_gil",
})  # fmt: skip
#: Semaphore and mutex waits: ``PyThread_acquire_lock_timed`` (a ``threading`` lock).
_LOCK_WAITS: Final = frozenset({
    "sem_wait", "sem_timedwait", "sem_clockwait", "__new_sem_wait_slow",
    "do_futex_wait", "__new_sem_wait", "PyThread_acquire_lock_timed", "lock_PyThread_acquire_lock",
    "acquire_timed",
})  # fmt: skip
#: Python functions (file suffix, function) that wait for work by design.
_IDLE_PY: Final = (
    ("threading.py", "wait"), ("threading.py", "join"), ("threading.py", "_wait_for_tstate_lock"),
    ("queue.py", "get"), ("thread.py", "_worker"), ("selectors.py", "select"),
    ("base_events.py", "_run_once"), ("connection.py", "wait"), ("connection.py", "poll"),
    ("socket.py", "accept"), ("socketserver.py", "serve_forever"),
    ("threading.py", "Event.wait"), ("threading.py", "Condition.wait"),
    ("threading.py", "Thread.join"), ("queue.py", "Queue.get"),
)  # fmt: skip
#: Shared libraries and executables of the interpreter and the C library, matched against a
#: native frame's library *basename* in full: a GIL wait passes only these. An extension module
#: (``tokenizers.cpython-311-x86_64-linux-gnu.so``, ``libtorch_python.so``) is not one of them,
#: so its own condition-variable waits are not taken for the GIL.
_RUNTIME_LIBS: Final = re.compile(
    r"^(?:libpython3(?:\.\d+)?[a-z]*\.so(?:\.[\d.]+)?|python3?(?:\.\d+)?[a-z]*"
    r"|libc\.so\.6|libc-[\d.]+\.so|libpthread\.so\.0|libpthread-[\d.]+\.so"
    r"|ld-linux[\w.-]*\.so(?:\.\d+)?)$"
)


def runtime_library(library: str) -> bool:
    """Whether a native frame's library (a path or a name) is the interpreter's or the C
    library's."""
    return bool(_RUNTIME_LIBS.match(library.replace("\\", "/").rsplit("/", 1)[-1]))


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    file: str  # a Python file ("" for a native frame)
    library: str  # a native frame's library ("" for a Python frame)

    @property
    def python(self) -> bool:
        return bool(self.file)

    @property
    def module(self) -> str:
        """``infersight/simulator/tokenizer.py`` → ``infersight.simulator.tokenizer``."""
        if not self.file:
            return self.library
        path = self.file.replace("\\", "/")
        for marker in ("site-packages/", "dist-packages/"):
            if marker in path:
                path = path.rsplit(marker, 1)[1]
        path = path.lstrip("/")
        if path.startswith("<"):
            return path
        stem = re.sub(r"\.py[cx]?$", "", path)
        if stem.endswith("/__init__"):
            stem = stem[: -len("/__init__")]
        return stem.replace("/", ".")

    @property
    def key(self) -> str:
        """Module and function: the unit frames are folded by."""
        return f"{self.module}:{self.function}"


def parse_frame(text: str) -> Frame:
    text = text.strip()[:MAX_FRAME_CHARS]
    m = _PY_FRAME.match(text)
    if m:
        return Frame(m["func"].strip(), m["file"], "")
    m = _NATIVE_FRAME.match(text)
    if m:
        return Frame(m["func"].strip(), "", m["lib"].strip())
    return Frame(text, "", "?")


@dataclass(frozen=True, slots=True)
class Sample:
    """One distinct stack (outermost first) and how many times it was seen."""

    thread: str
    frames: tuple[Frame, ...]
    count: int


def parse_folded(text: str | Iterable[str]) -> list[Sample]:
    """py-spy's raw (folded) output → samples; a malformed line is ``InvalidInput``."""
    lines = text.splitlines() if isinstance(text, str) else text
    out: list[Sample] = []
    for n, raw in enumerate(lines, 1):
        if n > MAX_LINES:
            raise InvalidInput(f"a profile has at most {MAX_LINES} distinct stacks")
        line = raw.strip()
        if not line:
            continue
        stack, sep, count = line.rpartition(" ")
        if not sep or not count.isdigit():
            raise InvalidInput(f"line {n} of the folded stacks has no sample count")
        parts = stack.split(";")
        thread = ""
        if parts and _THREAD.match(parts[0]):
            thread = parts[0][:MAX_FRAME_CHARS]
            parts = parts[1:]
        frames = tuple(parse_frame(p) for p in parts[:MAX_DEPTH] if p)
        out.append(Sample(thread, frames, int(count)))
    return out


# -- classification ---------------------------------------------------------------------------


def _is_tokenizer(frame: Frame) -> bool:
    return frame.python and "tokeniz" in frame.file.lower()


def _is_logging(frame: Frame) -> bool:
    path = frame.file.replace("\\", "/")
    return frame.python and (
        path.startswith("logging/") or "/logging/" in path or path in ("logging/__init__.py",)
    )


def _innermost_python(frames: tuple[Frame, ...]) -> int:
    for i in range(len(frames) - 1, -1, -1):
        if frames[i].python:
            return i
    return -1


def _named(frames: Iterable[Frame]) -> list[Frame]:
    """Native frames with a symbol (unresolved addresses are skipped)."""
    return [f for f in frames if not f.function.startswith("0x")]


def _idle_by_design(frame: Frame) -> bool:
    file = frame.file.replace("\\", "/")
    for suffix, function in _IDLE_PY:
        if (file == suffix or file.endswith("/" + suffix)) and (
            frame.function == function or frame.function.endswith("." + function)
        ):
            return True
    return False


def thread_state(frames: tuple[Frame, ...]) -> str:  # noqa: PLR0911 (one per state)
    """``idle``, ``gil``, ``lock`` or ``busy``: what one thread-sample was doing."""
    at = _innermost_python(frames)
    below = frames[at + 1 :] if at >= 0 else frames
    named = _named(below)
    leaf = named[-1].function if named else ""
    if leaf in _IDLE_CALLS:
        return "idle"
    if leaf in _COND_WAITS or any(f.function == "take_gil" for f in named):
        runtime = all(runtime_library(f.library) for f in below)
        if at >= 0 and runtime:
            return "gil"
        return "idle"  # a condition variable of some library: its threads wait for work
    if leaf in _LOCK_WAITS or any(f.function in _LOCK_WAITS for f in named):
        if at >= 0 and _idle_by_design(frames[at]):
            return "idle"
        return "lock" if at >= 0 else "idle"
    if at >= 0 and not named and _idle_by_design(frames[at]):
        # Without native frames an idle wait shows as its Python caller.
        return "idle"
    return "busy"


@dataclass(frozen=True, slots=True)
class Share:
    limit: Limit
    samples: int
    share: float

    @property
    def sentence(self) -> str:
        share = self.share if math.isfinite(self.share) else 0.0
        return f"{round(min(max(share, 0.0), 1.0) * 100)} % of samples {PHRASES[self.limit]}"


def share_value(value: Any) -> float | None:
    """A stored share as a number within 0 … 1; ``None`` for anything else (text, NaN, ∞, a
    share outside 0 … 1: a summary written before results were validated)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    share = float(value)
    return share if math.isfinite(share) and 0.0 <= share <= 1.0 else None


def ranked_shares(shares: Any) -> list[tuple[str, float]]:
    """A summary's limits and their shares, largest first (then by name), the malformed left
    out (``share_value``): what the CLI and the incident page list."""
    if not isinstance(shares, Mapping):
        return []
    kept = [(str(k)[:32], v) for k, raw in shares.items() if (v := share_value(raw)) is not None]
    return sorted(kept, key=lambda kv: (-kv[1], kv[0]))


def summary_header(summary: Mapping[str, Any]) -> dict[str, Any]:
    """How a summary was taken, as text to show (``?`` for what is missing or malformed):
    ``rate``, ``seconds``, ``busy_samples``, ``samples``, ``threads``, and ``native``."""

    def text(key: str) -> str:
        value = summary.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "?"
        return f"{value:g}" if math.isfinite(value) and value >= 0 else "?"

    keys = ("rate", "seconds", "busy_samples", "samples", "threads")
    return {**{k: text(k) for k in keys}, "native": summary.get("native") is True}


def summary_rows(rows: Any, n: int) -> list[dict[str, Any]]:
    """The first ``n`` well-formed rows (``frame`` text, ``share`` within 0 … 1) of a
    summary's ``top``/``self``/``modules`` list, as shown."""
    if not isinstance(rows, list):
        return []
    out: list[dict[str, Any]] = []
    for row in rows:
        if len(out) >= n:
            break
        if not isinstance(row, Mapping) or not isinstance(row.get("frame"), str):
            continue
        share = share_value(row.get("share"))
        if share is not None:
            out.append({"frame": row["frame"][:MAX_STACK_CHARS], "share": share,
                        "samples": row.get("samples")})  # fmt: skip
    return out


def summarise(samples: list[Sample], *, native: bool, rate: int, seconds: float) -> dict[str, Any]:
    """The bounded summary stored with a profile (module doc)."""
    total = sum(s.count for s in samples)
    busy = idle = 0
    counts: Counter[Limit] = Counter()
    inclusive: Counter[str] = Counter()
    exclusive: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    stacks: Counter[str] = Counter()
    threads: set[str] = set()
    for sample in samples:
        threads.add(sample.thread)
        state = thread_state(sample.frames)
        if state == "idle":
            idle += sample.count
            continue
        busy += sample.count
        if state == "gil":
            counts[Limit.GIL] += sample.count
        elif state == "lock":
            counts[Limit.LOCK] += sample.count
        if any(_is_tokenizer(f) for f in sample.frames):
            counts[Limit.TOKENIZER] += sample.count
        if any(_is_logging(f) for f in sample.frames):
            counts[Limit.LOGGING] += sample.count
        python = [f for f in sample.frames if f.python] or list(sample.frames)
        for key in {f.key for f in python}:
            inclusive[key] += sample.count
        if python:
            leaf = python[-1].key
            modules[python[-1].module] += sample.count
            if state in ("gil", "lock"):
                leaf = f"({state} wait) {leaf}"
            exclusive[leaf] += sample.count
        stacks[";".join(f.key for f in python[-12:])] += sample.count
    measured = [Limit.TOKENIZER, Limit.LOGGING]
    if native:
        measured += [Limit.GIL, Limit.LOCK]
    shares = [
        Share(limit, counts[limit], counts[limit] / busy if busy else 0.0) for limit in measured
    ]
    shares.sort(key=lambda s: (-s.share, s.limit.value))

    def ranked(counter: Counter[str], n: int) -> list[dict[str, Any]]:
        return [
            {"frame": key, "samples": c, "share": round(c / busy, 4) if busy else 0.0}
            for key, c in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        ]

    return {
        "samples": total,
        "busy_samples": busy,
        "idle_samples": idle,
        "threads": len(threads),
        "native": native,
        "rate": rate,
        "seconds": seconds,
        "measured": [m.value for m in measured],
        "shares": {s.limit.value: round(s.share, 4) for s in shares},
        "top": ranked(inclusive, TOP_FRAMES),
        "self": ranked(exclusive, TOP_FRAMES),
        "modules": ranked(modules, TOP_FRAMES),
        "stacks": ranked(stacks, TOP_STACKS),
    }


def dominant(summary: Mapping[str, Any], at_least: float = NAMED_SHARE) -> Share | None:
    """The limit with the largest share in a stored summary, if it reaches ``at_least`` of at
    least ``NAMED_SAMPLES`` busy samples."""
    raw_busy = summary.get("busy_samples")
    if isinstance(raw_busy, bool) or not isinstance(raw_busy, int):
        return None
    busy = raw_busy
    if busy < NAMED_SAMPLES:
        return None
    best: Share | None = None
    for name, share in ranked_shares(summary.get("shares")):
        try:
            limit = Limit(name)
        except ValueError:
            continue
        if share >= at_least and (best is None or share > best.share):
            best = Share(limit, round(share * busy), share)
    return best


# -- validation of a returned summary ----------------------------------------------------------

#: The longest frame key kept (module and function of a ``MAX_FRAME_CHARS`` frame, a prefix).
MAX_KEY_CHARS: Final = 2 * MAX_FRAME_CHARS + 32
#: The longest stack kept (``summarise`` joins the 12 innermost keys).
MAX_STACK_CHARS: Final = 12 * (MAX_KEY_CHARS + 1)
_COUNT = Annotated[int, Field(ge=0, le=10**12)]
_SHARE = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=False)


class _Row(_Strict):
    frame: str = Field(max_length=MAX_KEY_CHARS)
    samples: _COUNT
    share: _SHARE


class _StackRow(_Row):
    frame: str = Field(max_length=MAX_STACK_CHARS)


class Summary(_Strict):
    """What a sidecar may hand back as a profile's summary (``summarise``'s output and the
    poller's additions): every number finite, every share within 0 … 1, every list and string
    bounded. Anything else is refused whole (``check_summary``)."""

    samples: _COUNT = 0
    busy_samples: _COUNT = 0
    idle_samples: _COUNT = 0
    threads: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    native: bool = False
    rate: Annotated[int, Field(ge=MIN_RATE, le=MAX_RATE)] | None = None
    seconds: Annotated[float, Field(ge=0.0, le=MAX_SECONDS)] | None = None
    measured: list[Limit] = Field(default_factory=list, max_length=len(Limit))
    shares: dict[Limit, _SHARE] = Field(default_factory=dict, max_length=len(Limit))
    top: list[_Row] = Field(default_factory=list, max_length=TOP_FRAMES)
    self_: list[_Row] = Field(default_factory=list, max_length=TOP_FRAMES, alias="self")
    modules: list[_Row] = Field(default_factory=list, max_length=TOP_FRAMES)
    stacks: list[_StackRow] = Field(default_factory=list, max_length=TOP_STACKS)
    pid: Annotated[int, Field(ge=1, le=2**32)] | None = None
    truncated: bool = False
    wall_s: Annotated[float, Field(ge=0.0, le=86_400.0)] | None = None
    profiler_cpu_s: Annotated[float, Field(ge=0.0, le=86_400.0)] | None = None


def check_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` as a validated ``Summary`` (the keys it was given), else ``InvalidInput``
    naming the first fault."""
    try:
        model = Summary.model_validate(result)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "result"
        raise InvalidInput(
            f"the profile summary is malformed at {where}: {first['msg']}",
            details={"errors": len(exc.errors())},
        ) from None
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)

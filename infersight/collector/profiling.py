"""The sidecar's profiler: sample the serving process with py-spy when asked.

A ``ProfilePoller`` thread asks its ``core.profile.ProfileChannel`` every ``poll_s`` for a
pending profile request of this instance (the store directly, or the API's ingest routes with
``--ship-to``: ``RemoteChannel``), runs it, and hands the summary back. One profile runs at a
time (one thread; a request claimed while another runs waits for the next poll).

``Profiler.run`` finds the serving process (``ProfileTarget``: a pid, a pid file, or a process
whose command line contains a name — among those, one whose executable is a Python interpreter
first, then the oldest: a ``sh -c`` wrapper or a launcher is passed over; a pid file is the
exact way), runs ``py-spy record --format raw`` on it for at
most ``max_seconds`` at at most ``max_rate`` samples per second, every thread (``--idle
--threads``), with native frames where py-spy can take them (``--native``: the GIL and lock
waits are then measurable, ``core.profile``; py-spy pauses the process for each native sample,
hence the small rate) and else without pausing it (``--nonblocking``). The py-spy child runs at
a lower CPU priority (``nice``), its output file is read up to ``max_output_bytes``, its
diagnostics up to 4 KiB, and it is killed past its duration plus a grace period.

Whatever prevents a profile becomes its stored reason, never an exception: ``not permitted:
…`` (py-spy cannot attach: the sidecar needs ``SYS_PTRACE`` and the pod
``shareProcessNamespace: true``), ``py-spy missing: …``, ``process not found: …``,
``failed: …``. An exception inside the profiler is one too (``failed: …``): the claim is
completed either way, never left running.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from infersight.core.errors import ConfigurationError, InfersightError, Unavailable
from infersight.core.profile import (
    MAX_RATE,
    MAX_SECONDS,
    ProfileChannel,
    ProfileRequest,
    parse_folded,
    summarise,
)

log = logging.getLogger(__name__)

#: Seconds py-spy may run beyond its duration (attaching, writing) before it is killed.
GRACE_S: Final = 30.0
_MAX_STDERR: Final = 4096
_NOT_PERMITTED: Final = ("permission denied", "operation not permitted", "ptrace", "eperm")
_NOT_FOUND: Final = ("no such process", "failed to find python", "couldn't find", "not found")


@dataclass(frozen=True, slots=True)
class ProfileTarget:
    """Which process to sample: ``PID``, a pid file's path, or a name its command line holds."""

    spec: str

    def __post_init__(self) -> None:
        if not self.spec.strip():
            raise ConfigurationError("--profile-target must name a pid, a pid file or a name")

    def resolve(self) -> int:
        """The pid, or ``LookupError`` saying why none."""
        spec = self.spec.strip()
        if spec.isdigit():
            pid = int(spec)
            if not Path(f"/proc/{pid}").exists():
                raise LookupError(f"no process {pid}")
            return pid
        if "/" in spec:
            try:
                text = Path(spec).read_text(encoding="ascii", errors="replace")[:64].strip()
            except OSError as exc:
                raise LookupError(f"cannot read pid file {spec}: {exc.strerror}") from None
            if not text.isdigit():
                raise LookupError(f"pid file {spec} holds no pid")
            return ProfileTarget(text).resolve()
        return _by_name(spec)


def _by_name(name: str) -> int:
    """A process whose command line contains ``name``, other than this process, the sidecar's
    command and py-spy itself: one whose executable is a Python interpreter first (a ``sh -c``
    wrapper or a launcher holds the name too), then the oldest (lowest pid)."""
    me = os.getpid()
    found: list[tuple[bool, int]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            raw = (entry / "cmdline").read_bytes()[:8192]
        except OSError:
            continue
        line = raw.replace(b"\0", b" ").decode("utf-8", "replace")
        if name in line and "--profile-target" not in line and "py-spy" not in line:
            found.append((not _is_python(entry), int(entry.name)))
    if not found:
        raise LookupError(f"no process whose command line contains {name!r}")
    return min(found)[1]


def _is_python(proc: Path) -> bool:
    """Whether ``/proc/PID``'s executable is a Python interpreter (``python``, ``python3.11``,
    ``pypy3``…): by ``exe`` where readable, else by the first word of its command line."""
    try:
        exe = os.readlink(proc / "exe")
    except OSError:
        try:
            exe = (
                (proc / "cmdline").read_bytes()[:4096].split(b"\0", 1)[0].decode("utf-8", "replace")
            )
        except OSError:
            return False
    base = exe.removesuffix(" (deleted)").rsplit("/", 1)[-1]
    return re.fullmatch(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[a-z]*", base) is not None


def find_py_spy(given: str | None = None) -> str | None:
    """``given``, else the py-spy installed beside this interpreter, else on ``PATH``."""
    if given:
        return given
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


@dataclass(frozen=True, slots=True)
class ProfilerConfig:
    target: ProfileTarget
    #: The longest and the fastest a profile may sample (requests are capped to them).
    max_seconds: float = 30.0
    max_rate: int = 50
    #: Native frames (GIL and lock waits measurable; pauses the process per sample).
    native: bool = True
    max_output_bytes: int = 16 * 1024 * 1024
    py_spy: str | None = None
    #: Run py-spy under this prefix (``["setpriv", "--reuid", …]``: tests, a restricted user).
    prefix: tuple[str, ...] = ()
    nice: int = 10
    poll_s: float = 5.0

    def __post_init__(self) -> None:
        if not 1.0 <= self.max_seconds <= MAX_SECONDS:
            raise ConfigurationError(
                f"the profile's longest duration must be 1 … {MAX_SECONDS:g} s"
            )
        if not 1 <= self.max_rate <= MAX_RATE:
            raise ConfigurationError(f"the profile's sampling rate must be 1 … {MAX_RATE} Hz")
        if not self.poll_s > 0:
            raise ConfigurationError("the profile poll interval must be positive")


@dataclass(slots=True)
class Outcome:
    """A profile's summary, or why there is none."""

    summary: dict[str, Any] | None
    error: str = ""
    pid: int | None = None
    #: CPU seconds the py-spy child spent (user + system), for the cost measurement.
    cpu_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class Profiler:
    """Runs one profile at a time (a second caller waits for the first)."""

    def __init__(self, config: ProfilerConfig) -> None:
        self.config = config
        self._lock = threading.Lock()

    def run(self, seconds: float, rate: int) -> Outcome:
        with self._lock:
            return self._run(min(seconds, self.config.max_seconds), min(rate, self.config.max_rate))

    def _run(self, seconds: float, rate: int) -> Outcome:
        try:
            pid = self.config.target.resolve()
        except LookupError as exc:
            return Outcome(None, f"process not found: {exc}")
        binary = find_py_spy(self.config.py_spy)
        if binary is None or not (self.config.prefix or Path(binary).exists()):
            return Outcome(None, "py-spy missing: install infersight[sidecar] (py-spy)", pid)
        outcome = self._record(binary, pid, seconds, rate, native=self.config.native)
        if outcome.error.startswith("native:"):
            # py-spy cannot take native frames here (a platform without them): sample without.
            outcome = self._record(binary, pid, seconds, rate, native=False)
        return outcome

    def _record(self, binary: str, pid: int, seconds: float, rate: int, *, native: bool) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp:
            out = Path(tmp) / "stacks.txt"
            if self.config.prefix:
                os.chmod(tmp, 0o777)  # noqa: S103 (a prefix may run py-spy as another user)
            argv = [
                *self.config.prefix, binary, "record", "--pid", str(pid), "--format", "raw",
                "--output", str(out), "--duration", str(max(1, round(seconds))),
                "--rate", str(rate), "--idle", "--threads",
                *(["--native"] if native else ["--nonblocking"]),
            ]  # fmt: skip
            try:
                child = subprocess.Popen(  # noqa: S603 (a fixed argv)
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            except FileNotFoundError:
                return Outcome(None, f"py-spy missing: {binary} not found", pid)
            except PermissionError as exc:
                return Outcome(None, f"not permitted: cannot run py-spy: {exc.strerror}", pid)
            with contextlib.suppress(OSError):  # a lower priority is a courtesy
                os.setpriority(os.PRIO_PROCESS, child.pid, self.config.nice)
            code, usage, err = _wait(child, seconds + GRACE_S)
            if code is None:
                return Outcome(None, f"failed: py-spy ran past {seconds + GRACE_S:.0f} s", pid)
            message = err[:_MAX_STDERR].decode("utf-8", "replace")
            if code != 0 or not out.exists():
                return Outcome(None, _reason(message, pid, native), pid, usage)
            size = out.stat().st_size
            with out.open("rb") as f:
                raw = f.read(self.config.max_output_bytes)
        if size > self.config.max_output_bytes:
            # A cut line at the end would be misread: keep whole lines only.
            raw = raw[: raw.rfind(b"\n") + 1]
        try:
            samples = parse_folded(raw.decode("utf-8", "replace"))
        except InfersightError as exc:
            return Outcome(None, f"failed: unreadable py-spy output: {exc}", pid, usage)
        summary = summarise(samples, native=native, rate=rate, seconds=seconds)
        summary["pid"] = pid
        summary["truncated"] = size > self.config.max_output_bytes
        return Outcome(summary, "", pid, usage)


def _wait(child: subprocess.Popen[bytes], timeout_s: float) -> tuple[int | None, float, bytes]:
    """(exit code, CPU seconds of this child alone, its stderr up to ``_MAX_STDERR``); the
    code is ``None`` when it ran past ``timeout_s`` and was killed. ``wait4`` reaps the child
    with its own resource usage (``RUSAGE_CHILDREN`` would mix in the decoders')."""
    chunks: list[bytes] = []
    assert child.stderr is not None
    stream = child.stderr

    def drain() -> None:
        while block := stream.read(4096):
            if sum(map(len, chunks)) < _MAX_STDERR:
                chunks.append(block)

    reader = threading.Thread(target=drain, name="py-spy-stderr", daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    code: int | None = None
    cpu = 0.0
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            child.returncode = code
            cpu = usage.ru_utime + usage.ru_stime
            break
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            break
        time.sleep(0.05)
    reader.join(5)
    stream.close()
    return code, cpu, b"".join(chunks)


def _reason(message: str, pid: int, native: bool) -> str:
    # py-spy's advice to rerun it under sudo is not the sidecar's to follow: left out.
    text = " ".join(message.split()).split(" Try running again")[0].rstrip(": ")
    lowered = text.lower()
    first = text[:300] or "no diagnostics"
    if native and "native" in lowered and ("not supported" in lowered or "unsupported" in lowered):
        return f"native: {first}"
    if any(s in lowered for s in _NOT_PERMITTED):
        return (
            f"not permitted: py-spy cannot attach to process {pid} (the sidecar needs "
            f"SYS_PTRACE and a shared process namespace): {first}"
        )
    if any(s in lowered for s in _NOT_FOUND):
        return f"process not found: process {pid} is gone or is not Python: {first}"
    return f"failed: {first}"


class RemoteChannel:
    """The profile channel through the API (``POST /api/v1/ingest/profiles/…``, an
    ``ingest``-scoped token), for a sidecar that ships with ``--ship-to``."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        scheme = base_url.partition("://")[0].lower()
        if scheme not in ("http", "https") or "://" not in base_url:
            raise ConfigurationError("the ingest URL must be http:// or https://")
        if not token:
            raise ConfigurationError("the profile channel needs an ingest token")
        self.url = base_url.rstrip("/") + "/api/v1/ingest/profiles"
        self._token = token
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never the token
        return f"RemoteChannel({self.url!r})"

    def claim(self, instance: str) -> ProfileRequest | None:
        answer = self._post("/claim", {"instance": instance})
        got = answer.get("request")
        if not isinstance(got, dict):
            return None
        return ProfileRequest(
            int(got["id"]), str(got["instance"]), float(got["seconds"]), int(got["rate"]),
            str(got.get("nonce") or ""),
        )  # fmt: skip

    def complete(
        self, request: ProfileRequest, result: Mapping[str, Any] | None, error: str
    ) -> None:
        body = {"instance": request.instance, "nonce": request.nonce, "result": result,
                "error": error}  # fmt: skip
        self._post(f"/{int(request.id)}", body)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 (http/s checked above)
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"content-type": "application/json", "authorization": f"Bearer {self._token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:  # noqa: S310
                data = json.loads(reply.read(1 << 20) or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise Unavailable(
                    f"the API refused the profile channel's token ({exc.code}): it needs an "
                    "ingest-scoped token"
                ) from None
            raise Unavailable(
                f"the API answered {exc.code} to the profile channel: {_message(exc)}"
            ) from None
        except (OSError, ValueError) as exc:
            raise Unavailable(f"the profile channel cannot reach the API: {exc}") from None
        return data if isinstance(data, dict) else {}


def _message(exc: urllib.error.HTTPError) -> str:
    """The API's error message (``{"error": {"message": …}}``), at most 300 characters."""
    try:
        data = json.loads(exc.read(16384) or b"{}")
    except (OSError, ValueError):
        return "no message"
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return (
        str(message or data.get("detail") or "no message")[:300]
        if isinstance(data, dict)
        else "no message"
    )


class ProfilePoller:
    """Claims this instance's profile requests and runs them, one at a time."""

    def __init__(
        self,
        instance: str,
        profiler: Profiler,
        channel: ProfileChannel | Callable[[], ProfileChannel],
        poll_s: float | None = None,
    ) -> None:
        self.instance = instance
        self.profiler = profiler
        self._channel = channel
        self.poll_s = poll_s if poll_s is not None else profiler.config.poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.done = 0
        self.last_error = ""

    def _open(self) -> ProfileChannel:
        channel = self._channel
        if callable(channel) and not hasattr(channel, "claim"):
            channel = self._channel = channel()
        return channel  # type: ignore[return-value]

    def start(self) -> ProfilePoller:
        self._thread = threading.Thread(target=self._loop, name="profiler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def health(self) -> dict[str, Any]:
        return {"profiles": self.done, "profile_channel_error": self.last_error or None}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
                self.last_error = ""
            except Exception as exc:  # the channel is down: try again next poll
                if str(exc) != self.last_error:
                    log.warning("profile channel: %s", exc)
                self.last_error = str(exc)
            self._stop.wait(self.poll_s)

    def poll_once(self) -> bool:
        """Claim and run one request; whether there was one."""
        channel = self._open()
        request = channel.claim(self.instance)
        if request is None:
            return False
        log.info("profiling %s for %.0f s at %d Hz", self.instance, request.seconds, request.rate)
        started = time.monotonic()
        try:
            outcome = self.profiler.run(request.seconds, request.rate)
        except Exception as exc:  # a bug or an OS error: the claim is answered all the same
            log.exception("the profile of %s failed", self.instance)
            outcome = Outcome(None, f"failed: {type(exc).__name__}: {exc}"[:1000])
        if outcome.summary is not None:
            outcome.summary["wall_s"] = round(time.monotonic() - started, 3)
            outcome.summary["profiler_cpu_s"] = round(outcome.cpu_s, 3)
        try:
            channel.complete(request, outcome.summary, outcome.error)
        except InfersightError as exc:
            if outcome.summary is None:
                raise
            # The summary was refused (malformed, too large): say so rather than nothing.
            log.warning("the profile of %s was refused: %s", self.instance, exc)
            channel.complete(request, None, f"failed: the summary was refused: {exc}"[:1000])
        self.done += 1
        return True

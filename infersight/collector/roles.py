"""The sidecar's part in disaggregated prefill/decode serving: declared, or read from the
server's own ``/metrics``.

``--role`` given: that role, always. Otherwise the role the scraped server's series say
(``scrape.flavours.server_role``: SGLang's ``engine_type``, Dynamo's ``worker_type``), else
unified. A declared role that the server contradicts is kept (the operator said so), and the
contradiction is logged once and shown in ``/healthz``.

**Exports received before the first scrape.** The role decides how a span is mapped (on a
prefill instance every request span is a prefill leg, stored apart) and how long a request
waits for its trace's other pieces, so a record mapped with the wrong role would be stored
wrongly for good. While the role is neither declared nor yet read (a scrape is configured
and has not answered), an export waits in its receiver slot, before it is mapped, until the
first scrape has answered or ``wait_s`` since the start has passed; it is acknowledged only
then, so nothing is lost and nothing is stored under a guessed role (the exporters' requests
take that much longer, once). After ``wait_s`` without an answer the role is unified until a
scrape says otherwise. A role that changes later applies to exports received from then on.
In practice an engine serves ``/metrics`` from the process that serves requests, so the
first scrape answers before the first span is exported and nothing waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from infersight.core.records import Role

log = logging.getLogger(__name__)


def role_name(role: Role | None) -> str:
    """How a role is named to an operator."""
    if role is None:
        return "unknown"
    return role.value or "unified"


class RoleSource:
    """The role exports are mapped with (``current``), fed by each successful scrape
    (``learned``); ``wait`` holds an export while the role is pending (see the module)."""

    def __init__(
        self,
        declared: Role | None,
        wait_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[Role], None] | None = None,
    ) -> None:
        self.declared = declared
        self.wait_s = wait_s
        self._clock = clock
        self._deadline = clock() + wait_s
        self.on_change = on_change or (lambda role: None)
        self._lock = threading.Lock()
        self._settled = threading.Event()
        if declared is not None or wait_s <= 0:
            self._settled.set()
        #: The last role the server's series named (``None``: none named yet).
        self.scraped: Role | None = None
        self.evidence = ""
        self._said: set[str] = set()  # warnings given once

    @property
    def current(self) -> Role:
        if self.declared is not None:
            return self.declared
        return self.scraped if self.scraped is not None else Role.UNIFIED

    @property
    def source(self) -> str:
        if self.declared is not None:
            return "--role"
        if self.scraped is not None:
            return "/metrics"
        return "pending" if not self._settled.is_set() else "default"

    @property
    def conflict(self) -> str:
        """A declared role the server contradicts, in words ("" when none)."""
        if self.declared is None or self.scraped is None or self.scraped is self.declared:
            return ""
        return (
            f"--role {role_name(self.declared)} but the server's /metrics say "
            f"{role_name(self.scraped)} ({self.evidence}); --role is kept"
        )

    def learned(self, role: str | None, evidence: str) -> None:
        """What one successful scrape said (``flavours.ServerRole``). A scrape that names no
        role keeps the last one named (a label may be missing from one exposition)."""
        before = self.current
        with self._lock:
            if role is not None:
                self.scraped, self.evidence = Role(role), evidence
            elif evidence:
                self._once(
                    "ambiguous", "the server's /metrics name two roles (%s): ignored", evidence
                )
        conflict = self.conflict
        if conflict:
            self._once("conflict", "role: %s", conflict)
        self._settled.set()
        after = self.current
        if self.declared is None and role is not None and after is not before:
            log.info("role %s, read from the server's /metrics (%s)", role_name(after), evidence)
        if after is not before:
            self.on_change(after)

    def pending(self) -> bool:
        """Whether an export would wait now (``wait``)."""
        return not self._settled.is_set()

    def wait(self) -> None:
        """Hold the calling export until the role is known, at most until ``wait_s`` after
        the start (then the role is unified until a scrape names one)."""
        if self._settled.is_set():
            return
        remaining = self._deadline - self._clock()
        if remaining > 0 and self._settled.wait(remaining):
            return
        if not self._settled.is_set():
            self._settled.set()
            self._once(
                "timeout",
                "no role read from the server's /metrics within %gs: unified until a scrape "
                "names one (give --role to say it)",
                self.wait_s,
            )

    def _once(self, key: str, message: str, *args: Any) -> None:
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        log.warning(message, *args)

    def health(self) -> dict[str, Any]:
        """``/healthz``'s ``role``: the role, where it came from, what the server said."""
        state: dict[str, Any] = {"role": role_name(self.current), "source": self.source}
        if self.scraped is not None:
            state["scraped"] = role_name(self.scraped)
            state["evidence"] = self.evidence
        if conflict := self.conflict:
            state["conflict"] = conflict
        return state

"""Real HTTP in virtual time: an event loop whose clock moves only when every task waits
(the tests of the model and the load generator, and the demo's step load test).

The loop's ``time()`` is a virtual clock. Computing costs no virtual time; when no socket is
ready and every task waits on a timer, the clock jumps to the earliest timer. A simulated
server (``RealtimeServer(clock=loop.time)``) under uvicorn and an httpx client on the same
loop then exchange real requests over loopback TCP, while timings are the model's alone:
what a loaded host adds (scheduling delays, a starved process, the GIL) takes no virtual
time. Tests about the model and the client's arithmetic run here; tests about the wall
clock stay on the wall clock.

Before each jump the loop waits, in real time, until none of this process's loopback TCP data
is on its way (the kernel's counters: a peer has received every byte sent, nothing is queued
unsent, no handshake is half done; on a loaded host the kernel may deliver late), so the
clock never outruns bytes in flight. Names are resolved and executor jobs run inline, so no
thread's work is outrun by the clock either. A pass over ready work costs a microsecond
(``tick_s``), so code that polls until the clock moves (the simulator's driver does, for an
instant, when its next step is due exactly now) sees it move, as it would on a wall clock.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import socket
import stat
import struct
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import uvicorn

T = TypeVar("T")

# ``struct tcp_info`` (linux/tcp.h): state at 0, bytes_received at 128, notsent_bytes at 144,
# bytes_sent at 200 and bytes_retrans at 208 (Linux 4.19 and later). Sent bytes count a
# retransmission (a tail-loss probe, even on loopback) twice; received bytes count it once.
_TCP_INFO_LEN = 216
_ESTABLISHED, _SYN_SENT, _SYN_RECV = 1, 2, 3
#: A receiver that stopped reading keeps bytes unsent for ever; past this the clock moves on
#: (so that its timeout can fire). Never reached while the peers read.
_STUCK_S = 1.0


def _tcp_in_flight() -> bool:
    """Whether any loopback TCP byte or handshake of this process is still on its way."""
    sent: dict[tuple[Any, Any], int] = {}
    received: dict[tuple[Any, Any], int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        with sock:
            if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
                continue
            try:
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
                state = info[0]
                if state in (_SYN_SENT, _SYN_RECV):
                    return True
                if state != _ESTABLISHED or len(info) < _TCP_INFO_LEN:
                    continue
                ends = (sock.getsockname(), sock.getpeername())
            except OSError:
                continue
            if struct.unpack_from("I", info, 144)[0]:  # queued, not sent (autocorked)
                return True
            sent[ends] = (
                struct.unpack_from("Q", info, 200)[0] - struct.unpack_from("Q", info, 208)[0]
            )
            received[ends] = struct.unpack_from("Q", info, 128)[0]
    return any(n > received.get((peer, local), n) for (local, peer), n in sent.items())


class _Selector(selectors.BaseSelector):
    """A real selector that, when nothing is ready, moves the virtual clock instead of waiting."""

    def __init__(self, loop: VirtualTimeLoop, quiet_s: float, tick_s: float) -> None:
        self._inner = selectors.DefaultSelector()
        self._loop, self._quiet_s, self._tick_s = loop, quiet_s, tick_s

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:  # work is ready: a pass costs a tick
            self._loop.advance(self._tick_s)
            return self._inner.select(0)
        events = self._inner.select(0)
        if events or timeout is None:  # no timer at all: only real I/O can wake the loop
            return events or self._inner.select(None)
        stuck = time.monotonic() + _STUCK_S
        while _tcp_in_flight() and time.monotonic() < stuck:  # real time: let bytes land
            events = self._inner.select(self._quiet_s)
            if events:
                return events
        self._loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, quiet_s: float = 0.001, tick_s: float = 1e-6) -> None:
        self._now = 0.0
        super().__init__(_Selector(self, quiet_s, tick_s))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    async def getaddrinfo(self, *args: Any, **kwargs: Any) -> Any:
        return socket.getaddrinfo(*args, **kwargs)  # loopback literals: no lookup, no thread

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as error:  # handed to whoever awaits the job
            future.set_exception(error)
        return future


def run_in_virtual_time(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)


@asynccontextmanager
async def serving_here(app: Any) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free loopback port, on the running loop; yields its URL."""
    # IPPROTO_TCP spelled out: asyncio then sets TCP_NODELAY on the accepted connections, as
    # on a server uvicorn binds itself (with proto 0 it does not, and Nagle holds each small
    # SSE chunk until the client's delayed ACK, on the wall clock).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="none"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # wakes on the server's own progress, not on a budget
            assert not task.done(), "the server could not start"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()

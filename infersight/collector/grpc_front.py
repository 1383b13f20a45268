"""Our own accept loop in front of the OTLP/gRPC receiver, so silent sockets cannot take it.

gRPC closes connections past ``grpc.max_allowed_incoming_connections`` itself and cannot be
told which to close: a client holding the cap's worth of silent sockets (and reopening them as
they close) left no room for an exporter. So gRPC listens on a loopback port of its own and
``GrpcFront`` (an asyncio server in a thread) takes the public port and relays each connection
to it, byte for byte, under the HTTP side's policy (``httpd``):

- **A newcomer is held apart from the cap** (``pending`` places) until it has sent the
  HTTP/2 client preface (``PRI * HTTP/2.0…``), which every gRPC client sends first, and a
  place under the cap is free for it. It has ``preface_s`` for both; a wrong preface is
  closed at once. When the held connections fill their places, the oldest silent one is
  closed for the newcomer (else the oldest waiting): silent sockets only ever push out each
  other, never a connection that is relayed.
- **Connections that sent the preface take places in their order** (first come, first
  relayed) and count against the cap (``max_connections``). When the cap is full, a place is
  made for the first waiting by closing the oldest relayed connection that has not started a
  call ``STALL_S`` after it was let through (no HTTP/2 HEADERS frame: stalled after the
  preface), else the connection idle longest (no byte either way for ``idle_evict_s``),
  never one with a call in progress (a stream the client opened that neither side has ended,
  read from the frame headers as they pass; counted for up to ``CALL_S``). Otherwise it
  waits, and is closed at its deadline.

The receiver reads its peers through ``peer_of``: the client's address, not the front's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Final

#: What every HTTP/2 client sends first (RFC 9113, section 3.4).
PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_CHUNK: Final = 65536
#: A call in progress is never closed for a newcomer before this long without a byte (the
#: receiver answers an export within its 30 s acknowledgement bound).
CALL_S: Final = 60.0
#: A relayed connection without a call this long after it was let through (a gRPC client
#: starts its first call a round trip after the preface) may be closed for a waiting one.
STALL_S: Final = 1.0
#: How often connections waiting for a place look again when nothing has changed.
TICK_S: Final = 0.1


#: HTTP/2 frame types and the END_STREAM flag (RFC 9113, section 6).
_DATA: Final = 0x0
_HEADERS: Final = 0x1
_RST_STREAM: Final = 0x3
_END_STREAM: Final = 0x1
#: Open streams remembered per connection at most.
_MAX_OPEN: Final = 1024


class _Streams:
    """The calls on one connection, read from the HTTP/2 frame headers as bytes pass either
    way (after the client's preface): the streams the client opened, and those still open (no
    END_STREAM from the server and no reset either way yet)."""

    __slots__ = ("last", "open", "started")

    def __init__(self) -> None:
        self.started = 0
        self.last = 0  # a client's new stream has a higher id than every earlier one
        self.open: set[int] = set()

    def frame(self, kind: int, flags: int, stream: int, from_client: bool) -> None:
        if from_client and kind == _HEADERS and stream > self.last:
            self.last = stream
            if len(self.open) < _MAX_OPEN:  # gRPC refuses streams past its own cap anyway
                self.open.add(stream)
            self.started += 1
        elif kind == _RST_STREAM or (
            not from_client and kind in (_DATA, _HEADERS) and flags & _END_STREAM
        ):
            self.open.discard(stream)


class _Frames:
    """Splits one direction's bytes into HTTP/2 frame headers for ``_Streams``."""

    __slots__ = ("_from_client", "_header", "_skip", "_streams")

    def __init__(self, streams: _Streams, from_client: bool) -> None:
        self._header = b""
        self._skip = 0
        self._streams = streams
        self._from_client = from_client

    def feed(self, data: bytes) -> None:
        at = 0
        while at < len(data):
            if self._skip:
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                continue
            need = 9 - len(self._header)
            self._header += data[at : at + need]
            at += need
            if len(self._header) == 9:
                header, self._header = self._header, b""
                self._skip = int.from_bytes(header[:3], "big")
                stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
                self._streams.frame(header[3], header[4], stream, self._from_client)


@dataclass(eq=False)
class _Conn:
    writer: asyncio.StreamWriter
    opened: float
    prefaced: bool = False  # sent the preface
    spoke: bool = False  # relayed, under the cap
    relayed: float = 0.0  # since when
    last_in: float = 0.0  # last byte from the client
    last_out: float = 0.0  # last byte to the client
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    streams: _Streams = field(default_factory=_Streams)

    @property
    def calls(self) -> int:
        """Calls the client started on this connection."""
        return self.streams.started

    def idle_s(self, now: float) -> float:
        return now - max(self.last_in, self.last_out, self.opened)

    @property
    def in_call(self) -> bool:
        """A call the client started has not ended (by the server's END_STREAM or a reset)."""
        return bool(self.streams.open)

    def close(self) -> None:
        for writer in (self.writer, self.upstream):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()


class GrpcFront:
    """The public listener relaying to gRPC on ``upstream_port`` (module doc)."""

    def __init__(
        self,
        host: str,
        port: int,
        upstream_port: int,
        *,
        max_connections: int,
        pending: int,
        preface_s: float,
        idle_evict_s: float = 1.0,
    ) -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.max_connections = max_connections
        self.pending = pending
        self.preface_s = preface_s
        self.idle_evict_s = idle_evict_s
        self._conns: list[_Conn] = []  # oldest first
        self._waiting: list[_Conn] = []  # sent the preface, waiting for a place: first first
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()  # one per accepted connection
        self._peers: dict[int, str] = {}  # the relay's loopback port -> the client's peer
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        #: Connections closed for another, and newcomers turned away (for tests and metrics).
        self.evicted = 0
        self.refused = 0
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, host, port, backlog=1024)
            )
        except BaseException:
            self._loop.close()
            raise
        self.port: int = self._server.sockets[0].getsockname()[1]

    # -- life --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="otlp-grpc-front", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for conn in list(self._conns):
                conn.close()
            self._changed.set()
            if self._tasks:  # each ends once its connection is closed
                _, left = await asyncio.wait(self._tasks, timeout=5)
                for task in left:
                    task.cancel()
                if left:
                    await asyncio.wait(left, timeout=5)

        if self._thread is not None and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        else:
            self._loop.run_until_complete(close())
        self._loop.close()

    def open_streams(self) -> int:
        """Calls in progress on the relayed connections (``_Streams``)."""
        return sum(len(c.streams.open) for c in list(self._conns))

    def peer_of(self, grpc_peer: str) -> str:
        """The client's peer (``ipv4:ADDR:PORT``) for gRPC's peer of the relayed connection
        (``grpc_peer`` itself when it is not one of ours)."""
        _, _, port = grpc_peer.rpartition(":")
        return self._peers.get(int(port), grpc_peer) if port.isdigit() else grpc_peer

    # -- policy -------------------------------------------------------------------------------

    def _make_room_unrelayed(self) -> None:
        """Keep the connections not relayed yet within ``pending``: the oldest silent one
        goes first, else the oldest waiting for a place."""
        unrelayed = [c for c in self._conns if not c.spoke]
        while len(unrelayed) >= self.pending:
            silent = [c for c in unrelayed if not c.prefaced]
            victim = (silent or unrelayed)[0]
            unrelayed.remove(victim)
            self._drop(victim)

    def _take_place(self, conn: _Conn, now: float) -> bool:
        """A place under the cap for ``conn`` (the first waiting): a free one, or one made by
        closing the oldest relayed connection stalled after the preface (no call within
        ``STALL_S``), else the one idle longest (``_evictable``); ``False`` for now."""
        if not self._waiting or self._waiting[0] is not conn:
            return False
        relayed = [c for c in self._conns if c.spoke]
        if len(relayed) >= self.max_connections:
            stalled = [c for c in relayed if not c.calls and now - c.relayed >= STALL_S]
            idle = [c for c in relayed if self._evictable(c, now)]
            if stalled:
                self._drop(stalled[0])
            elif idle:
                self._drop(max(idle, key=lambda c: c.idle_s(now)))
            else:
                return False
        self._waiting.pop(0)
        conn.spoke, conn.relayed = True, now
        return True

    def _evictable(self, conn: _Conn, now: float) -> bool:
        """Idle for ``idle_evict_s``, and not in a call (one counts ``CALL_S`` at most)."""
        idle = conn.idle_s(now)
        return idle >= self.idle_evict_s and (not conn.in_call or idle >= CALL_S)

    def _drop(self, conn: _Conn) -> None:
        self.evicted += 1
        self._forget(conn)
        conn.close()

    def _forget(self, conn: _Conn) -> None:
        if conn in self._conns:
            self._conns.remove(conn)
        if conn in self._waiting:
            self._waiting.remove(conn)
        self._changed.set()  # a place may be free: the waiters look again

    # -- relaying -----------------------------------------------------------------------------

    async def _wait_for_place(self, conn: _Conn, deadline: float) -> bool:
        self._waiting.append(conn)
        while conn in self._conns:
            now = time.monotonic()
            if self._take_place(conn, now):
                return True
            if now >= deadline:
                break
            changed = self._changed
            # Woken by a change, or after a tick (a stalled or idle one may have aged).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(TICK_S, deadline - now))
            if changed is self._changed and changed.is_set():
                self._changed = asyncio.Event()
        if conn in self._conns:
            self.refused += 1
        self._forget(conn)
        conn.close()
        return False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        now = time.monotonic()
        deadline = now + self.preface_s
        conn = _Conn(writer, now)
        self._make_room_unrelayed()
        self._conns.append(conn)
        try:
            first = await asyncio.wait_for(reader.readexactly(len(PREFACE)), self.preface_s)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            self._forget(conn)
            conn.close()
            return
        if conn not in self._conns:  # closed for a newcomer meanwhile
            return
        if first != PREFACE:
            self._forget(conn)
            conn.close()
            return
        conn.prefaced = True
        if not await self._wait_for_place(conn, deadline):
            return
        conn.last_in = time.monotonic()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            self._forget(conn)
            conn.close()
            return
        conn.upstream = up_writer
        local_port = up_writer.get_extra_info("sockname")[1]
        self._peers[local_port] = _peer(writer.get_extra_info("peername"))
        up_writer.write(first)
        try:
            to_server = asyncio.ensure_future(self._pipe(reader, up_writer, conn, inbound=True))
            to_client = asyncio.ensure_future(self._pipe(up_reader, writer, conn, inbound=False))
            conn.tasks = [to_server, to_client]
            _, other = await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
            # Closing both ends the other direction too: it finishes, not cancelled, so no
            # exception keeps its frame (and the bytes it held) in a reference cycle.
            conn.close()
            if other:
                await asyncio.wait(other)
        finally:
            for task in conn.tasks:
                task.cancel()
            conn.tasks = []
            self._peers.pop(local_port, None)
            self._forget(conn)
            conn.close()

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, conn: _Conn, inbound: bool
    ) -> None:
        frames = _Frames(conn.streams, from_client=inbound)
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while data := await source.read(_CHUNK):
                if inbound:
                    conn.last_in = time.monotonic()
                else:
                    conn.last_out = time.monotonic()
                frames.feed(data)
                sink.write(data)
                await sink.drain()


def _peer(address: object) -> str:
    """gRPC's spelling of a TCP peer: ``ipv4:ADDR:PORT`` or ``ipv6:[ADDR]:PORT``."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), address[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
    return "unknown"

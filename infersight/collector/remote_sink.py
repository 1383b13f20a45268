"""A ``core.write.Sink`` that ships to central ingest (``POST /api/v1/ingest``) over HTTP.

The shipper uses it exactly as it uses the store writer: a call returns only once the API has
answered 200, which it does only after the batch's transaction committed, so the shipper
deletes from the spool only what is durable; a batch whose answer was lost is sent again and
the store ignores the keys it has (``api.routes.ingest``). Each call is one or more bodies in
``core.wire``'s format, gzip-compressed; a call whose body would pass ``max_body_bytes`` is split
in halves until each fits (each half idempotent on its own, so a crash between halves only
replays).

Failures map onto the shipper's: a timeout, a refused connection or a 5xx (503: the store is
down behind the API) is ``Unavailable`` (retried with backoff, the spool grows); 400 is
``InvalidInput`` (the shipper isolates the bad record); 401 or 403 is ``Unavailable`` too, but
worded as the configuration error it is (a wrong or missing token, or one without the ingest
scope) so that ``/healthz`` names it while the entries wait in the spool. The token is sent
only in the ``Authorization`` header and never logged.

Late parallel-sampling sequences (``fold_sequences``) travel as ``WireKind.SEQUENCE`` batches
and are folded by the API with the store writer's own call; ``folded`` asks the API which
sequences were folded already (``POST /api/v1/ingest/folded``, the restarted sidecar's guard).
An API older than the fold answers the first with a 400 naming the unknown batch kind and the
second with a 404: that is ``FoldUnsupported`` (the shipper stores the sequences as requests
of their own, as before there was a fold, and asks again after ``RETRY_FOLD_S``), and
``folded`` answers that nothing was folded (such an API never folded anything).
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Final

from infersight.core.attribution import Attribution
from infersight.core.client import ClientRecord
from infersight.core.errors import ConfigurationError, InvalidInput, Unavailable
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.sequences import LateSequence
from infersight.core.wire import MEDIA_TYPE, KindUnsupported, WireKind, encode_entries, frame
from infersight.core.write import WriteResult

#: The API's default ``max_body_bytes``: bodies are split to fit it.
DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
#: Seconds one request may take (connect, send, the store's transaction, the answer).
DEFAULT_TIMEOUT_S: Final = 30.0
#: The most bytes of an answer read (``/folded`` answers up to ``_FOLDED_CHUNK`` keys).
_MAX_ANSWER: Final = 1024 * 1024
#: Keys per ``/folded`` question (about 110 KB of JSON).
_FOLDED_CHUNK: Final = 2000
#: Seconds before a sidecar that met an API without the fold tries the fold again.
RETRY_FOLD_S: Final = 600.0


class FoldUnsupported(InvalidInput):
    """The API predates the fold of late sequences (it refused their batch kind)."""


class _NotFound(Unavailable):
    """404: a route the API does not have (it is older than this sidecar)."""


class RemoteSink:
    """Ships to ``base_url``'s central ingest with ``token`` (an ``ingest``-scoped token)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        scheme = base_url.partition("://")[0].lower()
        if scheme not in ("http", "https") or "://" not in base_url:
            raise ConfigurationError("the ingest URL must be http:// or https://")
        if not token:
            raise ConfigurationError("shipping to central ingest needs an ingest token")
        self.url = base_url.rstrip("/") + "/api/v1/ingest"
        self._token = token
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes

    def __repr__(self) -> str:  # never the token
        return f"RemoteSink({self.url!r})"

    # --- the Sink role ---------------------------------------------------------------------

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        return self._write_keyed(WireKind.RECORD, records)

    def write_client_requests(self, records: Sequence[ClientRecord]) -> WriteResult:
        return self._write_keyed(WireKind.CLIENT, records)

    def write_attributions(self, items: Sequence[Attribution]) -> WriteResult:
        """What gateway and client spans named of their traces; ``KindUnsupported`` from an
        API that predates attribution (the shipper then drops them, counted)."""
        try:
            return self._write_keyed(WireKind.ATTRIBUTION, items)
        except InvalidInput as exc:
            if "unknown batch kind" in exc.message:
                raise KindUnsupported(
                    "central ingest does not take attributions (an older API)"
                ) from None
            raise

    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        return sum(a.get("stored", 0) for a in self._send(WireKind.GPU, samples))

    def write_server_samples(self, samples: Sequence[ServerSample]) -> int:
        return sum(a.get("stored", 0) for a in self._send(WireKind.SERVER, samples))

    def fold_sequences(self, late: Sequence[LateSequence]) -> WriteResult:
        """Fold late sequences into their stored requests (the API's writer, exactly once
        per sequence); ``FoldUnsupported`` from an API that predates the fold."""
        try:
            return self._write_keyed(WireKind.SEQUENCE, late)
        except FoldUnsupported:
            raise
        except InvalidInput as exc:
            if "unknown batch kind" in exc.message:
                raise FoldUnsupported(
                    "central ingest does not fold late sequences (an older API)"
                ) from None
            raise

    def folded(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``keys`` (trace id, span id) the store folded into a stored request."""
        out: set[tuple[str, str]] = set()
        for i in range(0, len(keys), _FOLDED_CHUNK):
            body = json.dumps({"keys": [list(k) for k in keys[i : i + _FOLDED_CHUNK]]})
            request = urllib.request.Request(  # noqa: S310 (http/s)
                self.url + "/folded", data=body.encode(), method="POST"
            )
            request.add_header("Content-Type", "application/json")
            try:
                answer = self._request(request)
            except _NotFound:
                return set()  # an API older than the fold: nothing was folded there
            for key in answer.get("folded", ()):
                if isinstance(key, list) and len(key) == 2:
                    out.add((str(key[0]), str(key[1])))
        return out

    def ping(self) -> None:
        """One authenticated round trip (the API asks the store for ``SELECT 1``)."""
        ping = urllib.request.Request(self.url + "/ping", method="GET")  # noqa: S310 (http/s)
        self._request(ping)

    # --- the wire --------------------------------------------------------------------------

    def _write_keyed(self, kind: WireKind, items: Sequence[Any]) -> WriteResult:
        answers = self._send(kind, items)
        return WriteResult(
            received=len(items),
            inserted=sum(a.get("inserted", 0) for a in answers),
            duplicates=sum(a.get("duplicates", 0) for a in answers),
            refused=sum(a.get("refused", 0) for a in answers),
        )

    def _send(self, kind: WireKind, items: Sequence[Any]) -> list[dict[str, Any]]:
        if not items:
            return []
        return [self._post(body) for body in self._bodies(kind, encode_entries(kind, items))]

    def _bodies(self, kind: WireKind, entries: list[bytes]) -> list[bytes]:
        body = gzip.compress(frame(kind, entries), compresslevel=1)
        if len(body) <= self.max_body_bytes:
            return [body]
        if len(entries) == 1:
            raise InvalidInput(f"one {kind.name.lower()} is larger than the API accepts")
        half = len(entries) // 2
        return self._bodies(kind, entries[:half]) + self._bodies(kind, entries[half:])

    def _post(self, body: bytes) -> dict[str, Any]:
        request = urllib.request.Request(self.url, data=body, method="POST")  # noqa: S310
        request.add_header("Content-Type", MEDIA_TYPE)
        request.add_header("Content-Encoding", "gzip")
        return self._request(request)

    def _request(self, request: urllib.request.Request) -> dict[str, Any]:
        request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                raw = response.read(_MAX_ANSWER)
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from None
        except (OSError, TimeoutError) as exc:  # refused, reset, timed out, DNS
            raise Unavailable(f"central ingest at {self.url} does not answer: {exc}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise Unavailable("central ingest answered 200 without a JSON body") from None
        return answer if isinstance(answer, dict) else {}

    def _refusal(self, exc: urllib.error.HTTPError) -> Exception:
        try:
            detail = json.loads(exc.read(_MAX_ANSWER))["error"]["message"]
        except (ValueError, KeyError, TypeError, OSError):
            detail = exc.reason
        finally:
            exc.close()
        status = exc.code
        if status in (401, 403):
            return Unavailable(
                f"configuration error: central ingest refused the token ({status}: {detail}); "
                "give an ingest-scoped token with --ship-token-file"
            )
        if status == 404:
            return _NotFound(f"central ingest answered 404: {detail}")
        if status in (400, 413, 422):
            return InvalidInput(f"central ingest refused the batch ({status}): {detail}")
        return Unavailable(f"central ingest answered {status}: {detail}")

"""One reader for every versioned document kind: SLO, CostModel, ScalingPolicy and Budget.

A document is a YAML or JSON mapping (JSON is YAML)::

    apiVersion: infersight/v1      # the versions its kind reads (SLO also reads openslo/v1)
    kind: SLO                      # one of the kinds the caller asked for
    metadata: {name: chat-ttft, description: "…"}   # other metadata keys are ignored
    spec: {…}                      # the kind's own schema

A stream of documents (a file, a request body) is read in three steps, the same for every kind:

1. **The stream.** At most ``MAX_BYTES``; YAML that parses; at most ``MAX_DOCUMENTS``
   documents (empty ones are skipped); at most ``MAX_VALUES`` values in all, counting a YAML
   alias once per use (so an alias bomb is refused before anything walks it); no control
   character (other than tab and line breaks) and no lone surrogate in any key or string.
2. **The header.** A mapping; a ``kind`` the caller reads; an ``apiVersion`` that kind reads;
   ``metadata`` a mapping whose ``name`` is a string; nothing at the top level but
   ``apiVersion``, ``kind``, ``metadata`` and ``spec``.
3. **The kind.** Its ``Reading`` for that apiVersion: a pydantic schema of ``spec``, then a
   conversion to the core type (``core.slo.SloSpec``, ``core.cost.CostModel``, …).

Errors are ``InvalidInput``. A document's error starts ``invalid KIND document`` and names the
field (``invalid SLO document: spec.window: not a duration …``); schema problems are listed in
``details["problems"]`` as ``{"loc", "msg"}`` (one problem is also named in the message). A
stream of one document raises that document's error as it is; a stream of several reads every
document and raises one error naming each bad document by its position and name (``document 2
(SLO chat-ttft): …``). Nothing is returned from a stream with any error, so a caller that
applies what it read applies all of it or nothing.

The kinds themselves live with their types (``service.specs``, ``service.cost_spec``,
``service.scaling_spec``, ``service.budgets``); ``service.apply`` holds the table of them and
stores what was read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from infersight.core.errors import InvalidInput

__all__ = [
    "MAX_BYTES",
    "MAX_DOCUMENTS",
    "MAX_VALUES",
    "Document",
    "DocumentKind",
    "Header",
    "Metadata",
    "Reading",
    "at",
    "check_names",
    "load_one",
    "read",
    "read_document",
    "read_value",
    "read_values",
]

#: Most bytes of one stream (a cost model's 10,000 prices take about 1 MiB).
MAX_BYTES: Final = 4 * 1024 * 1024
#: Most documents of one stream.
MAX_DOCUMENTS: Final = 1000
#: Most values (mappings, lists, scalars) of one stream, a YAML alias counted at each use.
MAX_VALUES: Final = 500_000
#: Most schema problems kept of one document (pydantic lists one per bad list element).
MAX_PROBLEMS: Final = 20
#: Most bad documents named in the message of a stream's error (``details`` holds more).
NAMED_IN_MESSAGE: Final = 5
#: The keys a document has at its top level.
TOP_LEVEL: Final = ("apiVersion", "kind", "metadata", "spec")
#: What no key or string may hold: C0 controls but tab and line breaks, and lone surrogates
#: (what the API's ``TextGuard`` refuses in a body, for every caller of the reader).
_CONTROLS: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")
#: What is said where another command reads a kind (``service.apply`` does not store it).
ELSEWHERE: Final = {
    "BillMapping": "`infersight cost import-bill --mapping FILE` reads it",
    "Scenario": "`infersight simulate --scenario FILE` plays it",
    "GpuProfile": "the simulator reads it (simulator/profiles)",
    "ModelProfile": "the simulator reads it (simulator/profiles)",
    "DiagnosisRules": "the diagnosis reads its bundled rule pack",
    "Attribution": "`infersight sidecar --attribution-file FILE` reads it",
}

T = TypeVar("T")


class Metadata(BaseModel):
    """A document's ``metadata``: its name, and a description; other keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class Header:
    """What the reader has checked of a document before its kind reads the spec."""

    kind: str
    api_version: str
    name: str
    description: str


@dataclass(frozen=True, slots=True)
class Reading(Generic[T]):
    """How a kind reads one apiVersion: ``spec`` validated by ``schema`` (``None``: the raw
    ``spec`` as it is, which ``convert`` checks itself), then ``convert`` to the core type.
    ``convert`` raises ``InvalidInput``; ``at`` names the field of what it checks."""

    schema: type[BaseModel] | None
    convert: Callable[[Header, Any], T]
    spec_required: bool = True


@dataclass(frozen=True, slots=True)
class DocumentKind(Generic[T]):
    """One versioned kind: its readings by apiVersion (the first is the one it writes), and
    where the fields of its core type live in the document (``min_replicas`` →
    ``spec.replicas.min``): an error of the core type that starts with a field's name (or
    another key here) is led by the path."""

    kind: str
    readings: Mapping[str, Reading[T]]
    field_paths: Mapping[str, str] = field(default_factory=dict)
    article: str = "a"

    @property
    def api_version(self) -> str:
        return next(iter(self.readings))

    @property
    def one(self) -> str:
        """``an SLO document``, ``a Budget document``."""
        return f"{self.article} {self.kind} document"


@dataclass(frozen=True, slots=True)
class Document(Generic[T]):
    """One document read: its header, its value (the core type) and where it stood."""

    kind: str
    api_version: str
    name: str
    value: T
    index: int
    """Its position in its stream, from 1."""
    source: str = ""
    """The file it was read from, when there was one."""

    @property
    def where(self) -> str:
        """``slos.yaml document 2``, or ``document 2``."""
        return f"{self.source} document {self.index}" if self.source else f"document {self.index}"


# -- errors ------------------------------------------------------------------------------------


@contextmanager
def at(path: str) -> Iterator[None]:
    """Within: an ``InvalidInput`` (or a number out of range) is said to be at ``path``."""
    try:
        yield
    except InvalidInput as exc:
        message = exc.message if exc.message.startswith(path) else f"{path}: {exc.message}"
        raise InvalidInput(message, details=exc.details) from None
    except (ValueError, ArithmeticError) as exc:
        raise InvalidInput(f"{path}: {_short(exc)}") from None


def _short(exc: BaseException) -> str:
    return str(exc)[:200] or type(exc).__name__


def _problems(exc: ValidationError, prefix: str) -> list[dict[str, str]]:
    out = []
    for error in exc.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]:
        loc = ".".join(str(p) for p in (prefix, *error["loc"]) if p != "")
        out.append({"loc": loc, "msg": error["msg"]})
    return out


def _invalid(kind: DocumentKind[Any], problems: list[dict[str, str]]) -> InvalidInput:
    """``invalid KIND document``; one problem is named in the message, several in details."""
    message = f"invalid {kind.kind} document"
    if len(problems) == 1:
        message += f": {problems[0]['loc']}: {problems[0]['msg']}"
    return InvalidInput(message, details={"problems": problems})


def _located(kind: DocumentKind[Any], exc: InvalidInput) -> InvalidInput:
    """A conversion's error as the document's, led by the path of the core type's field that
    it names (``spec.replicas.max: max_replicas must be …``)."""
    message = exc.message
    for name, path in sorted(kind.field_paths.items(), key=lambda kv: -len(kv[0])):
        if message.startswith(name) and message[len(name) : len(name) + 1] in ("", " ", ":"):
            message = f"{path}: {message}"
            break
    return InvalidInput(f"invalid {kind.kind} document: {message}", details=exc.details)


# -- the stream --------------------------------------------------------------------------------


def _noun(kinds: Sequence[DocumentKind[Any]]) -> str:
    """``SLO `` for one kind asked for, else nothing: ``no SLO documents found``."""
    return f"{kinds[0].kind} " if len(kinds) == 1 else ""


def _mapping_error(kinds: Sequence[DocumentKind[Any]]) -> InvalidInput:
    if len(kinds) == 1:
        return InvalidInput(f"{kinds[0].one} must be a mapping")
    return InvalidInput("a document must be a mapping (apiVersion, kind, metadata and spec)")


def _load(text: str | bytes, kinds: Sequence[DocumentKind[Any]]) -> list[Any]:
    """The non-empty documents of ``text``, held to the stream's limits."""
    size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else len(text)
    if size > MAX_BYTES:
        raise InvalidInput(
            f"a file of documents holds at most {MAX_BYTES // (1024 * 1024)} MiB; split it",
            details={"bytes": size, "max_bytes": MAX_BYTES},
        )
    documents: list[Any] = []
    try:
        for data in yaml.safe_load_all(text):
            if data is None:
                continue
            if len(documents) == MAX_DOCUMENTS:
                raise InvalidInput(
                    f"a file holds at most {MAX_DOCUMENTS} {_noun(kinds)}documents",
                    details={"max_documents": MAX_DOCUMENTS},
                )
            documents.append(data)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"not valid YAML or JSON: {exc}") from None
    if not documents:
        raise InvalidInput(f"no {_noun(kinds)}documents found")
    return documents


def _scan(data: Any, budget: int) -> tuple[int, list[str]]:
    """Count ``data``'s values (an alias at each use) up to ``budget``, and the paths of the
    keys and strings that hold a control character (the first few). Iterative: a deep
    document costs its size, and the count stops the walk of an alias bomb."""
    seen = 0
    bad: list[str] = []
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        seen += 1
        if seen > budget:
            raise InvalidInput(
                f"a file of documents holds at most {MAX_VALUES} values (a YAML alias counts "
                "each time it is used)",
                details={"max_values": MAX_VALUES},
            )
        if isinstance(value, str):
            if _CONTROLS.search(value) and len(bad) < MAX_PROBLEMS:
                bad.append(path)
        elif isinstance(value, dict):
            for key, item in value.items():
                name = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and _CONTROLS.search(key) and len(bad) < MAX_PROBLEMS:
                    bad.append(_CONTROLS.sub("?", name)[:128])
                stack.append((name, item))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), item) for i, item in enumerate(value))
    return seen, bad


# -- one document -------------------------------------------------------------------------------


class _Envelope(BaseModel):
    """The top level every kind shares; ``spec`` is the kind's to read."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    apiVersion: str
    kind: str
    metadata: Metadata
    spec: Any = None


def _kind_of(data: dict[Any, Any], kinds: Sequence[DocumentKind[Any]]) -> DocumentKind[Any]:
    """The kind ``data`` says it is, among ``kinds``, with an apiVersion that kind reads."""
    said, version = data.get("kind"), data.get("apiVersion")
    by_name = {k.kind: k for k in kinds}
    kind = by_name.get(said) if isinstance(said, str) else None
    if kind is None:
        got = str(said)[:64]
        details: dict[str, Any] = {"kind": got, "apiVersion": str(version)[:64]}
        if len(kinds) == 1:
            raise InvalidInput(f"expected kind {kinds[0].kind}, got {got!r}", details=details)
        elsewhere = ELSEWHERE.get(got)
        known = ", ".join(by_name)
        raise InvalidInput(
            f"kind {got!r} is not applied: {elsewhere}"
            if elsewhere
            else f"unknown kind {got!r}: the kinds applied are {known}",
            details={**details, "kinds": list(by_name)},
        )
    if version not in kind.readings:
        supported = list(kind.readings)
        raise InvalidInput(
            f"unsupported apiVersion {str(version)[:64]!r} for kind {kind.kind}: expected "
            f"apiVersion {' or '.join(supported)}",
            details={"apiVersion": str(version)[:64], "supported": supported},
        )
    return kind


def _validate(
    data: Any, kinds: Sequence[DocumentKind[Any]], controls: list[str]
) -> tuple[Header, Any]:
    """One document (a parsed mapping) → its header and value; its error as ``InvalidInput``."""
    if not isinstance(data, dict):
        raise _mapping_error(kinds)
    kind = _kind_of(data, kinds)
    version = str(data["apiVersion"])
    reading = kind.readings[version]
    problems = [
        {"loc": path, "msg": "must not contain control characters (such as NUL)"}
        for path in controls
    ]
    envelope: _Envelope | None = None
    try:
        envelope = _Envelope.model_validate(data)
    except ValidationError as exc:
        problems += _problems(exc, "")
    spec: Any = data.get("spec")
    if "spec" not in data:
        if reading.spec_required:
            problems.append({"loc": "spec", "msg": "Field required"})
        spec = {}
    if reading.schema is not None:
        try:
            spec = reading.schema.model_validate(spec)
        except ValidationError as exc:
            problems += _problems(exc, "spec")
    if problems or envelope is None:
        raise _invalid(kind, problems[:MAX_PROBLEMS])
    meta = envelope.metadata
    header = Header(kind.kind, version, meta.name, meta.description)
    try:
        value = reading.convert(header, spec)
    except InvalidInput as exc:
        raise _located(kind, exc) from None
    except (ValueError, ArithmeticError) as exc:  # a number out of range, say
        raise InvalidInput(f"invalid {kind.kind} document: {_short(exc)}") from None
    return header, value


def _name_of(data: Any) -> str:
    metadata = data.get("metadata") if isinstance(data, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return _CONTROLS.sub("?", name)[:128] if isinstance(name, str) else ""


def _label(data: Any, index: int, source: str) -> str:
    """``document 2 (SLO chat-ttft)``."""
    where = f"{source} document {index}" if source else f"document {index}"
    kind = data.get("kind") if isinstance(data, dict) else None
    said = " ".join(str(p)[:64] for p in (kind, _name_of(data)) if p)
    return f"{where} ({said})" if said else where


# -- the reader --------------------------------------------------------------------------------


def read(
    text: str | bytes, kinds: Sequence[DocumentKind[Any]], *, source: str = ""
) -> list[Document[Any]]:
    """Every document of ``text`` (YAML or JSON, one or several), each one of ``kinds``; a
    kind and name twice is refused (``check_names``). Any error: ``InvalidInput``, and nothing
    is returned (see the module's docstring for what the errors say)."""
    documents = _load(text, kinds)
    budget = MAX_VALUES
    out: list[Document[Any]] = []
    failed: list[tuple[int, Any, InvalidInput]] = []
    for index, data in enumerate(documents, start=1):
        seen, controls = _scan(data, budget)
        budget -= seen
        try:
            header, value = _validate(data, kinds, controls)
        except InvalidInput as exc:
            failed.append((index, data, exc))
            continue
        out.append(Document(header.kind, header.api_version, header.name, value, index, source))
    if failed:
        if len(documents) == 1:
            raise failed[0][2]
        raise _stream_error(failed, len(documents), source)
    check_names(out)
    return out


def _stream_error(
    failed: list[tuple[int, Any, InvalidInput]], total: int, source: str
) -> InvalidInput:
    """One error for the bad documents of a stream of several, each by position and name."""
    said = [f"{_label(data, index, source)}: {exc.message}" for index, data, exc in failed]
    if len(failed) == 1:
        index, _data, exc = failed[0]
        return InvalidInput(said[0], details={**exc.details, "document": index})
    message = f"{len(failed)} of {total} documents are invalid: " + "; ".join(
        said[:NAMED_IN_MESSAGE]
    )
    if len(failed) > NAMED_IN_MESSAGE:
        message += f"; and {len(failed) - NAMED_IN_MESSAGE} more"
    documents = [
        {"document": index, "name": _name_of(data), "message": exc.message, **exc.details}
        for index, data, exc in failed[:MAX_PROBLEMS]
    ]
    return InvalidInput(message, details={"documents": documents, "invalid": len(failed)})


def check_names(documents: Sequence[Document[Any]]) -> None:
    """A kind and name stands once in what is applied together (two would overwrite each
    other, or, for budgets, make two versions of one apply)."""
    first: dict[tuple[str, str], Document[Any]] = {}
    for document in documents:
        key = (document.kind, document.name)
        other = first.setdefault(key, document)
        if other is not document:
            raise InvalidInput(
                f"{document.kind} {document.name!r} is named twice, by {other.where} and by "
                f"{document.where}: name each once",
                details={"kind": document.kind, "name": document.name},
            )


def read_values(text: str | bytes, kind: DocumentKind[T]) -> list[T]:
    """The values of every ``kind`` document of ``text``."""
    return [d.value for d in read(text, [kind])]


def read_document(data: Any, kinds: Sequence[DocumentKind[Any]]) -> Document[Any]:
    """One parsed document (a mapping, a request body's), one of ``kinds``."""
    _seen, controls = _scan(data, MAX_VALUES)
    header, value = _validate(data, kinds, controls)
    return Document(header.kind, header.api_version, header.name, value, 1)


def read_value(data: Any, kind: DocumentKind[T]) -> T:
    """One parsed ``kind`` document (a mapping) → its value."""
    value: T = read_document(data, [kind]).value
    return value


def load_one(text: str | bytes, kind: DocumentKind[Any]) -> dict[str, Any]:
    """The one document of ``text`` as a mapping (a request body that names one document),
    held to the stream's size; its header and spec are ``read_value``'s to check."""
    size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else len(text)
    if size > MAX_BYTES:
        raise InvalidInput(
            f"{kind.one} holds at most {MAX_BYTES // (1024 * 1024)} MiB",
            details={"bytes": size, "max_bytes": MAX_BYTES},
        )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"not valid YAML or JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{kind.one} must be a mapping")
    return data

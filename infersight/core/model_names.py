"""One name per model across the client's and the server's records.

A client asks for ``Llama-3.1-8B-Instruct`` where the server reports
``meta-llama/Llama-3.1-8B-Instruct``; a gateway may rename a model altogether (``chat-small``).
``ModelAliases.canonical`` maps both to one key: the alias table first (exact, then without
case), else the default rule — the name after its last ``/`` (the organisation prefix of a
Hugging Face id), lower-cased. The table is configured as ``ALIAS=CANONICAL`` pairs
(``INFERSIGHT_MODEL_ALIASES``); its canonical names go through the default rule too, so
``chat-small=meta-llama/Llama-3.1-8B-Instruct`` and ``chat-small=llama-3.1-8b-instruct`` mean
the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.records import MAX_LABEL_LEN

#: Pairs an alias table may hold: each is a dict entry consulted per name read.
MAX_ALIASES: Final = 1000


def default_key(name: str) -> str:
    """The default rule: strip an ``org/`` prefix, compare without case."""
    return name.strip().rsplit("/", 1)[-1].casefold()


@dataclass(frozen=True, slots=True)
class ModelAliases:
    """The alias table: alias (any case) → canonical key."""

    aliases: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> ModelAliases:
        """From ``ALIAS=CANONICAL`` pairs separated by commas or new lines (``#`` comments);
        ``InvalidInput`` names the first bad pair."""
        table: dict[str, str] = {}
        for raw in text.replace("\n", ",").split(","):
            entry = raw.split("#", 1)[0].strip()
            if not entry:
                continue
            alias, sep, canonical = entry.partition("=")
            alias, canonical = alias.strip(), canonical.strip()
            if not sep or not alias or not canonical:
                raise InvalidInput(
                    f"a model alias is ALIAS=CANONICAL, got {entry[:80]!r}",
                    details={"entry": entry[:80]},
                )
            if len(alias) > MAX_LABEL_LEN or len(canonical) > MAX_LABEL_LEN:
                raise InvalidInput(
                    f"model names are at most {MAX_LABEL_LEN} characters",
                    details={"entry": entry[:80]},
                )
            key = alias.casefold()
            if key in table and table[key] != default_key(canonical):
                raise InvalidInput(
                    f"model alias {alias!r} is given twice with different names",
                    details={"alias": alias},
                )
            table[key] = default_key(canonical)
            if len(table) > MAX_ALIASES:
                raise InvalidInput(f"at most {MAX_ALIASES} model aliases")
        return cls(table)

    def canonical(self, name: str) -> str:
        """The key ``name`` is compared and grouped by; "" stays "" (unknown)."""
        if not name:
            return ""
        folded = name.strip().casefold()
        mapped = self.aliases.get(folded)
        if mapped is None:
            mapped = self.aliases.get(default_key(name))
        return mapped if mapped is not None else default_key(name)

    def same(self, a: str, b: str) -> bool:
        return self.canonical(a) == self.canonical(b)


__all__ = ["MAX_ALIASES", "ModelAliases", "default_key"]

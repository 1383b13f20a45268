"""A toy byte-pair tokenizer that costs real CPU: the simulator's ``tokenizer`` host limit.

``encode`` splits a prompt into words and merges each word's characters pairwise with a fixed
merge table, in pure Python, a few passes per word, so its CPU time grows with the prompt's
length the way a real tokenizer's does. The simulated engine calls it on the serving thread
for every request when the limit is on (``simulator.hostlimits``); a profiler then sees the
time in this module (its name says ``tokenizer``, as ``tokenizers`` / ``transformers``'s
``tokenization_utils`` do).
"""

from __future__ import annotations

from typing import Final

#: Merge passes per word: the knob of its cost per character.
PASSES: Final = 24
_MERGES: Final = {(a, b): a + b for a in "etaoinsrhl" for b in "etaoinsrhl"}


def _merge_word(word: str) -> list[str]:
    pieces = list(word)
    for _ in range(PASSES):
        merged: list[str] = []
        i = 0
        while i < len(pieces):
            pair = (pieces[i], pieces[i + 1]) if i + 1 < len(pieces) else None
            if pair is not None and pair in _MERGES and len(pieces[i]) + len(pieces[i + 1]) < 6:
                merged.append(_MERGES[pair])
                i += 2
            else:
                merged.append(pieces[i])
                i += 1
        # No merge left: keep working all the same (a real merge loop has no shortcut).
        pieces = [p[::-1] for p in merged] if len(merged) == len(pieces) else merged
    return pieces


def encode(text: str, repeat: int = 1) -> list[int]:
    """Token ids of ``text`` (``repeat`` times the work, same ids)."""
    ids: list[int] = []
    for _ in range(max(1, repeat)):
        ids = [hash(piece) & 0xFFFF for word in text.split() for piece in _merge_word(word)]
    return ids

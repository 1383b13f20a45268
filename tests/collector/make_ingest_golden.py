"""Write the golden outcomes of the ingest corpus (``ingest_corpus``) with the code of a
checkout: run it with that checkout first on ``sys.path``, from outside the repository,

    git worktree add /tmp/ingest-before <commit>
    cd / && PYTHONPATH=/tmp/ingest-before /work/main/.venv/bin/python \\
        /work/main/tests/collector/make_ingest_golden.py

It refuses to run against the working tree it lives in unless told ``--here``: the expected
outcomes are those of the code *before* a change to the ingest path, so that the golden test
fails on any change of what is stored or refused.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ingest_corpus  # noqa: E402

import infersight  # noqa: E402

FIXTURE = HERE / "data" / "ingest_golden.json.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--here", action="store_true", help="allow this checkout's own code")
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args()
    tree = Path(infersight.__file__).resolve().parents[1]
    if tree == HERE.parents[1] and not args.here:
        raise SystemExit(f"infersight is imported from this checkout ({tree}); see the docstring")
    outcomes = ingest_corpus.deduplicated(dict(ingest_corpus.outcomes()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({name: outcome}) for name, outcome in outcomes.items()]
    # mtime 0: the same outcomes make the same bytes.
    args.out.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
    print(f"{len(outcomes)} outcomes from {tree} → {args.out}")


if __name__ == "__main__":
    main()

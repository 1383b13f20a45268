"""Production capacity over a week of minute rollups: this checkout's read against another's
(issue 35, item 4: the scaling job's largest cost in the serve's profile).

``storage.capacity.production_capacity`` of this checkout and of ``--before DIR`` (a git
worktree of an earlier commit: its ``infersight/storage/capacity.py`` loaded beside this one)
answer the scaling job's question for every model of the store (the last ``--days`` days, the
store's SLO latency targets, as ``service.scaling.Recommender`` asks), in ``--rounds``
interleaved rounds (the order alternates round by round). Prints each side's time per round
and the before/after ratio's median and spread, and checks that both answered the same.

The store is one seeded earlier, e.g. ``bench_pages.py --keep`` (30 days at 30 req/min).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import func, select

from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.service.scaling import latency_targets
from infersight.storage import capacity, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import request_rollups


def load_before(checkout: Path) -> ModuleType:
    path = checkout / "infersight" / "storage" / "capacity.py"
    spec = importlib.util.spec_from_file_location("before_capacity", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answer(module: Any, engine: Any, window: Window, model: str, targets: Any) -> Any:
    try:
        best = module.production_capacity(
            engine, window, Selector(model=model), ttft_p99_max_s=targets[0],
            tpot_p99_max_s=targets[1],
        )  # fmt: skip
    except InvalidInput as exc:
        return ("none", exc.details)
    return (best.throughput_rps, best.mean_output_tokens, best.phase)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", required=True, help="a seeded store (bench_pages.py --keep)")
    parser.add_argument("--before", type=Path, required=True, help="a checkout to compare")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    before = load_before(args.before)
    engine = create_store_engine(args.url)
    with engine.connect() as connection:
        end = connection.execute(select(func.max(request_rollups.c.bucket))).scalar_one()
    end = (end or datetime.now(UTC)) + timedelta(minutes=1)
    window = Window(end - timedelta(days=args.days), end)
    specs = slo_store.list_slos(engine)
    with engine.connect() as connection:
        models = sorted(
            connection.execute(select(request_rollups.c.model).distinct()).scalars().all()
        )
    cases = [(m, latency_targets(specs, m)) for m in models]
    print(f"  {len(cases)} models, window {args.days:g} days to {end:%Y-%m-%d %H:%M}; "
          f"targets {[t for _, t in cases]}")  # fmt: skip
    sides = {"before": before, "after": capacity}
    times: dict[str, list[float]] = {name: [] for name in sides}
    answers: dict[str, list[Any]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            started = time.perf_counter()
            got = [answer(sides[name], engine, window, m, t) for m, t in cases]
            times[name].append(time.perf_counter() - started)
            answers[name].append(got)
        print(f"  round {round_ + 1}: before {times['before'][-1]:.2f} s, "
              f"after {times['after'][-1]:.3f} s")  # fmt: skip
    same = all(a == answers["before"][0] for a in answers["before"] + answers["after"])
    ratios = [b / a for b, a in zip(times["before"], times["after"], strict=True)]
    print(f"  before {statistics.median(times['before']):.2f} s, "
          f"after {statistics.median(times['after']):.3f} s per cycle of every model; "
          f"before / after {statistics.median(ratios):.1f}x "
          f"({min(ratios):.1f}-{max(ratios):.1f}x); same answers: {same}")  # fmt: skip
    for (model, _), got in zip(cases, answers["after"][0], strict=True):
        print(f"    {model}: {got}")
    engine.dispose()
    if not same:
        raise SystemExit("the two checkouts answered differently")


if __name__ == "__main__":
    main()

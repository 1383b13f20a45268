"""What the live demo adds besides its fleet, so that every dashboard page has something to show:
a baseline captured from the healthy backfill (the Baselines page) and a step load test
against one simulated instance, stored as a load-test run (the Capacity page and its knee).

The load test is the real one (``loadgen.runner.Runner`` over HTTP against the simulator's
OpenAI-compatible server, ``simulator.realtime.RealtimeServer``) on a server of its own: the
live fleet's instances keep their traffic and SLOs. That server is an 8B instance whose batch
holds ``SLOTS`` sequences and whose steps are ``SLOWDOWN`` times slower, so that it saturates at
a handful of users within seconds (a real batch of 256 would need hundreds of users) and the
knee stands well above a busy host's scheduling noise. It serves under its own model name: its
capacity is not the fleet's, and the Capacity page must not plan the fleet with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import numpy as np
import uvicorn

from infersight.core.baseline import Baseline
from infersight.core.loadtest import LoadTestRun, ScenarioKind
from infersight.core.query import Selector
from infersight.core.window import Resolution, Window
from infersight.loadgen.client import Endpoint
from infersight.loadgen.monitor import SelfMonitor
from infersight.loadgen.runner import Runner
from infersight.loadgen.scenarios import step
from infersight.loadgen.virtual_time import run_in_virtual_time
from infersight.loadgen.workload import DistKind, Lengths, Sampled
from infersight.service.baselines import capture_window, save_baseline
from infersight.service.loadtests import save_run
from infersight.simulator.profiles import ModelProfile, StepCosts
from infersight.simulator.realtime import RealtimeServer
from infersight.simulator.specs import load_profile

if TYPE_CHECKING:
    from infersight.service.store import Store

BASELINE: Final = "demo-healthy"
PROFILE: Final = "llama-3.1-8b-h200x1"
#: The load-tested server's batch size and step slowdown (see the module's docstring).
SLOTS: Final = 8
SLOWDOWN: Final = 10.0
SERVED_MODEL: Final = "demo/Llama-3.1-8B-8-slots"
#: Users per level and seconds per level: 20 s in all, the knee at ``SLOTS``.
LEVELS: Final = (2, 4, 6, 8, 10, 12, 14, 16)
HOLD_S: Final = 2.5
RUN_NAME: Final = f"demo step run: one simulated 8B instance, {SLOTS} sequences a batch"


def capture_baseline(
    store: Store,
    window: Window,
    now: datetime,
    description: str = "the live demo's healthy backfill, before any fault",
) -> Baseline:
    """Store (or replace) baseline ``BASELINE`` from the fleet's requests in ``window``."""
    baseline = capture_window(
        store,
        BASELINE,
        window,
        Selector(),
        now,
        description=description,
        finest=Resolution.MINUTE,
    )
    save_baseline(store, baseline, replace=True)
    return baseline


def load_test_profile() -> ModelProfile:
    base = load_profile(PROFILE)
    s = base.step
    slower = StepCosts(
        cpu_overhead_s=s.cpu_overhead_s * SLOWDOWN,
        decode_base_s=s.decode_base_s * SLOWDOWN,
        decode_per_seq_s=s.decode_per_seq_s * SLOWDOWN,
        decode_per_kv_token_s=s.decode_per_kv_token_s * SLOWDOWN,
        prefill_per_token_s=s.prefill_per_token_s * SLOWDOWN,
    )
    return dataclasses.replace(base, step=slower, max_num_seqs=SLOTS)


def run_config() -> dict[str, object]:
    """What the stored run says of itself: the hardware it measured is a simulated one, which
    ``capacity plan --run`` repeats (``service.capacity``)."""
    profile = load_test_profile()
    return {
        "hardware": {
            "gpu": profile.gpu.name,
            "tensor_parallel": profile.tensor_parallel,
            "simulated": True,
            "note": f"simulator profile {PROFILE}, {SLOTS} sequences a batch, steps "
            f"{SLOWDOWN:g}× slower than the profile's",
        }
    }


async def step_run(epoch: datetime) -> LoadTestRun:
    """The step run against a fresh server on a free loopback port of the running loop (its
    clock is the loop's, so a virtual-time loop runs it in virtual time)."""
    clock = asyncio.get_running_loop().time
    server = RealtimeServer.standalone(
        "demo-loadtest-0",
        load_test_profile(),
        epoch=epoch,
        clock=clock,
        served_model_name=SERVED_MODEL,
    )
    # IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections (small SSE chunks).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(server.app(), log_level="warning", lifespan="on", ws="none")
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve(sockets=[sock]))
    try:
        while not http.started:
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError("the load-test server did not start")
            await asyncio.sleep(0.01)
        fixed = Lengths(DistKind.FIXED, 40), Lengths(DistKind.FIXED, 30)
        runner = Runner(
            Endpoint(f"http://127.0.0.1:{port}", SERVED_MODEL),
            step(list(LEVELS), HOLD_S),
            Sampled(*fixed, np.random.default_rng(3)),
            rng=np.random.default_rng(4),
            clock=clock,
            monitor=SelfMonitor(clock=clock),
            drain_s=30.0,
        )
        return await runner.run(name=RUN_NAME, scenario=ScenarioKind.STEP, config=run_config())
    finally:
        http.should_exit = True
        await task
        sock.close()


def store_step_run(
    store: Store,
    run_in: Callable[..., LoadTestRun] = run_in_virtual_time,
    epoch: datetime | None = None,
) -> LoadTestRun:
    """Run ``step_run`` (in virtual time unless ``run_in`` says otherwise: the knee is then the
    model's, not the host's) and store it; the stored run."""
    run = run_in(step_run(epoch or datetime.now(UTC)))
    return dataclasses.replace(run, id=save_run(store, run))


class Seeding:
    """Captures the baseline and runs the step load test in a thread of its own, after the
    dashboard's URL is out (the fleet's first fault does not wait for it); ``stop`` cancels
    a load test still running and joins the thread.

    The load test waits for ``go`` (the first incident opened) or ``wait_s``, whichever comes
    first, so that its work does not share the process with the first burn. It runs on the
    wall clock: the virtual-time loop waits for every loopback byte of the process, and the
    live fleet's are never all delivered for long; the slow 8-slot server keeps the knee well
    above the host's noise.
    """

    def __init__(
        self,
        store: Store,
        history: Window | None,
        echo: Callable[[str], None],
        go: threading.Event | None = None,
        wait_s: float = 90.0,
    ) -> None:
        self.store = store
        self.history = history
        self.echo = echo
        self.go = go or threading.Event()
        self.wait_s = wait_s
        self.baseline: Baseline | None = None
        self.run: LoadTestRun | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[LoadTestRun] | None = None
        self._thread = threading.Thread(target=self._work, name="demo-seed", daemon=True)

    def start(self) -> Seeding:
        self._thread.start()
        return self

    def join(self) -> None:
        """Until the baseline and the run are stored (tests, and a demo with ``--duration``)."""
        self._thread.join()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self.go.set()
            if self._loop is not None and self._task is not None:
                self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread.is_alive():
            self._thread.join()

    def _work(self) -> None:
        try:
            if self.history is not None:
                self.baseline = capture_baseline(self.store, self.history, datetime.now(UTC))
                self.echo(
                    f"captured baseline {BASELINE} from the healthy history "
                    f"({self.baseline.requests:,} requests)"
                )
            self._load_test()
        except Exception as exc:  # the demo goes on without it, and says why
            self.echo(f"warning: demo seeding failed: {exc}")

    def _load_test(self) -> None:
        self.go.wait(self.wait_s)
        loop = asyncio.new_event_loop()
        try:
            with self._lock:
                if self._stopped:
                    return
                self._loop = loop
                self._task = loop.create_task(step_run(datetime.now(UTC)))
            self.echo(
                f"step load test ({len(LEVELS)} levels × {HOLD_S:g} s) against a simulated "
                f"instance of its own…"
            )
            try:
                run = loop.run_until_complete(self._task)
            except asyncio.CancelledError:
                return
            self.run = dataclasses.replace(run, id=save_run(self.store, run))
            self.echo(f"stored load-test run {self.run.id} (the Capacity page shows its knee)")
        finally:
            with self._lock:  # ``stop`` must not reach a closed loop
                self._loop = self._task = None
            loop.close()

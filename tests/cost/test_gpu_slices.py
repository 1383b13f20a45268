"""Fractional GPUs (issue 34): MIG slices and time-sliced shares, from a fake NVML (the one
true edge: there is no GPU here) through the real sidecar into SQLite and PostgreSQL, priced by
their fraction of the parent GPU (or a slice profile's own price) in the cost API and page.

The sidecars sample once per module and store (``sampled``); the tests that only read share a
copy of that store, and the test that writes requests gets a fresh copy of its own."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

from infersight.collector.gpu.nvml import NvmlSource
from infersight.collector.gpu.source import GpuSampler, build_gpu_sampler
from infersight.collector.scrape.exposition import parse
from infersight.collector.scrape.flavours import gpu_samples as dcgm_samples
from infersight.core.cost import CostModel, GpuPrice, GpuUsage, price_instance
from infersight.core.errors import ConfigurationError, InvalidInput
from infersight.core.gpu_slice import fraction_of, parse_slice
from infersight.service.cost_spec import parse_model, to_document
from infersight.storage import cost, migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import gpu_rollups, gpu_samples
from infersight.storage.writer import open_writer
from tests.collector.fake_nvml import FakeGpu, FakeMig, FakeNvml
from tests.collector.harness import running_sidecar, sidecar_config
from tests.conftest import BOTH_STORES, POSTGRES_ADMIN_URL, Store, fresh_database
from tests.cost.conftest import api_for
from tests.factories import make_records
from tests.waiting import until

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
PARENT = "GPU-a100a100-0000-0000-0000-000000000001"
SHARED = "GPU-h100h100-0000-0000-0000-000000000002"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TEN_MINUTES = timedelta(minutes=10)
MODEL = CostModel(
    name="slices",
    currency="USD",
    gpu_prices={"A100": GpuPrice(Decimal("3.50")), "H100": GpuPrice(Decimal("2.00"))},
)


def two_slices() -> list[FakeMig]:
    return [
        FakeMig(gpu_instance_id=1, uuid="MIG-11111111-0000-0000-0000-000000000001"),
        FakeMig(gpu_instance_id=2, uuid="MIG-22222222-0000-0000-0000-000000000002"),
    ]


# -- the collector ----------------------------------------------------------------------------


def test_nvml_in_mig_mode_samples_each_slice_with_its_parent_instance_id_and_fraction():
    nvml = FakeNvml(
        [FakeGpu(name=A100, uuid=PARENT, migs=two_slices()), FakeGpu(name=H100, uuid=SHARED)]
    )
    source = NvmlSource.open("node-1", nvml)
    try:
        samples = source.read(T0)
    finally:
        source.close()
    assert [s.gpu_index for s in samples] == [0, 1, 2]
    first, second, whole = samples
    assert first.name == second.name == f"{A100} MIG 3g.40gb"
    assert first.gpu_slice == second.gpu_slice == "mig:3g.40gb:3/7"
    assert first.parent_uuid == second.parent_uuid == PARENT
    assert (first.gpu_instance_id, second.gpu_instance_id) == (1, 2)
    assert first.uuid.startswith("MIG-11111111")
    assert second.uuid.startswith("MIG-22222222")
    assert first.memory_total_bytes == 40 * 2**30
    assert first.util_gpu is None  # NVML: not supported on a MIG device
    assert first.power_w is None
    assert (whole.name, whole.gpu_slice, whole.parent_uuid) == (H100, "", "")
    assert whole.util_gpu == 0.87


def test_a_declared_time_sliced_share_marks_whole_gpus_but_not_mig_slices():
    nvml = FakeNvml([FakeGpu(name=H100, uuid=SHARED), FakeGpu(name=A100, migs=two_slices()[:1])])
    sampler = build_gpu_sampler("nvml", "ts-a", nvml_module=nvml, share=fraction_of("0.25"))
    assert isinstance(sampler, GpuSampler)
    try:
        shared, mig = sampler.source.read(T0)
    finally:
        sampler.close()
    assert (shared.gpu_slice, shared.parent_uuid) == ("share:1/4", SHARED)
    assert mig.gpu_slice == "mig:3g.40gb:3/7"
    with pytest.raises(ConfigurationError):
        build_gpu_sampler("dcgm:http://127.0.0.1:9/metrics", "x", share=Fraction(1, 4))
    for bad in ("0", "1.5", "-0.25", "a quarter", "1/0"):
        with pytest.raises(InvalidInput):
            fraction_of(bad)


def _dcgm_line(metric: str, gpu: str, value: int, gi: str = "") -> str:
    labels = f'gpu="{gpu}",UUID="{PARENT}",device="nvidia{gpu}",modelName="{A100}"'
    if gi:
        labels += f',GPU_I_PROFILE="3g.40gb",GPU_I_ID="{gi}"'
    return f'{metric}{{{labels},Hostname="n"}} {value}'


DCGM = "\n".join(
    [
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        _dcgm_line("DCGM_FI_DEV_GPU_UTIL", "0", 40, "1"),
        _dcgm_line("DCGM_FI_DEV_GPU_UTIL", "0", 10, "2"),
        _dcgm_line("DCGM_FI_DEV_GPU_UTIL", "1", 90),
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
        _dcgm_line("DCGM_FI_DEV_FB_USED", "0", 1000, "1"),
        _dcgm_line("DCGM_FI_DEV_FB_USED", "0", 3000, "2"),
        "",
    ]
)


def test_dcgm_exporter_mig_labels_become_slices_of_their_parent():
    samples = dcgm_samples(parse(DCGM), T0, "node-1")
    by_index = {s.gpu_index: s for s in samples}
    assert sorted(by_index) == [1, 101, 102]  # 100 + 16 × gpu + GPU_I_ID for a slice
    a, b = by_index[101], by_index[102]
    assert (a.gpu_slice, a.parent_uuid, a.gpu_instance_id) == ("mig:3g.40gb:3/7", PARENT, 1)
    assert (a.util_gpu, b.util_gpu) == (0.4, 0.1)  # each slice its own series, not summed
    assert (a.memory_used_bytes, b.memory_used_bytes) == (1000 * 2**20, 3000 * 2**20)
    assert by_index[1].gpu_slice == ""


# -- pricing ----------------------------------------------------------------------------------


def usage(instance: str, name: str, gpu_slice: str, seconds: str = "3600") -> GpuUsage:
    s = Decimal(seconds)
    return GpuUsage(instance, 0, name, s, Decimal(0), Decimal(0), gpu_slice=gpu_slice)


@pytest.mark.parametrize(
    ("slices", "name"),
    [
        (["mig:3g.40gb:3/7", "mig:3g.40gb:3/7"], A100),
        (["mig:1g.10gb:1/7"] * 7, A100),
        (["share:1/3", "share:2/3"], H100),
        (["share:1/3"] * 3, H100),
    ],
)
@pytest.mark.parametrize("seconds", ["3600", "1", "7", "123.457"])
def test_the_slices_of_one_gpu_never_cost_more_than_the_gpu(slices, name, seconds):
    model = CostModel(
        name="m",
        currency="USD",
        gpu_prices={"A100": GpuPrice(Decimal("3.50")), "H100": GpuPrice(Decimal("2.00"))},
        overhead_per_gpu_hour=Decimal("0.17"),
        overhead_ratio=Decimal("0.1"),
    )
    whole = price_instance(model, "whole", [usage("whole", name, "", seconds)], True)
    parts = [
        price_instance(model, f"i{k}", [usage(f"i{k}", name, text, seconds)], True)
        for k, text in enumerate(slices)
    ]
    assert sum(p.total.amount for p in parts) <= whole.total.amount
    fractions = sum(parse_slice(t).fraction for t in slices)  # type: ignore[union-attr]
    # each slice is its fraction of the whole, to within one quantum (rounded down)
    for p, text in zip(parts, slices, strict=True):
        f = parse_slice(text).fraction  # type: ignore[union-attr]
        exact = whole.total.amount * f.numerator / f.denominator
        assert exact - Decimal("0.000002") <= p.total.amount <= exact
    if fractions == 1:  # a slice's GPU-hours are its fraction of the parent's (to a quantum)
        hours = sum(p.gpu_hours for p in parts)
        assert abs(hours - whole.gpu_hours) <= Decimal("0.000001") * len(parts)


def test_a_cost_model_can_price_a_slice_profile_and_reads_back_its_document():
    document = to_document(MODEL)
    document["spec"]["sliceProfiles"] = {"3g.40gb": {"onDemandPerHour": "1.20"}}
    model = parse_model(document)
    assert to_document(model)["spec"]["sliceProfiles"] == {"3g.40gb": {"onDemandPerHour": "1.20"}}
    assert "sliceProfiles" not in to_document(MODEL)["spec"]  # older documents unchanged
    own = price_instance(model, "a", [usage("a", A100, "mig:3g.40gb:3/7")], True)
    assert own.total.amount == Decimal("1.200000")
    other = price_instance(model, "b", [usage("b", A100, "mig:2g.20gb:2/7")], True)
    assert other.total.amount == Decimal("1.000000")  # 2/7 of 3.50
    bad = to_document(MODEL)
    bad["spec"]["sliceProfiles"] = {"three-gigs": {"onDemandPerHour": "1"}}
    with pytest.raises(InvalidInput, match="MIG profile"):
        parse_model(bad)


# -- through the sidecar, the store and the cost API ------------------------------------------


def minute_clock() -> Callable[[], datetime]:
    """Sample timestamps a minute apart from T0 (the sampler's own clock, injected)."""
    lock, ticks = threading.Lock(), itertools.count()

    def now() -> datetime:
        with lock:
            return T0 + timedelta(minutes=next(ticks))

    return now


def sample_through_sidecar(store, tmp_path: Path, instance: str, nvml, share=None) -> None:
    sampler = build_gpu_sampler("nvml", instance, 0.05, nvml_module=nvml, share=share)
    assert isinstance(sampler, GpuSampler)
    sampler._now = minute_clock()
    config = sidecar_config(instance, tmp_path / instance, sample_ship_interval_s=0.2)
    g = gpu_samples.c

    def far_enough() -> bool:
        with store.engine.connect() as c:
            latest = c.execute(select(func.max(g.ts)).where(g.instance == instance)).scalar()
        return latest is not None and latest.replace(tzinfo=UTC) >= T0 + TEN_MINUTES

    try:
        with running_sidecar(open_writer(store.engine), config, [sampler]):
            until(far_enough, f"{instance}'s samples reached ten minutes in the store")
    finally:
        sampler.close()


@contextmanager
def opened(url: str) -> Iterator[Store]:
    """The store at ``url``, its engine disposed on leaving (no connection left open)."""
    engine = create_store_engine(url)
    try:
        yield Store(url, engine)
    finally:
        engine.dispose()


@contextmanager
def copy_of(url: str, directory: Path) -> Iterator[str]:
    """The URL of a new store holding what the store at ``url`` holds, which no connection may
    have open: a copy of its SQLite file (the backup API) in ``directory``, or a PostgreSQL
    database made with ``url``'s as its template, dropped on leaving."""
    source = make_url(url)
    name = f"infersight_test_{uuid.uuid4().hex[:12]}"
    if source.get_backend_name() == "sqlite":
        path = directory / f"{name}.db"
        read = closing(sqlite3.connect(str(source.database)))
        with read as original, closing(sqlite3.connect(path)) as written:
            original.backup(written)
        yield f"sqlite:///{path}"
        return
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{source.database}"')
    try:
        yield source.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="module", params=BOTH_STORES)
def sampled(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The URL of a migrated store of this module's own (a SQLite file, or a PostgreSQL
    database from ``fresh_database``), sampled once per store: two instances on two 3g.40gb
    slices of one A100 80GB, and two on time-sliced shares (1/3 and 2/3) of one H100, each
    through its own sidecar; with the cost model stored. Its engine is disposed and no test
    opens it: it is the template that ``sliced`` and ``sliced_to_write`` are copies of."""
    directory = tmp_path_factory.mktemp("slices")
    with ExitStack() as stack:
        if request.param == "postgres":
            url = stack.enter_context(fresh_database())
        else:
            url = f"sqlite:///{directory / 'sampled.db'}"
        with opened(url) as store:
            migrate.upgrade(store.engine)
            for instance, mig in zip(("mig-a", "mig-b"), two_slices(), strict=True):
                nvml = FakeNvml([FakeGpu(name=A100, uuid=PARENT, migs=[mig])])
                sample_through_sidecar(store, directory, instance, nvml)
            for instance, share in (("ts-a", Fraction(1, 3)), ("ts-b", Fraction(2, 3))):
                nvml = FakeNvml([FakeGpu(name=H100, uuid=SHARED)])
                sample_through_sidecar(store, directory, instance, nvml, share)
            cost.put_model(store.engine, MODEL, T0)
        yield url


@pytest.fixture(scope="module")
def sliced(sampled: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A copy of the sampled store, shared by this module's tests that only read it."""
    with copy_of(sampled, tmp_path_factory.mktemp("sliced")) as url, opened(url) as store:
        yield store


@pytest.fixture
def sliced_to_write(sampled: str, tmp_path: Path) -> Iterator[Store]:
    """A fresh copy of the sampled store for one test that writes into it (what the others
    read is not changed)."""
    with copy_of(sampled, tmp_path) as url, opened(url) as store:
        yield store


def test_slices_and_shares_land_in_the_store_and_its_rollups(sliced):
    g, r = gpu_samples.c, gpu_rollups.c
    with sliced.engine.connect() as c:
        stored = set(c.execute(select(g.instance, g.gpu_slice, g.parent_uuid, g.gpu_instance_id)))
        rolled = set(c.execute(select(r.instance, r.gpu_slice).where(r.resolution == "1h")))
    assert stored == {
        ("mig-a", "mig:3g.40gb:3/7", PARENT, 1),
        ("mig-b", "mig:3g.40gb:3/7", PARENT, 2),
        ("ts-a", "share:1/3", SHARED, None),
        ("ts-b", "share:2/3", SHARED, None),
    }
    assert rolled == {(i, s) for i, s, _, _ in stored}


def test_the_cost_api_prices_each_slice_by_its_fraction_and_the_totals_add_up(sliced):
    api = api_for(sliced, cost_model="slices")
    window = {"start": T0.isoformat(), "end": (T0 + TEN_MINUTES).isoformat()}
    body = api.get("/api/v1/cost", params={**window, "group_by": "instance"}).json()
    instances = {i["instance"]: i for i in body["instances"]}
    # 10 minutes of an A100 at 3.50/h is 0.583333; each 3g.40gb slice holds 3/7 of it
    assert instances["mig-a"]["cost"] == instances["mig-b"]["cost"] == "0.250000"
    assert instances["mig-a"]["gpu_hours"] == "0.071429"  # 3/7 of 1/6 h
    assert instances["mig-a"]["gpu_slices"] == [
        {
            "kind": "mig",
            "profile": "3g.40gb",
            "fraction": "3/7",
            "fraction_decimal": "0.428571",
            "text": "MIG 3g.40gb (3/7 of the GPU)",
        }
    ]
    # 10 minutes of an H100 at 2.00/h is 0.333333…: 1/3 and 2/3 of it, rounded down
    assert instances["ts-a"]["cost"] == "0.111111"
    assert instances["ts-b"]["cost"] == "0.222222"
    assert instances["ts-b"]["gpu_slices"][0]["text"] == "time-sliced share (2/3 of the GPU)"
    a100 = Decimal("3.50") / 6
    h100 = Decimal("2.00") / 6
    assert Decimal(instances["mig-a"]["cost"]) + Decimal(instances["mig-b"]["cost"]) <= a100
    assert Decimal(instances["ts-a"]["cost"]) + Decimal(instances["ts-b"]["cost"]) <= h100
    # an idle instance on a slice: its idle cost is the slice's cost
    assert instances["mig-a"]["idle_cost"] == "0.250000"
    # the fleet's total is the instances' exactly, and the groups add up to it
    total = Decimal(body["total"]["cost"])
    assert total == sum(Decimal(i["cost"]) for i in body["instances"]) == Decimal("0.833333")
    assert total == sum(Decimal(gr["cost"]) for gr in body["groups"])


def test_a_long_window_read_from_rollups_prices_the_slices_the_same(sliced):
    api = api_for(sliced, cost_model="slices")
    window = {"start": (T0 - timedelta(hours=4)).isoformat(), "end": (T0 + timedelta(hours=4))}
    window["end"] = window["end"].isoformat()  # type: ignore[union-attr]
    body = api.get("/api/v1/cost", params={**window, "group_by": "instance"}).json()
    instances = {i["instance"]: i for i in body["instances"]}
    # the sampler ran on past ten minutes: every instance's time here is its own samples',
    # so compare shares of one GPU with one another, not with a fixed figure
    assert instances["mig-a"]["gpu_slices"][0]["fraction"] == "3/7"
    a, b = Decimal(instances["ts-a"]["cost"]), Decimal(instances["ts-b"]["cost"])
    hours_a = Decimal(instances["ts-a"]["gpu_hours"]) * 3  # the whole GPU's hours
    assert a > 0
    assert b > 0
    assert Decimal(body["total"]["cost"]) == sum(Decimal(i["cost"]) for i in body["instances"])
    assert abs(a - hours_a * Decimal("2.00") / 3) <= Decimal("0.000002")


def test_cost_per_million_tokens_of_an_instance_on_a_slice_is_its_slice_cost(sliced_to_write):
    records = make_records(
        np.random.default_rng(34),
        T0 + timedelta(minutes=1),
        40,
        span=timedelta(minutes=8),
        models=("llama-8b",),
        instances=("mig-a",),
        tenants=("acme",),
        priorities=("interactive",),
        error_rate=0.0,
    )
    open_writer(sliced_to_write.engine).write_requests(records)
    api = api_for(sliced_to_write, cost_model="slices")
    window = {"start": T0.isoformat(), "end": (T0 + TEN_MINUTES).isoformat()}
    body = api.get("/api/v1/cost", params={**window, "group_by": "model,instance"}).json()
    served = next(g for g in body["groups"] if g["labels"]["instance"] == "mig-a")
    tokens = sum(r.input_tokens + r.output_tokens for r in records)
    assert served["cost"] == "0.250000"  # the slice's 3/7, not the A100's 0.583333
    per_million = Decimal("0.250000") * 1_000_000 / tokens
    assert Decimal(served["cost_per_million_tokens"]["total"]) == per_million.quantize(
        Decimal("0.000001")
    )
    instance = next(i for i in body["instances"] if i["instance"] == "mig-a")
    assert Decimal(instance["idle_cost"]) < Decimal(instance["cost"])  # it served: not all idle

"""The durable spool: acknowledged means committed, bounded by bytes, survives kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infersight.collector.codec import Kind
from infersight.collector.spool import (
    SAMPLE_KINDS,
    SPOOL_FILE,
    TRACE_INDEXED_KIND,
    Entry,
    FsyncMode,
    Spool,
    SpoolConfig,
)
from infersight.core.errors import ConfigurationError, Unavailable

ROOT = Path(__file__).resolve().parents[2]


def entry(i: int, ready_at: float = 0.0, size: int = 100) -> Entry:
    return Entry(
        kind=1, trace_id=f"{i:032x}", ready_at=ready_at, payload=str(i).encode().ljust(size)
    )


@pytest.mark.parametrize("mode", list(FsyncMode))
def test_appended_entries_are_readable_once_acknowledged_and_gone_once_deleted(
    tmp_path: Path, mode: FsyncMode
) -> None:
    spool = Spool(SpoolConfig(tmp_path, fsync=mode))
    try:
        futures = [spool.append([entry(i, ready_at=float(i))]) for i in range(20)]
        for future in futures:
            assert future.result(timeout=10) is None
        assert spool.stats()[0] == 20
        ready = spool.ready(now=9.5, kinds=[1], limit=100)
        assert [int(s.payload) for s in ready] == list(range(10))
        spool.delete([s.seq for s in ready])
        assert spool.stats()[0] == 10
        assert [int(s.payload) for s in spool.ready(now=100, kinds=[1], limit=3)] == [10, 11, 12]
    finally:
        spool.close()


def test_a_reopened_spool_keeps_its_entries_and_byte_count(tmp_path: Path) -> None:
    spool = Spool(SpoolConfig(tmp_path))
    spool.append([entry(i) for i in range(5)]).result(timeout=10)
    before = spool.stats()
    spool.close()
    again = Spool(SpoolConfig(tmp_path))
    try:
        assert again.stats() == before
    finally:
        again.close()


def test_above_the_high_water_mark_appends_are_refused_until_shipping_frees_space(
    tmp_path: Path,
) -> None:
    one = entry(0).size
    spool = Spool(SpoolConfig(tmp_path, max_bytes=one * 3))
    try:
        spool.append([entry(i) for i in range(3)]).result(timeout=10)
        with pytest.raises(Unavailable):
            spool.append([entry(3)])
        spool.delete([s.seq for s in spool.ready(now=1.0, kinds=[1], limit=1)])
        spool.append([entry(4)]).result(timeout=10)
        assert spool.stats()[0] == 3
    finally:
        spool.close()


def test_a_full_disk_fails_the_append_with_unavailable_and_the_spool_keeps_working(
    tmp_path: Path,
) -> None:
    spool = Spool(SpoolConfig(tmp_path, max_pages=40))  # 40 pages of 4 KiB
    try:
        spool.append([entry(0)]).result(timeout=10)
        too_much = [entry(i, size=4000) for i in range(1, 200)]
        with pytest.raises(Unavailable):
            spool.append(too_much).result(timeout=10)
        spool.append([entry(500)]).result(timeout=10)
        assert [int(s.payload) for s in spool.ready(now=1.0, kinds=[1], limit=10)] == [0, 500]
    finally:
        spool.close()


def test_entries_are_found_by_trace_whatever_their_kind_and_an_older_spool_is_reindexed(
    tmp_path: Path,
) -> None:
    old = sqlite3.connect(tmp_path / SPOOL_FILE)
    old.execute(
        "CREATE TABLE entries (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind INTEGER NOT NULL, "
        "trace_id TEXT NOT NULL, ready_at REAL NOT NULL, payload BLOB NOT NULL)"
    )
    old.execute("CREATE INDEX entries_trace ON entries (trace_id, kind)")
    old.execute("INSERT INTO entries (kind, trace_id, ready_at, payload) VALUES (2, 'a', 0, X'78')")
    old.commit()
    old.close()
    spool = Spool(SpoolConfig(tmp_path))
    try:
        stage = Entry(TRACE_INDEXED_KIND, "b", 0.0, b"stage")
        spool.append([entry(1), stage, Entry(1, "b", 0.0, b"record")]).result(timeout=10)
        indexes = {row[1] for row in spool._db.execute("PRAGMA index_list(entries)")}
        assert indexes == {"entries_stage_trace", "entries_samples"}
        found = spool.by_trace(["a", "b"], TRACE_INDEXED_KIND)
        assert sorted(s.payload for s in found) == [b"stage", b"x"]
        assert [s.payload for s in spool.by_trace(["b"], 1)] == [b"record"]
    finally:
        spool.close()


def test_a_group_window_above_200_ms_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SpoolConfig(tmp_path, group_window_s=0.5)


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from infersight.collector.spool import Entry, Spool, SpoolConfig
    spool = Spool(SpoolConfig(Path(sys.argv[1])))
    i = 0
    while True:
        batch = [Entry(1, f"{i + k:032x}", 0.0, str(i + k).encode()) for k in range(10)]
        spool.append(batch).result()
        print(i + 9, flush=True)
        i += 10
    """
)


def test_every_acknowledged_entry_survives_kill_9(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    acked = -1
    try:
        assert proc.stdout is not None
        while acked < 300:
            line = proc.stdout.readline()
            assert line, "the writer died"
            acked = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
    spool = Spool(SpoolConfig(tmp_path))
    try:
        stored = {int(s.payload) for s in spool.ready(now=1.0, kinds=[1], limit=10**6)}
        assert set(range(acked + 1)) <= stored
    finally:
        spool.close()


def test_sample_lookups_use_their_own_index_not_a_scan_of_the_records(tmp_path: Path) -> None:
    spool = Spool(SpoolConfig(tmp_path))
    try:
        spool.append([entry(i) for i in range(50)]).result(timeout=10)
        spool.append([Entry(SAMPLE_KINDS[0], "", 7.0, b"gpu")]).result(timeout=10)
        assert spool.oldest_ready_at(SAMPLE_KINDS) == 7.0
        assert [s.payload for s in spool.ready(10.0, SAMPLE_KINDS, 10)] == [b"gpu"]
        plan = spool._db.execute(
            "EXPLAIN QUERY PLAN SELECT ready_at FROM entries "
            f"WHERE kind IN ({', '.join(map(str, SAMPLE_KINDS))}) ORDER BY seq LIMIT 1"
        ).fetchall()
        assert "entries_samples" in str(plan)
    finally:
        spool.close()


def test_the_spools_indexed_kinds_are_the_codecs_stage_and_sample_kinds() -> None:
    assert TRACE_INDEXED_KIND == Kind.STAGE
    assert set(SAMPLE_KINDS) == {Kind.GPU, Kind.SERVER}


def test_by_trace_reads_at_most_the_oldest_n_entries_of_each_trace(tmp_path: Path) -> None:
    spool = Spool(SpoolConfig(tmp_path))
    try:
        flood = [Entry(TRACE_INDEXED_KIND, "big", 0.0, f"{i}".encode()) for i in range(50)]
        small = [
            Entry(TRACE_INDEXED_KIND, "small", 0.0, b"s0"),
            Entry(TRACE_INDEXED_KIND, "small", 0.0, b"s1"),
        ]
        spool.append([*flood, *small]).result(timeout=10)
        found = spool.by_trace(["big", "small"], TRACE_INDEXED_KIND, per_trace=3)
        assert sorted(s.payload for s in found if s.trace_id == "big") == [b"0", b"1", b"2"]
        assert sorted(s.payload for s in found if s.trace_id == "small") == [b"s0", b"s1"]
        assert len(spool.by_trace(["big"], TRACE_INDEXED_KIND)) == 50
    finally:
        spool.close()


@pytest.mark.parametrize("count", [1, 127, 128, 129, 300, 1000])
def test_an_append_of_any_size_is_stored_whole_and_in_order(tmp_path: Path, count: int) -> None:
    # The committer inserts many rows per statement (then the rest in smaller pieces):
    # every entry must land once, in append order, with its own values.
    spool = Spool(SpoolConfig(tmp_path))
    first = [entry(i, ready_at=float(i)) for i in range(count)]
    second = [
        Entry(kind=5, trace_id="ab" * 16, ready_at=0.5, payload=b"\x00\xff" * i) for i in range(7)
    ]
    spool.append(first).result(timeout=60)
    spool.append(second).result(timeout=60)
    stored = spool.ready(float("inf"), [1, 5], 10_000)
    assert [tuple(s)[1:] for s in stored] == [tuple(e) for e in first + second]
    seqs = [s.seq for s in stored]
    assert seqs == list(range(seqs[0], seqs[0] + count + 7))
    assert spool.stats() == (count + 7, sum(e.size for e in first + second))
    spool.close()

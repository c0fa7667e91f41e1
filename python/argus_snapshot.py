#!/usr/bin/env python3
"""Reading an Argus snapshot from Python (pyarrow + DuckDB).

A snapshot is a directory of Parquet files (docs/snapshot.md lists every column). This
module answers the three everyday questions:

- which hangs are there?                 hangs(snap)
- how did a hang come about?             hang_path(snap, spin)  (edges followed backwards)
- what kinds of causal edges are there?  edge_counts(snap)

Usage as a script:

    python3 python/argus_snapshot.py SNAPSHOT_OR_START_DIR [--pid P] [--json]

SNAPSHOT_OR_START_DIR is a snapshot (`argus build -o`) or an `argus start -o` directory,
whose `latest` snapshot is read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import duckdb
import pyarrow.parquet as pq

TABLES = ("events", "segments", "edges", "spins", "threads", "errors")


def resolve(path: str) -> str:
    """A snapshot directory, or the `latest` snapshot of an `argus start` directory."""
    if os.path.isfile(os.path.join(path, "manifest.json")):
        return path
    latest = os.path.join(path, "latest")
    if os.path.exists(latest):
        return os.path.realpath(latest)
    raise FileNotFoundError(f"{path}: neither a snapshot (manifest.json) nor an argus start directory (latest)")


class Snapshot:
    """One snapshot: the manifest, and a DuckDB connection with a view per table."""

    def __init__(self, path: str):
        self.path = resolve(path)
        with open(os.path.join(self.path, "manifest.json")) as f:
            self.manifest = json.load(f)
        self.db = duckdb.connect()
        for t in TABLES:
            file = os.path.join(self.path, f"{t}.parquet")
            if os.path.exists(file):
                # pyarrow keeps the exact Arrow types (UInt64 ids, UInt32 counts).
                self.db.register(t, pq.read_table(file))

    def sql(self, query: str, *params):
        return self.db.execute(query, list(params)).fetchall()


def counts(snap: Snapshot) -> dict:
    """Rows per table, read from the Parquet footers."""
    out = {}
    for t in TABLES:
        file = os.path.join(snap.path, f"{t}.parquet")
        if os.path.exists(file):
            out[t] = pq.ParquetFile(file).metadata.num_rows
    return out


def hangs(snap: Snapshot, pid: int | None = None, main_only: bool = False) -> list[dict]:
    """Spinning vertices, longest first, with the thread's names."""
    rows = snap.sql(
        """
        SELECT s.segment, s.last, s.tid, s.pid, s.class, s.start_ns, s.end_ns,
               s.end_ns - s.start_ns AS duration_ns, s.open, s.wait_syscall,
               coalesce(t.comm, '?') AS comm, coalesce(t.process, '?') AS process
        FROM spins s LEFT JOIN threads t ON t.tid = s.tid
        WHERE (? IS NULL OR s.pid = ?) AND (NOT ? OR s.tid = s.pid)
        ORDER BY duration_ns DESC, s.segment DESC
        """,
        pid,
        pid,
        main_only,
    )
    keys = ["segment", "last", "tid", "pid", "class", "start_ns", "end_ns", "duration_ns",
            "open", "wait_syscall", "comm", "process"]
    return [dict(zip(keys, r)) for r in rows]


STRENGTH_RANK = {"strong": 2, "boosted": 1, "weak": 0}


def hang_path(snap: Snapshot, spin: dict, max_steps: int = 16) -> list[dict]:
    """From the hang back towards its root cause: start at the segment that ended the spin's
    wait (the thread's next segment, when there is one), then repeatedly take the incoming
    edge that started the current segment (strongest first, then latest; `thread_order`
    only when nothing else came in; the weak `wait_wake` pairs, which lead from a waker to
    whoever waited for it, are not followed) to its source segment."""
    def segment(seg_id):
        r = snap.sql(
            "SELECT s.id, s.tid, s.pid, s.start_ns, s.end_ns, s.wait_syscall, coalesce(t.comm, '?') "
            "FROM segments s LEFT JOIN threads t ON t.tid = s.tid WHERE s.id = ?",
            seg_id,
        )
        if not r:
            return None
        k = ["segment", "tid", "pid", "start_ns", "end_ns", "wait_syscall", "comm"]
        return dict(zip(k, r[0]))

    first = segment(spin["segment"])
    path = [dict(first or {"segment": spin["segment"], "tid": spin["tid"]}, edge=None)]
    # The wake-up that ended the spin's (last) wait starts the thread's next segment.
    cur = spin["last"] + 1 if segment(spin["last"] + 1) else spin["last"]
    seen = {spin["segment"]}
    for _ in range(max_steps):
        edges = snap.sql(
            "SELECT src, kind, strength, ts_ns FROM edges WHERE dst = ? AND kind <> 'wait_wake'", cur
        )
        if not edges:
            break
        edges.sort(key=lambda e: (e[1] != "thread_order", STRENGTH_RANK.get(e[2], 0), e[3]), reverse=True)
        src, kind, strength, ts = edges[0]
        if src in seen:
            break
        seen.add(src)
        item = segment(src)
        if item is None:
            break
        item["edge"] = {"kind": kind, "strength": strength, "ts_ns": ts}
        path.append(item)
        cur = src
    return path


def edge_counts(snap: Snapshot) -> dict:
    """Edges by kind and strength."""
    rows = snap.sql(
        "SELECT kind, strength, count(*) FROM edges GROUP BY kind, strength ORDER BY kind, strength"
    )
    out: dict = {}
    for kind, strength, n in rows:
        out.setdefault(kind, {})[strength] = n
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("snapshot")
    p.add_argument("--pid", type=int, help="only this process's hangs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    snap = Snapshot(a.snapshot)
    hs = hangs(snap, pid=a.pid, main_only=a.pid is None)
    result = {
        "snapshot": snap.path,
        "manifest_counts": snap.manifest["counts"],
        "counts": counts(snap),
        "hangs": hs,
        "path": hang_path(snap, hs[0]) if hs else [],
        "edge_counts": edge_counts(snap),
    }
    if a.json:
        json.dump(result, sys.stdout, indent=1, default=str)
        print()
        return 0
    print(f"snapshot {snap.path}")
    print("rows: " + ", ".join(f"{t} {n}" for t, n in result["counts"].items()))
    print(f"{len(hs)} hangs" + (f" of pid {a.pid}" if a.pid is not None else " of main threads"))
    for h in hs[:10]:
        print(f"  {h['comm']} (tid {h['tid']}, pid {h['pid']}) {h['class']} "
              f"{h['duration_ns'] / 1e9:.3f} s{' (open)' if h['open'] else ''}")
    if hs:
        print("path of the longest, from the hang backwards:")
        for item in result["path"]:
            e = item.get("edge")
            how = f"← {e['kind']} [{e['strength']}] " if e else ""
            print(f"  {how}{item.get('comm', '?')} (tid {item.get('tid')}) segment {item['segment']}")
    print("edges by kind: " + ", ".join(
        f"{k} {sum(v.values())}" for k, v in result["edge_counts"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

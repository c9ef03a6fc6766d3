#!/usr/bin/env python
"""A search with the machine loaded part of the way through, then the bench of what it cached.

    python bench/loaded_search.py                     # trimul_outgoing, budget 200, N=702
    python bench/loaded_search.py --load-at 120 --load-for 60 --hogs 2 --budget 200

Issue 13 asks that a search caches a plan at least as fast as every named plan even when a
second process loads both cores for a minute in the middle of it.  This script:

1. starts ``autotune search WORKLOAD --budget B --db DB`` from this checkout (a fresh database
   in a temporary folder unless ``--db`` is given), with its own ``XDG_CACHE_HOME`` so no earlier
   calibration or kernel cache is used;
2. ``--load-at`` seconds after the start, starts ``--hogs`` processes that each spin a core in a
   pure-Python loop (no memory traffic beyond L1: the load is CPU time taken from the search's
   threads, what another user's job on a shared machine does) and kills them ``--load-for``
   seconds later;
3. when the search is done, runs ``autotune bench WORKLOAD --db DB --rounds R`` on the idle
   machine (one process, interleaved rounds: the cached best against every named plan);
4. writes ``<out>/loaded-search-<workload>-<dims>-cpu.json``: the command lines, the load
   window relative to the search's start and which trials finished inside it, the search record
   (``bench/search_record.py``) and the bench's JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from search_record import record  # noqa: E402

HOG = "import time\nend = time.time() + {secs}\nx = 0\nwhile time.time() < end:\n    x += 1\n"


def fmt_wall(s: float) -> str:
    return f"{int(s // 60)}m{s % 60:.1f}s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", nargs="?", default="trimul_outgoing")
    ap.add_argument("--dims", default=None)
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--load-at", type=float, default=120.0)
    ap.add_argument("--load-for", type=float, default=60.0)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--db", default=None)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="loaded-search-"))
    db = Path(args.db) if args.db else work / "plans.sqlite"
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    dims = ["--dims", args.dims] if args.dims else []
    search_cmd = [sys.executable, "-m", "autotune.cli", "search", args.workload, *dims,
                  "--budget", str(args.budget), "--db", str(db)]
    print("search:", " ".join(search_cmd), flush=True)
    t0 = time.time()
    search = subprocess.Popen(search_cmd, env=env, cwd=ROOT)
    hogs: list[subprocess.Popen] = []
    window = None
    while search.poll() is None:
        now = time.time() - t0
        if window is None and now >= args.load_at:
            hogs = [subprocess.Popen([sys.executable, "-c", HOG.format(secs=args.load_for)])
                    for _ in range(args.hogs)]
            window = [now, None]
            print(f"load: {args.hogs} busy processes from {now:.0f} s", flush=True)
        if window is not None and window[1] is None and now >= window[0] + args.load_for:
            for h in hogs:
                h.kill()
            window[1] = now
            print(f"load: stopped at {now:.0f} s", flush=True)
        time.sleep(0.5)
    for h in hogs:
        h.kill()
        h.wait()
    if window is not None and window[1] is None:
        window[1] = time.time() - t0
    wall = time.time() - t0
    if search.returncode != 0:
        print(f"the search failed (exit {search.returncode})", file=sys.stderr)
        return 1
    rec = record(db, fmt_wall(wall), " ".join(search_cmd[2:]),
                 f"clean checkout {ROOT}, fresh database and XDG cache; {args.hogs} pure-Python "
                 f"busy loops (one core each) from {window[0]:.0f} s to {window[1]:.0f} s of "
                 f"the search" if window else "the search ended before the load was due")
    bench_cmd = [sys.executable, "-m", "autotune.cli", "bench", args.workload, *dims,
                 "--db", str(db), "--rounds", str(args.rounds), "--format", "json",
                 "--out", str(work / "bench")]
    print("bench:", " ".join(bench_cmd), flush=True)
    bench = subprocess.run(bench_cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if bench.returncode != 0:
        print(bench.stderr, file=sys.stderr)
        return 1
    out = {"search": rec, "load_window_s": window, "hogs": args.hogs,
           "search_command": " ".join(search_cmd[2:]), "bench_command": " ".join(bench_cmd[2:]),
           "bench": json.loads(bench.stdout)}
    label = "-".join(f"{k}{v}" for k, v in sorted((rec["dims"] or {}).items()))
    path = Path(args.out) / f"loaded-search-{args.workload}-{label}-cpu.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

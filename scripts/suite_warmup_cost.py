"""Where a test run's engine time went: warm-up blocks, sentinels and cells measured again, read
from every infbench store the run left under pytest's temporary folder (issue 40, item 9).

pytest keeps the temporary folders of its last three sessions (``/tmp/pytest-of-$USER/pytest-N``);
each test's stores (``*.db``) hold its cells with their warm-up records (``metrics.warmup``: blocks
and seconds), the runs' start and end, and every attempt. This sums them per test folder, most
warm-up first, so the tests that spend their time warming up (and not on what they test) stand out.

Usage::

    python scripts/suite_warmup_cost.py /tmp/pytest-of-root/pytest-23 [--top 25]

Prints the totals (s) and one line per test folder: warm-up s, cells measured again (their
wall s), the cells' own wall s, the runs' wall s and the cell count. A store that cannot be
read (a test's deliberately broken one) is skipped.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sqlite3
from pathlib import Path


def folder_costs(root: Path) -> dict[str, collections.Counter[str]]:
    """Per test folder (the first path part under ``root``): ``warmup_s``, ``remeasured_wall_s``,
    ``wall_s``, ``run_s`` (s) and ``cells``; each store counted once (pytest's ``*current``
    links point at numbered folders)."""
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    seen: set[str] = set()
    for db in sorted(root.rglob("*.db")):
        real = os.path.realpath(db)
        if real in seen:
            continue
        seen.add(real)
        try:
            con = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
            cells = con.execute("SELECT cell_id, metrics, wall_s FROM cells ORDER BY id").fetchall()
            runs = con.execute("SELECT started_at, finished_at FROM runs").fetchall()
        except sqlite3.Error:
            continue
        parts = db.relative_to(root).parts
        # under pytest-xdist each worker has its own folder (popen-gwN): the test's is below it
        c = out[parts[1] if parts[0].startswith("popen-gw") and len(parts) > 2 else parts[0]]
        attempts: collections.Counter[str] = collections.Counter()
        for cell_id, metrics, wall in cells:
            try:
                m = json.loads(metrics or "{}")
            except ValueError:
                m = {}
            warm = m.get("warmup") if isinstance(m, dict) else None
            c["warmup_s"] += float((warm or {}).get("seconds") or 0.0) if isinstance(warm, dict) else 0.0
            c["wall_s"] += float(wall or 0.0)
            c["cells"] += 1
            attempts[cell_id] += 1
            if attempts[cell_id] > 1:
                c["remeasured_wall_s"] += float(wall or 0.0)
        c["run_s"] += sum(f - s for s, f in runs if s and f)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the totals and the test folders with the most warm-up."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path, help="a pytest session's temporary folder")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    costs = folder_costs(a.root)
    total: collections.Counter[str] = collections.Counter()
    for c in costs.values():
        total.update(c)
    print("total: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(total.items())))
    for name, c in sorted(costs.items(), key=lambda kv: -kv[1]["warmup_s"])[:a.top]:
        print(f"{c['warmup_s']:7.1f} warm-up s {c['remeasured_wall_s']:6.1f} again s {c['wall_s']:7.1f} cell s "
              f"{c['run_s']:7.1f} run s {c['cells']:4d} cells  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Issue #28's figures in one run: the three benchmarks it asks for, one after the other.

- `/metrics` scrape time at 2,000 and 50,000 reviews (target: <= 100 ms at 50,000, and not
  growing with history): scripts/bench_metrics.py;
- re-review bookkeeping for a 2 MB file with 40 ledger entries (target <= 100 ms), with the
  webhook acknowledgement p99 of a real `cockpit serve --role all` during it (target
  <= 100 ms): scripts/bench_ledger.py;
- a 30,000-file PR from delivery to draft: scripts/bench_big_pr.py.

Each prints its own baseline measured in the same run (the smaller history, the algorithm
before the fix, the acknowledgements while nothing runs). Arguments after `--` go to every
script that takes them; run a script alone for its own options.

    python scripts/bench_hold_the_line.py [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer scrapes and runs (a smoke run, not figures)"
    )
    args = parser.parse_args()
    benches = [
        ("bench_metrics.py", ["--scrapes", "10"] if args.quick else []),
        ("bench_ledger.py", ["--runs", "1"] if args.quick else []),
        ("bench_big_pr.py", ["--files", "3000"] if args.quick else []),
    ]
    failed = []
    for script, extra in benches:
        print(f"\n=== {script} {' '.join(extra)}".rstrip(), flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, str(HERE / script), *extra])
        print(f"=== {script}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed.append(script)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

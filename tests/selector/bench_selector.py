"""Throughput of compiled selectors: matches per second (printed, not asserted).

Run from the repository root: .venv/bin/python -m tests.selector.bench_selector
"""

from __future__ import annotations

import timeit

from minibroker.selector import compile_selector

HEADERS = {
    "destination": "/queue/orders",
    "message-id": "ID:broker-1:1:1:42",
    "priority": "4",
    "persistent": "true",
    "timestamp": "1700000000000",
    "content-length": "120",
    "color": "red",
    "weight": "3",
    "region": "EU",
    "customer": "acme-corp",
}

CASES = [
    ("typical", "color = 'red' AND weight > 2.5"),
    ("string equality", "color = 'red'"),
    ("IN list", "region IN ('EU', 'US', 'APAC')"),
    ("LIKE prefix", "customer LIKE 'acme%'"),
    ("JMS header", "JMSPriority > 3 AND JMSDeliveryMode = 'PERSISTENT'"),
    ("mixed", "(color = 'red' OR color = 'blue') AND weight BETWEEN 1 AND 5 AND region <> 'US'"),
    ("no match, missing header", "size > 10 AND color = 'red'"),
]


def main() -> None:
    for label, text in CASES:
        sel = compile_selector(text)
        matches = sel.matches
        runs = 200_000
        seconds = min(timeit.repeat(lambda matches=matches: matches(HEADERS), number=runs, repeat=5))
        print(f"{label:26s} {runs / seconds:12,.0f} matches/s  {matches(HEADERS)!s:5s}  {text}")
    compile_seconds = min(timeit.repeat(_fresh_compile, number=200, repeat=3))
    print(f"{'compile (uncached)':26s} {200 / compile_seconds:12,.0f} selectors/s")


_counter = [0]


def _fresh_compile() -> None:
    """Compile a selector the cache has not seen."""
    _counter[0] += 1
    compile_selector(f"color = 'red' AND weight > 2.5 AND n{_counter[0]} IS NULL")


if __name__ == "__main__":
    main()

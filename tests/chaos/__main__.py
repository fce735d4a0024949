"""`python -m tests.chaos`: the long form of the chaos suite (defaults: 10,000 operations, 100 kills).

Needs TESSERA_CHAOS_DATABASE_URL (a PostgreSQL database whose name contains "chaos": it is dropped and
created again) and TESSERA_CHAOS_BROKER_URL (a Redis db: it is flushed), or the flags below. Prints the
report; exit code 1 when any promise broke.
"""

from __future__ import annotations

import argparse
import os
import sys

from tests.chaos.run import ChaosConfig, run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--ops", type=int, default=10_000, help="operations to run (at least)")
    parser.add_argument("--kills", type=int, default=100, help="faults to inject")
    parser.add_argument("--threads", type=int, default=8, help="client threads")
    parser.add_argument("--interval", type=float, default=4.0, help="seconds between faults")
    parser.add_argument(
        "--warmup", type=float, default=30.0, help="fault-free seconds before the first fault"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quiesce-timeout", type=float, default=90.0)
    parser.add_argument("--web-workers", type=int, default=3)
    parser.add_argument("--database-url", default=os.environ.get("TESSERA_CHAOS_DATABASE_URL", ""))
    parser.add_argument(
        "--broker-url",
        default=os.environ.get(
            "TESSERA_CHAOS_BROKER_URL", os.environ.get("TESSERA_TEST_BROKER_URL", "")
        ),
    )
    args = parser.parse_args(argv)
    if not args.database_url.startswith("postgres"):
        parser.error("give --database-url or TESSERA_CHAOS_DATABASE_URL (PostgreSQL)")
    if not args.broker_url.startswith("redis"):
        parser.error("give --broker-url or TESSERA_CHAOS_BROKER_URL (Redis)")
    for name in ("ops", "kills", "threads"):
        if not 0 <= getattr(args, name) <= 1_000_000:
            parser.error(f"--{name}: between 0 and 1000000")
    if not 0.5 <= args.interval <= 600:
        parser.error("--interval: between 0.5 and 600 seconds")
    if not 0 <= args.warmup <= 3600:
        parser.error("--warmup: between 0 and 3600 seconds")
    report = run_chaos(
        ChaosConfig(
            database_url=args.database_url,
            broker_url=args.broker_url,
            ops=args.ops,
            kills=args.kills,
            threads=max(1, args.threads),
            interval=args.interval,
            warmup=args.warmup,
            seed=args.seed,
            quiesce_timeout=args.quiesce_timeout,
            web_workers=max(1, args.web_workers),
        )
    )
    sys.stdout.write(report.format() + "\n")
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())

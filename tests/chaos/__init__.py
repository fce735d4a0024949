"""The chaos suite: the whole product (gunicorn, two Celery workers, beat, PostgreSQL, Redis) on loopback,
driven by many API clients while a fault injector SIGKILLs processes and terminates database sessions;
afterwards the invariant auditor (scheduling.services.audit) and the clients' own bookkeeping say whether
every promise held. docs/operations.md "Chaos suite" describes it; `python -m tests.chaos --help` runs it.
"""

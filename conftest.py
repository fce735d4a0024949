"""Root pytest configuration: each app's fixtures and factories are registered once here."""

pytest_plugins = [
    "portal.tests.fixtures",
    "quotas.tests.fixtures",
    "scheduling.tests.fixtures",
    "scheduling.telemetry.tests.fixtures",
    "codespaces.tests.fixtures",
    "tests.integration.fixtures",
    "tests.browser.fixtures",
    "tests.sso_fixtures",
]

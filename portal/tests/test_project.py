"""Project-level guarantees: production settings pass `check --deploy`, the engine imports without Django,
every admin page loads, the shell renders, plotly.js is served locally."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib import admin
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[2]


def _run(args, **env):
    dropped = {"DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    full_env = {k: v for k, v in os.environ.items() if k not in dropped}
    full_env.update(env)
    return subprocess.run(args, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)


def test_production_settings_pass_check_deploy_without_warnings(tmp_path):
    result = _run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        TESSERA_ENV="production",
        SECRET_KEY="x" * 20 + "production-secret-key-with-enough-entropy-1234567890",
        ALLOWED_HOSTS="tessera.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        TESSERA_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_refuses_to_start_without_secret_key(tmp_path):
    result = _run(
        [sys.executable, "manage.py", "check"],
        TESSERA_ENV="production",
        ALLOWED_HOSTS="tessera.example.com",
        TESSERA_VAR_DIR=str(tmp_path),
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_engine_imports_without_django_configured():
    code = "import sys, core.placement; assert 'django' not in sys.modules, sorted(sys.modules)"
    result = _run([sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_every_admin_changelist_and_add_page_loads(client, operator):
    client.force_login(operator)
    for model, model_admin in admin.site._registry.items():
        info = (model._meta.app_label, model._meta.model_name)
        changelist = client.get(reverse("admin:{}_{}_changelist".format(*info)))
        assert changelist.status_code == 200, info
        if model_admin.has_add_permission(changelist.wsgi_request):
            assert client.get(reverse("admin:{}_{}_add".format(*info))).status_code == 200, info


@pytest.mark.django_db
def test_shell_renders_navigation_for_a_member(client, bob):
    client.force_login(bob)
    page = client.get("/").content.decode()
    for section in ("Codespaces", "Quotas", "Cluster", "Dashboards", "API"):
        assert f">{section}</a>" in page
    assert 'href="/admin/"' not in page


def test_anonymous_user_is_sent_to_login(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_plotly_js_is_served_from_static(client, db):
    from django.contrib.staticfiles import finders

    found = finders.find("vendor/plotly/plotly.min.js")
    assert isinstance(found, str)
    assert found.endswith("plotly.min.js")

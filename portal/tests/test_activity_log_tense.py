"""The operators' activity log says what happened, in the past tense (issue 38, defect 16): every action
whose confirmation says what *will* happen stores a `done` sentence, so the log never reads "are
deleted" for something that was."""

from __future__ import annotations

from typing import Any

import pytest

from codespaces.services.templates_admin import retire_template
from portal.models import OperatorAction
from quotas import services as quota_services
from quotas.tests.factories import QuotaGroupFactory

pytestmark = pytest.mark.django_db


def _logged(action: str) -> str:
    return str(OperatorAction.objects.get(action=action).summary)


def test_deleting_a_quota_is_logged_in_the_past_tense(quota_a: Any, operator: Any) -> None:
    quota_services.delete_quota(quota_a, expected_version=None, actor=operator)
    summary = _logged("quota_delete")
    assert f"Quota {quota_a.name} of team" in summary
    assert " left group " in summary
    assert "leaves" not in summary


def test_deleting_a_quota_group_is_logged_in_the_past_tense(operator: Any) -> None:
    group = QuotaGroupFactory(name="empty-pool")
    quota_services.delete_group(group, expected_version=None, actor=operator)
    summary = _logged("quota_group_delete")
    assert summary.startswith("Group empty-pool and its scheduling queue were removed")
    assert " are removed" not in summary


def test_retiring_a_template_is_logged_in_the_past_tense(template: Any, operator: Any) -> None:
    retire_template(template, actor=operator)
    summary = _logged("template_retire")
    assert summary.startswith(f"Template {template.name} was retired")
    assert "is no longer offered" not in summary

"""Store what the owner wants of a codespace (running / stopped / deleted), set from its state for the
rows that exist: deleting/deleted → deleted, stopping/stopped → stopped, every other state → running
(a failed codespace still wants to run: its start queues it again)."""

from typing import Any

from django.db import migrations, models


def desired_from_state(apps: Any, schema_editor: Any) -> None:
    codespace = apps.get_model("codespaces", "Codespace")
    codespace.objects.filter(state__in=["deleting", "deleted"]).update(desired_state="deleted")
    codespace.objects.filter(state__in=["stopping", "stopped"]).update(desired_state="stopped")


class Migration(migrations.Migration):
    dependencies = [
        ("codespaces", "0003_bound_template_sizes_and_idle_window"),
    ]

    operations = [
        migrations.AddField(
            model_name="codespace",
            name="desired_state",
            field=models.CharField(
                choices=[("running", "Running"), ("stopped", "Stopped"), ("deleted", "Deleted")],
                default="running",
                max_length=10,
            ),
        ),
        migrations.RunPython(desired_from_state, migrations.RunPython.noop, elidable=False),
    ]

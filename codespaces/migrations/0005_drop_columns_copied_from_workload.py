"""Drop the columns a codespace copied from its workload and placement (why it waits, where it runs,
why it failed): `codespaces.phase.observe` derives them from the workload, which holds them."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("codespaces", "0004_codespace_desired_state_from_state"),
    ]

    operations = [
        migrations.RemoveField(model_name="codespace", name="failure_reason"),
        migrations.RemoveField(model_name="codespace", name="gpu_model_placed"),
        migrations.RemoveField(model_name="codespace", name="gpu_names"),
        migrations.RemoveField(model_name="codespace", name="node_name"),
        migrations.RemoveField(model_name="codespace", name="pending_code"),
        migrations.RemoveField(model_name="codespace", name="pending_reason"),
        migrations.RemoveField(model_name="codespace", name="queue_position"),
    ]

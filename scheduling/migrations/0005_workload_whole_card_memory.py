"""Whole cards are charged their memory: Workload.whole_card_memory_mib, filled for live workloads.

A placed whole card gets the memory its placement holds per GPU; a pending one the largest card of the
models it allows anywhere in the inventory (an upper bound of its pool's; new submissions and requeues
write the pool's own value).
"""

from django.db import migrations, models
from django.db.models import Max

WHOLE_CARD_MILLI = 1000


def charge_live_whole_cards(apps, schema_editor):
    Workload = apps.get_model("scheduling", "Workload")
    PlacementGpu = apps.get_model("scheduling", "PlacementGpu")
    Gpu = apps.get_model("scheduling", "Gpu")
    largest = {
        row["model"]: int(row["m"] or 0)
        for row in Gpu.objects.values("model").annotate(m=Max("memory_mib")).order_by()
    }
    live = Workload.objects.filter(
        gpu_count__gt=0, gpu_milli__gte=WHOLE_CARD_MILLI, state__in=["pending", "placed", "running"]
    )
    for w in live.iterator():
        if w.state == "pending":
            sizes = [m for model, m in largest.items() if not w.gpu_models or model in w.gpu_models]
            value = max(sizes, default=0)
        else:
            held = PlacementGpu.objects.filter(
                placement__workload_id=w.pk, placement__released_at__isnull=True
            ).aggregate(m=Max("gpu_memory_mib"))
            value = int(held["m"] or 0)
        Workload.objects.filter(pk=w.pk).update(whole_card_memory_mib=value)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0004_drop_indexes_covered_by_composites"),
    ]

    operations = [
        migrations.AddField(
            model_name="workload",
            name="whole_card_memory_mib",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Whole cards only, per GPU: the memory charged to the quota (the card held "
                "once placed, the largest card it may be placed on while pending)",
            ),
        ),
        migrations.RunPython(charge_live_whole_cards, migrations.RunPython.noop),
    ]

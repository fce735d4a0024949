"""Serializers of the usage API (read-only time series)."""

from __future__ import annotations

from rest_framework import serializers


class RangeQuerySerializer(serializers.Serializer):
    range = serializers.ChoiceField(
        choices=["6h", "24h", "48h", "7d", "30d", "90d"], required=False, default="24h"
    )


class TenantPointSerializer(serializers.Serializer):
    ts = serializers.DateTimeField()
    allocated = serializers.FloatField(help_text="Mean GPUs allocated (1 = one card)")
    used = serializers.FloatField(help_text="Mean GPUs of work (allocation × SM utilization)")
    idle = serializers.FloatField(help_text="Mean GPUs allocated at < 5 % SM")
    min = serializers.FloatField()
    max = serializers.FloatField()
    runtime = serializers.FloatField(help_text="Runtime share (GPUs)")
    borrowed = serializers.FloatField(help_text="GPUs used beyond min")
    pending = serializers.FloatField(help_text="Mean pending GPU workloads")
    utilization_percent = serializers.FloatField(allow_null=True)


class WastingCodespaceSerializer(serializers.Serializer):
    workload_id = serializers.IntegerField()
    name = serializers.CharField()
    idle_gpu_hours = serializers.FloatField()
    allocated_gpu_hours = serializers.FloatField()
    utilization_percent = serializers.FloatField(allow_null=True)


class TenantUsageSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="tenant.slug")
    quota = serializers.CharField(allow_null=True, required=False)
    resolution = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    allocated_gpu_hours = serializers.FloatField()
    used_gpu_hours = serializers.FloatField()
    idle_gpu_hours = serializers.FloatField()
    utilization_percent = serializers.FloatField(allow_null=True)
    points = TenantPointSerializer(many=True)
    wasting = WastingCodespaceSerializer(many=True)


class PoolPointSerializer(serializers.Serializer):
    ts = serializers.DateTimeField()
    allocation_cards_percent = serializers.FloatField(allow_null=True)
    allocation_milli_percent = serializers.FloatField(allow_null=True)
    utilization_percent = serializers.FloatField(allow_null=True)
    allocated_gpus = serializers.FloatField()
    capacity_gpus = serializers.FloatField()
    pending = serializers.FloatField()
    wait_p50_seconds = serializers.FloatField(allow_null=True)
    wait_p95_seconds = serializers.FloatField(allow_null=True)


class PoolUsageSerializer(serializers.Serializer):
    pool = serializers.CharField()
    resolution = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    points = PoolPointSerializer(many=True)


class BillQuerySerializer(serializers.Serializer):
    month = serializers.RegexField(
        r"^\d{4}-\d{2}$",
        max_length=7,
        required=False,
        help_text="The month billed, YYYY-MM (UTC); the current month when left out",
    )


class BillLineSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(source="model")
    part = serializers.CharField(
        help_text="A team's slug, or (platform overhead), (allocated but idle), (unallocated)"
    )
    allocated_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=3, source="allocated_hours"
    )
    allocation_charge = serializers.DecimalField(max_digits=14, decimal_places=2)
    used_gpu_hours = serializers.DecimalField(max_digits=14, decimal_places=3, source="used_hours")
    usage_charge = serializers.DecimalField(max_digits=14, decimal_places=2)


class BillSerializer(serializers.Serializer):
    month = serializers.CharField(source="period")
    currency = serializers.CharField()
    physical_cost = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        allow_null=True,
        help_text="Every GPU's GPU-hours × price (operators only; null for team members)",
    )
    lines = BillLineSerializer(many=True)

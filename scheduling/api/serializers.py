"""Serializers of the scheduling API: inventory (nodes, GPUs with who holds each slice), placements,
workloads and gang jobs."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.units import MILLI_PER_GPU
from scheduling.choices import GangTopologyMode, TopologyPolicy, UtilizationProfile
from scheduling.limits import MAX_REASON_LENGTH
from scheduling.models import (
    Gang,
    Gpu,
    MigReconfiguration,
    Node,
    Placement,
    PlacementGpu,
    Workload,
)


class GpuShareSerializer(serializers.Serializer):
    """One slice of a GPU. Workloads of tenants the caller cannot see show only their size."""

    workload = serializers.IntegerField(allow_null=True)
    name = serializers.CharField()
    tenant = serializers.CharField()
    gpu_milli = serializers.IntegerField()
    gpu_memory_mib = serializers.IntegerField()
    mig_profile = serializers.CharField(
        help_text="The MIG instance's profile on a MIG card, else empty."
    )
    mig_start = serializers.IntegerField(
        allow_null=True, help_text="The MIG instance's memory-slice position (0-7), else null."
    )


class MigReconfigurationSerializer(serializers.ModelSerializer):
    """One dynamic MIG card's reconfiguration: the card, old → new layout, its state since when."""

    node = serializers.CharField(source="gpu.node.name", read_only=True)
    gpu_index = serializers.IntegerField(source="gpu.index", read_only=True)
    gpu_uuid = serializers.CharField(source="gpu.uuid", read_only=True)
    old_layout = serializers.ListField(child=serializers.ListField(), read_only=True)
    new_layout = serializers.ListField(child=serializers.ListField(), read_only=True)
    transitions = serializers.ListField(child=serializers.DictField(), read_only=True)
    waiting = serializers.SerializerMethodField()

    class Meta:
        model = MigReconfiguration
        fields = [
            "id", "node", "gpu", "gpu_index", "gpu_uuid", "state", "old_layout", "new_layout",
            "reason", "backend_ref", "transitions", "waiting", "created_at",
            "applying_at", "deadline_at", "finished_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_waiting(self, obj: MigReconfiguration) -> int:
        """How many workloads wait for it (their instance is one it creates)."""
        return sum(1 for p in obj.placements.all() if p.released_at is None)


class GpuSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    used_milli = serializers.SerializerMethodField()
    used_memory_mib = serializers.SerializerMethodField()
    shares = serializers.SerializerMethodField()

    class Meta:
        model = Gpu
        fields = [
            "id", "node", "index", "uuid", "model", "memory_mib", "numa_node", "nvlink_group",
            "healthy", "used_milli", "used_memory_mib", "shares",
        ]  # fmt: skip
        read_only_fields = fields

    def _shares(self, gpu: Gpu) -> list[dict[str, Any]]:
        shares_by_gpu = self.context.get("shares_by_gpu")
        if shares_by_gpu is None:
            from scheduling.services.cluster_view import gpu_shares

            shares_by_gpu = gpu_shares([gpu.pk], self.context["request"].user)
        return list(shares_by_gpu.get(gpu.pk, []))

    def get_used_milli(self, gpu: Gpu) -> int:
        return sum(s["gpu_milli"] for s in self._shares(gpu))

    def get_used_memory_mib(self, gpu: Gpu) -> int:
        return sum(s["gpu_memory_mib"] for s in self._shares(gpu))

    @extend_schema_field(GpuShareSerializer(many=True))
    def get_shares(self, gpu: Gpu) -> list[dict[str, Any]]:
        return self._shares(gpu)


class NodeSerializer(serializers.ModelSerializer):
    gpu_count = serializers.SerializerMethodField()
    schedulable = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id", "name", "pool", "labels", "taints", "cpu_milli", "memory_mib", "gpu_model",
            "gpu_count", "cordoned", "healthy", "schedulable", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_gpu_count(self, node: Node) -> int:
        return len(node.gpus.all())

    def get_schedulable(self, node: Node) -> bool:
        from scheduling.services.snapshot import schedulable

        return schedulable(node)


class NodeDetailSerializer(NodeSerializer):
    gpus = serializers.SerializerMethodField()
    allocated_cpu_milli = serializers.SerializerMethodField()
    allocated_memory_mib = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [
            *NodeSerializer.Meta.fields,
            "gpus",
            "allocated_cpu_milli",
            "allocated_memory_mib",
        ]
        read_only_fields = fields

    @extend_schema_field(GpuSerializer(many=True))
    def get_gpus(self, node: Node) -> list[dict[str, Any]]:
        from scheduling.services.cluster_view import gpu_shares

        gpus = list(node.gpus.all())
        ctx = {
            **self.context,
            "shares_by_gpu": gpu_shares([g.pk for g in gpus], self.context["request"].user),
        }
        return list(GpuSerializer(gpus, many=True, context=ctx).data)

    def _alloc(self, node: Node) -> dict[str, int]:
        from django.db.models import Sum

        return Placement.objects.filter(node=node, released_at__isnull=True).aggregate(
            cpu=Sum("cpu_milli"), mem=Sum("memory_mib")
        )

    def get_allocated_cpu_milli(self, node: Node) -> int:
        return int(self._alloc(node)["cpu"] or 0)

    def get_allocated_memory_mib(self, node: Node) -> int:
        return int(self._alloc(node)["mem"] or 0)


def _reason_field(help_text: str) -> serializers.CharField:
    # Bounded here; required-or-not and the trim are the service's rule (portal.operator_log).
    return serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=MAX_REASON_LENGTH,
        default="",
        trim_whitespace=True,
        help_text=help_text,
    )


class GpuHealthSerializer(serializers.Serializer):
    healthy = serializers.BooleanField()
    reason = _reason_field("Required to mark it unhealthy: shown to the users whose work moves.")


class DrainSerializer(serializers.Serializer):
    reason = _reason_field("Required: shown to the users whose workloads are requeued.")


class CordonSerializer(serializers.Serializer):
    reason = _reason_field("Required: why the node takes no new work (kept in the audit trail).")


class OptionalReasonSerializer(serializers.Serializer):
    reason = _reason_field("Optional: kept in the audit trail.")


class ActionImpactSerializer(serializers.Serializer):
    """What an operator action will do (dry run) or did."""

    summary = serializers.CharField()
    workloads = serializers.ListField(child=serializers.IntegerField())
    teams = serializers.ListField(child=serializers.CharField())
    codespaces = serializers.IntegerField()
    jobs = serializers.IntegerField()


class DryRunSerializer(serializers.Serializer):
    """The answer of `?dry_run=1`: nothing was changed."""

    dry_run = serializers.BooleanField()
    action = serializers.CharField()
    impact = ActionImpactSerializer()


class OperatorResultSerializer(serializers.Serializer):
    requeued = serializers.ListField(child=serializers.IntegerField())


class PlacementGpuSerializer(serializers.ModelSerializer):
    index = serializers.IntegerField(source="gpu.index", read_only=True)
    uuid = serializers.CharField(source="gpu.uuid", read_only=True)

    class Meta:
        model = PlacementGpu
        fields = ["index", "uuid", "gpu_milli", "gpu_memory_mib", "mig_profile", "mig_start"]
        read_only_fields = fields


class PlacementSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    gpus = PlacementGpuSerializer(source="gpu_shares", many=True, read_only=True)

    class Meta:
        model = Placement
        fields = [
            "id", "workload", "tenant", "node", "cpu_milli", "memory_mib", "gpu_milli_total",
            "gpus", "created_at", "released_at",
        ]  # fmt: skip
        read_only_fields = fields


class WorkloadSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    quota = serializers.IntegerField(source="quota_id", read_only=True)
    owner = serializers.CharField(
        source="owner.username", read_only=True, default=None, allow_null=True
    )
    placement = serializers.SerializerMethodField()

    class Meta:
        model = Workload
        fields = [
            "id", "kind", "name", "tenant", "quota", "owner", "gang", "state", "pending_code",
            "pending_reason", "queue_position", "failure_reason", "cpu_milli", "memory_mib",
            "gpu_count", "gpu_milli", "gpu_memory_mib", "mig_profile", "gpu_models", "node_labels",
            "topology", "priority", "preemptible", "movable", "profile", "image", "submitted_at",
            "placed_at", "started_at", "finished_at", "placement",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(PlacementSerializer(allow_null=True))
    def get_placement(self, w: Workload) -> dict[str, Any] | None:
        active = [p for p in w.placements.all() if p.released_at is None]
        return dict(PlacementSerializer(active[0]).data) if active else None


class JobMemberSerializer(serializers.Serializer):
    """The resources of every pod of a job."""

    cpu_milli = serializers.IntegerField(min_value=1)
    memory_mib = serializers.IntegerField(min_value=1)
    gpu_count = serializers.IntegerField(min_value=0, max_value=16, default=0)
    gpu_milli = serializers.IntegerField(min_value=0, max_value=MILLI_PER_GPU, required=False)
    gpu_memory_mib = serializers.IntegerField(min_value=0, default=0)
    mig_profile = serializers.CharField(
        max_length=16,
        allow_blank=True,
        default="",
        help_text="A MIG profile of the pool (1g.10gb): one GPU instance per pod; leave the gpu_ fields unset.",
    )
    gpu_models = serializers.ListField(child=serializers.CharField(), default=list)
    node_labels = serializers.DictField(child=serializers.CharField(), default=dict)
    topology = serializers.ChoiceField(choices=TopologyPolicy.choices, default="none")
    profile = serializers.ChoiceField(choices=UtilizationProfile.choices, default="training")
    image = serializers.CharField(max_length=255, allow_blank=True, default="")


class JobCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63)
    tenant = serializers.CharField(
        required=False, help_text="Tenant slug (default: your only one)."
    )
    quota = serializers.IntegerField(
        required=False, help_text="Quota id (default: the tenant's only quota)."
    )
    pods = serializers.IntegerField(min_value=1, max_value=512)
    min_available = serializers.IntegerField(min_value=1, required=False)
    member = JobMemberSerializer()
    timeout_seconds = serializers.IntegerField(min_value=1, max_value=604800, default=600)
    priority = serializers.IntegerField(min_value=-1000, max_value=1000, default=0)
    preemptible = serializers.BooleanField(default=True)
    topology_level = serializers.CharField(
        max_length=32,
        allow_blank=True,
        default="",
        help_text="All pods in one domain of this level of the pool's topology (rack, block, nvlink; "
        "see the cluster page); blank = anywhere.",
    )
    topology_mode = serializers.ChoiceField(
        choices=GangTopologyMode.choices,
        default=GangTopologyMode.REQUIRED,
        help_text="required: one domain or wait; preferred: the tightest domain that fits, else anywhere.",
    )
    movable = serializers.BooleanField(
        default=True,
        help_text="Defragmentation may requeue its pods to free whole GPUs (false: exempt).",
    )


class JobMemberStatusSerializer(serializers.ModelSerializer):
    placement = serializers.SerializerMethodField()

    class Meta:
        model = Workload
        fields = [
            "id", "name", "state", "pending_code", "pending_reason", "queue_position",
            "failure_reason", "placed_at", "started_at", "finished_at", "placement",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(PlacementSerializer(allow_null=True))
    def get_placement(self, w: Workload) -> dict[str, Any] | None:
        active = [p for p in w.placements.all() if p.released_at is None]
        return dict(PlacementSerializer(active[0]).data) if active else None


class JobSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    quota = serializers.IntegerField(source="quota_id", read_only=True)
    owner = serializers.CharField(
        source="owner.username", read_only=True, default=None, allow_null=True
    )
    pods = serializers.SerializerMethodField()
    members = JobMemberStatusSerializer(many=True, read_only=True)

    class Meta:
        model = Gang
        fields = [
            "id", "name", "tenant", "quota", "owner", "state", "reason", "min_available",
            "timeout_seconds", "topology_level", "topology_mode", "created_at", "deadline_at",
            "pods", "members",
        ]  # fmt: skip
        read_only_fields = fields

    def get_pods(self, gang: Gang) -> int:
        return len(gang.members.all())


class StartEstimateSerializer(serializers.Serializer):
    """When a waiting workload is likely to start (all null but `workload` and `state` when it is not
    waiting): a range from a forward replay of the queue on the current cluster, with the reason."""

    workload = serializers.IntegerField(allow_null=True, help_text="null: a codespace not started.")
    state = serializers.CharField()
    waiting = serializers.BooleanField()
    earliest = serializers.DateTimeField(allow_null=True)
    latest = serializers.DateTimeField(
        allow_null=True, help_text="null: not expected within 30 days (or not waiting)."
    )
    summary = serializers.CharField(allow_null=True, help_text='e.g. "likely in 20–40 min"')
    reason = serializers.CharField(allow_null=True)
    position = serializers.IntegerField(allow_null=True, help_text="1 = next in the queue.")
    computed_at = serializers.DateTimeField(allow_null=True)

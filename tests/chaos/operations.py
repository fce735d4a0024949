"""Random API operations as the seeded users: codespaces of every size (create, stop, start, delete),
gang jobs (submit, cancel), quota edits with and without If-Match, and operator actions (cordon,
uncordon, drain, GPU failure and repair). Every operation is one `OpRecord`."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.client import ApiClient, Call

OPERATOR = "(operator)"
TEMPLATE_POOLS = {"pytorch": "training", "notebook": "interactive"}
CUSTOM_SIZES: list[dict[str, Any]] = [
    {"gpu_mode": "none", "gpu_count": 0, "cpu_milli": 1000, "memory_mib": 2048},
    {"gpu_mode": "slice", "gpu_count": 1, "gpu_percent": 10, "gpu_memory_gib": 4},
    {"gpu_mode": "slice", "gpu_count": 1, "gpu_percent": 50, "gpu_memory_gib": 10},
    {"gpu_mode": "slice", "gpu_count": 1, "gpu_percent": 75, "gpu_memory_gib": 16},
    {"gpu_mode": "whole", "gpu_count": 1, "cpu_milli": 4000, "memory_mib": 16384},
    {"gpu_mode": "whole", "gpu_count": 2, "cpu_milli": 8000, "memory_mib": 32768},
]
JOB_MEMBERS: list[dict[str, Any]] = [
    {"cpu_milli": 1000, "memory_mib": 2048, "gpu_count": 0},
    {
        "cpu_milli": 2000,
        "memory_mib": 4096,
        "gpu_count": 1,
        "gpu_milli": 250,
        "gpu_memory_mib": 8192,
    },
    {"cpu_milli": 4000, "memory_mib": 8192, "gpu_count": 1},
    {"cpu_milli": 8000, "memory_mib": 16384, "gpu_count": 2},
]


@dataclass
class OpRecord:
    """One operation: what, by whom, the call it made and, for a create, what it created."""

    kind: str
    user: str
    call: Call
    created: tuple[str, int] | None = None  # ("codespace" | "job", id) of an accepted create
    name: str = ""
    unexpected: str = ""  # an answer that breaks the API contract (not a 5xx)


@dataclass
class Actor:
    """A seeded user as one client thread sees it (own HTTP sessions, what it knows it owns)."""

    username: str
    tenants: dict[str, dict[str, int]]
    client: ApiClient
    operator_client: ApiClient
    codespaces: list[int] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)


@dataclass
class World:
    """What every client shares: the seeded users, the operator's view of nodes, GPUs, quotas and
    templates, a name counter, and what the operator actions broke (to repair it)."""

    base_url: str
    users: dict[str, Any]
    nodes: list[int]
    gpus: list[int]
    quotas: list[int]
    templates: dict[str, list[str]]
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: int = 0
    failed_gpus: list[int] = field(default_factory=list)
    cordoned: list[int] = field(default_factory=list)

    def next_name(self, prefix: str) -> str:
        with self.lock:
            self.counter += 1
            return f"{prefix}-{self.counter}"

    @property
    def operator_token(self) -> str:
        return str(next(u["token"] for u in self.users.values() if u["operator"]))

    def actor(self, username: str) -> Actor:
        """A fresh Actor for one client thread."""
        info = self.users[username]
        return Actor(
            username,
            info["tenants"],
            ApiClient(self.base_url, info["token"]),
            ApiClient(self.base_url, self.operator_token),
        )

    def client_usernames(self) -> list[str]:
        """Users that act as random clients (members of a team; not the latency probe)."""
        return sorted(
            name for name, info in self.users.items() if info["tenants"] and not info["probe"]
        )

    @property
    def probe_username(self) -> str:
        return next(name for name, info in self.users.items() if info["probe"])


def _results(call: Call) -> list[dict[str, Any]]:
    body = call.body
    if isinstance(body, dict):
        return list(body.get("results", []))
    return list(body or [])


def discover(base_url: str, users: dict[str, Any]) -> World:
    """Build the shared world from the seed and a few operator GETs."""
    token = next(u["token"] for u in users.values() if u["operator"])
    operator = ApiClient(base_url, token)

    def ids(path: str) -> list[int]:
        return [
            int(row["id"]) for row in _results(operator.call("GET", path, params={"limit": 500}))
        ]

    templates = {
        t["name"]: [p["name"] for p in t.get("presets", [])]
        for t in _results(operator.call("GET", "templates/", params={"limit": 500}))
    }
    return World(base_url, users, ids("nodes/"), ids("gpus/"), ids("quotas/"), templates)


# ------------------------------------------------------------------------------------ operations


def create_codespace(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    tenant = rng.choice(sorted(actor.tenants))
    template = rng.choice(sorted(t for t in world.templates if t in TEMPLATE_POOLS))
    quota = actor.tenants[tenant].get(TEMPLATE_POOLS[template])
    name = world.next_name(f"cs-{actor.username}")
    body: dict[str, Any] = {"name": name, "template": template, "tenant": tenant}
    if quota:
        body["quota"] = quota
    if rng.random() < 0.6 and world.templates[template]:
        body["preset"] = rng.choice(world.templates[template])
    else:
        body.update(rng.choice(CUSTOM_SIZES))
    call = actor.client.call("POST", "codespaces/", json=body)
    record = OpRecord("codespace.create", actor.username, call, name=name)
    if call.status == 201 and isinstance(call.body, dict):
        actor.codespaces.append(int(call.body["id"]))
        record.created = ("codespace", int(call.body["id"]))
    return record


def codespace_action(world: World, actor: Actor, rng: random.Random, action: str) -> OpRecord:
    if not actor.codespaces:
        return create_codespace(world, actor, rng)
    codespace_id = rng.choice(actor.codespaces)
    if action == "delete":
        call = actor.client.call("DELETE", f"codespaces/{codespace_id}/")
        if call.status in (204, 404):
            actor.codespaces.remove(codespace_id)
    else:
        call = actor.client.call("POST", f"codespaces/{codespace_id}/{action}/")
    return OpRecord(f"codespace.{action}", actor.username, call)


def submit_job(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    tenant = rng.choice(sorted(actor.tenants))
    pools = actor.tenants[tenant]
    if not pools:
        return list_codespaces(world, actor, rng)
    quota = pools[rng.choice(sorted(pools))]
    name = world.next_name(f"job-{actor.username}")
    pods = rng.choice([1, 2, 2, 3, 4])
    body = {
        "name": name,
        "tenant": tenant,
        "quota": quota,
        "pods": pods,
        "min_available": rng.randint(1, pods),
        "member": rng.choice(JOB_MEMBERS),
        "timeout_seconds": rng.choice([20, 60, 600]),
    }
    call = actor.client.call("POST", "jobs/", json=body)
    record = OpRecord("job.submit", actor.username, call, name=name)
    if call.status == 201 and isinstance(call.body, dict):
        actor.jobs.append(int(call.body["id"]))
        record.created = ("job", int(call.body["id"]))
    return record


def cancel_job(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    if not actor.jobs:
        return submit_job(world, actor, rng)
    job_id = actor.jobs.pop(rng.randrange(len(actor.jobs)))
    return OpRecord(
        "job.cancel", actor.username, actor.client.call("POST", f"jobs/{job_id}/cancel/")
    )


def list_codespaces(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    call = actor.client.call("GET", "codespaces/", params={"limit": 50})
    return OpRecord("codespace.list", actor.username, call)


def edit_quota(world: World, actor: Actor, rng: random.Random, *, with_if_match: bool) -> OpRecord:
    operator = actor.operator_client
    quota_id = rng.choice(world.quotas)
    current = operator.call("GET", f"quotas/{quota_id}/")
    if not current.ok:
        return OpRecord("quota.get", OPERATOR, current)
    weight = rng.choice([None, 1, 2, 5])
    call = operator.call(
        "PATCH",
        f"quotas/{quota_id}/",
        json={"shared_weight": weight, "note": "chaos"},
        if_match=current.etag if with_if_match else None,
    )
    record = OpRecord("quota.patch" if with_if_match else "quota.patch-no-if-match", OPERATOR, call)
    if not with_if_match and call.status != 428:
        record.unexpected = f"PATCH without If-Match answered {call.status}, not 428"
    return record


def operator_action(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    roll = rng.random()
    with world.lock:
        if world.cordoned and roll < 0.35:
            node = world.cordoned.pop(0)
            path, kind = f"nodes/{node}/uncordon/", "node.uncordon"
        elif world.failed_gpus and roll < 0.6:
            gpu = world.failed_gpus.pop(0)
            path, kind = f"gpus/{gpu}/health/", "gpu.heal"
        elif roll < 0.75 and len(world.cordoned) < 2:
            node = rng.choice(world.nodes)
            world.cordoned.append(node)
            path, kind = f"nodes/{node}/cordon/", "node.cordon"
        elif roll < 0.85:
            node = rng.choice(world.nodes)
            path, kind = f"nodes/{node}/drain/", "node.drain"
        else:
            gpu = rng.choice(world.gpus)
            world.failed_gpus.append(gpu)
            path, kind = f"gpus/{gpu}/fail/", "gpu.fail"
    # Cordon and drain require a reason (issue 16); every operator action carries one.
    body = {"healthy": True, "reason": "repaired"} if kind == "gpu.heal" else {"reason": kind}
    return OpRecord(kind, OPERATOR, actor.operator_client.call("POST", path, json=body))


MIX: list[tuple[float, str]] = [
    (0.26, "codespace.create"),
    (0.11, "codespace.stop"),
    (0.11, "codespace.start"),
    (0.10, "codespace.delete"),
    (0.14, "job.submit"),
    (0.07, "job.cancel"),
    (0.08, "codespace.list"),
    (0.05, "quota.patch"),
    (0.02, "quota.patch-no-if-match"),
    (0.06, "operator"),
]


def random_operation(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    kind = rng.choices([k for _, k in MIX], weights=[w for w, _ in MIX])[0]
    if kind == "codespace.create":
        return create_codespace(world, actor, rng)
    if kind.startswith("codespace.") and kind != "codespace.list":
        return codespace_action(world, actor, rng, kind.split(".", 1)[1])
    if kind == "job.submit":
        return submit_job(world, actor, rng)
    if kind == "job.cancel":
        return cancel_job(world, actor, rng)
    if kind == "quota.patch":
        return edit_quota(world, actor, rng, with_if_match=True)
    if kind == "quota.patch-no-if-match":
        return edit_quota(world, actor, rng, with_if_match=False)
    if kind == "operator":
        return operator_action(world, actor, rng)
    return list_codespaces(world, actor, rng)


def restore_cluster(world: World) -> list[OpRecord]:
    """At the end: uncordon every node and repair every GPU the run broke (so quiescence can place)."""
    operator = ApiClient(world.base_url, world.operator_token)
    records = [
        OpRecord("node.uncordon", OPERATOR, operator.call("POST", f"nodes/{n}/uncordon/"))
        for n in world.cordoned
    ]
    records += [
        OpRecord(
            "gpu.heal",
            OPERATOR,
            operator.call("POST", f"gpus/{g}/health/", json={"healthy": True, "reason": "end"}),
        )
        for g in world.failed_gpus
    ]
    world.cordoned.clear()
    world.failed_gpus.clear()
    return records


def probe_job(world: World, actor: Actor, previous: int | None) -> tuple[OpRecord, int | None]:
    """The latency probe: cancel the previous probe job, submit a tiny one-pod CPU job to the probe's
    guaranteed quota (always admitted, always fits), return its id. Its submit->placed time is read
    from the database afterwards."""
    if previous is not None:
        actor.client.call("POST", f"jobs/{previous}/cancel/")
    tenant = next(iter(actor.tenants))
    body = {
        "name": world.next_name("probe"),
        "tenant": tenant,
        "quota": actor.tenants[tenant]["training"],
        "pods": 1,
        "member": {"cpu_milli": 100, "memory_mib": 128},
        "timeout_seconds": 600,
    }
    call = actor.client.call("POST", "jobs/", json=body)
    record = OpRecord("probe.submit", actor.username, call, name=body["name"])
    created = int(call.body["id"]) if call.status == 201 and isinstance(call.body, dict) else None
    if created is not None:
        record.created = ("job", created)
    return record, created

"""Random API operations as the seeded users: codespaces of every size (create, stop, start, delete),
gang jobs (submit, cancel), quota edits with and without If-Match, operator actions (cordon,
uncordon, drain, GPU failure and repair), and the fairness features (issue 17): quota loans requested
by team admins (of a sibling or of the operators, windows of seconds so they expire during the run),
approved or declined by the lender's admin or an operator, cancelled by the borrower, GPU-hour budget
top-ups and a per-person cap switched on and off by the operator, and the refusals those promise
(a member asking for a loan or setting a cap, a team admin topping up, out-of-range values). Every
operation is one `OpRecord`; an answer outside what the operation allows is `unexpected`."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.chaos.client import ApiClient, Call
from tests.chaos.seed import TOGGLED_CAP

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
    admin_of: tuple[str, ...] = ()
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
    drained: set[int] = field(default_factory=set)
    budgets: dict[int, str] = field(default_factory=dict)  # budget id -> its quota's tenant slug
    toggled_cap_quota: int | None = None
    requested_loans: list[RequestedLoan] = field(default_factory=list)

    def team_quotas(self, pool: str) -> dict[str, int]:
        """Tenant slug -> quota id of every team's quota in `pool` (the latency probe's left out)."""
        return {
            slug: pools[pool]
            for info in self.users.values()
            if not info["probe"]
            for slug, pools in info["tenants"].items()
            if pool in pools
        }

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
            tuple(info.get("admin_of", ())),
        )

    def client_usernames(self) -> list[str]:
        """Users that act as random clients (members of a team; not the latency probe)."""
        return sorted(
            name for name, info in self.users.items() if info["tenants"] and not info["probe"]
        )

    @property
    def probe_username(self) -> str:
        return next(name for name, info in self.users.items() if info["probe"])


@dataclass(frozen=True)
class RequestedLoan:
    """A loan the run asked for and nobody has decided yet (as far as the clients know)."""

    loan_id: int
    borrower_tenant: str
    lender_tenant: str  # "" = asked of the operators


def _results(call: Call) -> list[dict[str, Any]]:
    body = call.body
    if isinstance(body, dict):
        return list(body.get("results", []))
    return list(body or [])


def discover(base_url: str, seed: dict[str, Any]) -> World:
    """Build the shared world from the seed's output and a few operator GETs."""
    users: dict[str, Any] = seed["users"]
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
    return World(
        base_url,
        users,
        ids("nodes/"),
        ids("gpus/"),
        ids("quotas/"),
        templates,
        budgets={int(b["id"]): str(b["tenant"]) for b in seed.get("budgets", [])},
        toggled_cap_quota=seed.get("toggled_cap_quota"),
    )


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
            world.drained.add(node)  # a drain cordons the node: uncordoned at the end
            path, kind = f"nodes/{node}/drain/", "node.drain"
        else:
            gpu = rng.choice(world.gpus)
            world.failed_gpus.append(gpu)
            path, kind = f"gpus/{gpu}/fail/", "gpu.fail"
    # Cordon and drain require a reason (issue 16); every operator action carries one.
    body = {"healthy": True, "reason": "repaired"} if kind == "gpu.heal" else {"reason": kind}
    return OpRecord(kind, OPERATOR, actor.operator_client.call("POST", path, json=body))


LOAN_SECONDS = (8, 20, 45)
"""Loan windows: a few seconds to most of a minute, so loans start, move min and expire in the run."""


def _fields(call: Call) -> list[str]:
    """The fields a 400 names (its `error.fields` keys)."""
    body = call.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return sorted(body["error"].get("fields") or {})
    return []


def expect_answer(record: OpRecord, allowed: dict[int, str | None]) -> OpRecord:
    """Mark `record` unexpected unless its status is one of `allowed`; a 400 allowed with a field name
    must name that field (the refusal says what was wrong). A call without an answer is judged by
    the run's "no answer" check, not here."""
    call = record.call
    if call.status is None:
        return record
    if call.status not in allowed:
        record.unexpected = (
            f"{call.method} {call.path} answered {call.status} {call.error_code}, "
            f"expected {sorted(allowed)}"
        )
    elif call.status == 400 and allowed[400] and allowed[400] not in _fields(call):
        record.unexpected = (
            f"{call.method} {call.path} answered 400 naming {_fields(call)}, not {allowed[400]}"
        )
    return record


def request_loan(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    """A team admin asks a sibling quota (or the operators) for 1-2 GPUs of min from now on. Refused
    only with a 400 naming `gpus` (the lender's min, or the group's unassigned GPUs, is promised)."""
    if not actor.admin_of:
        return list_loans(world, actor, rng)
    borrower_tenant = rng.choice(sorted(actor.admin_of))
    pool = rng.choice(sorted(actor.tenants[borrower_tenant]))
    quotas = world.team_quotas(pool)
    siblings = sorted(slug for slug in quotas if slug != borrower_tenant)
    lender_tenant = rng.choice(["", *siblings])
    now = datetime.now(UTC)
    body: dict[str, Any] = {
        "borrower": quotas[borrower_tenant],
        "lender": quotas[lender_tenant] if lender_tenant else None,
        "gpus": rng.choice([1, 1, 2]),
        "starts_at": now.isoformat(),
        "ends_at": (now + timedelta(seconds=rng.choice(LOAN_SECONDS))).isoformat(),
        "reason": "chaos: a burst",
    }
    call = actor.client.call("POST", "quota-loans/", json=body)
    record = OpRecord("loan.request", actor.username, call)
    if call.status == 201 and isinstance(call.body, dict):
        with world.lock:
            world.requested_loans.append(
                RequestedLoan(int(call.body["id"]), borrower_tenant, lender_tenant)
            )
    return expect_answer(record, {201: None, 400: "gpus"})


def _take_requested_loan(world: World, rng: random.Random) -> RequestedLoan | None:
    with world.lock:
        if not world.requested_loans:
            return None
        return world.requested_loans.pop(rng.randrange(len(world.requested_loans)))


def decide_loan(world: World, actor: Actor, rng: random.Random, verb: str) -> OpRecord:
    """The lender's team admin (when this client is one) or an operator approves or declines. 409
    when it expired or was decided first; an approval may get a 400 naming `gpus` (the lender's min
    or the unassigned GPUs were promised to another loan meanwhile)."""
    loan = _take_requested_loan(world, rng)
    if loan is None:
        return request_loan(world, actor, rng)
    own = bool(loan.lender_tenant) and loan.lender_tenant in actor.admin_of
    client = actor.client if own else actor.operator_client
    call = client.call("POST", f"quota-loans/{loan.loan_id}/{verb}/", json={"note": "chaos"})
    record = OpRecord(f"loan.{verb}", actor.username if own else OPERATOR, call)
    allowed: dict[int, str | None] = {200: None, 409: None}
    if verb == "approve":
        allowed[400] = "gpus"
    return expect_answer(record, allowed)


def cancel_loan(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    """The borrower's team admin (when this client is one) or an operator withdraws a request (409
    when it was decided or expired first)."""
    loan = _take_requested_loan(world, rng)
    if loan is None:
        return request_loan(world, actor, rng)
    own = loan.borrower_tenant in actor.admin_of
    client = actor.client if own else actor.operator_client
    call = client.call("POST", f"quota-loans/{loan.loan_id}/cancel/", json={})
    record = OpRecord("loan.cancel", actor.username if own else OPERATOR, call)
    return expect_answer(record, {200: None, 409: None})


def list_loans(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    call = actor.client.call("GET", "quota-loans/", params={"limit": 50})
    return expect_answer(OpRecord("loan.list", actor.username, call), {200: None})


def top_up_budget(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    """The operator grants a small top-up (an exhausted budget stays about exhausted: a top-up is
    well under a GPU-minute of what the quota burns each minute)."""
    if not world.budgets:
        return list_loans(world, actor, rng)
    budget = rng.choice(sorted(world.budgets))
    call = actor.operator_client.call(
        "POST",
        f"quota-budgets/{budget}/top-up/",
        json={"gpu_hours": rng.choice(["0.01", "0.02"]), "reason": "chaos top-up"},
    )
    return expect_answer(OpRecord("budget.top-up", OPERATOR, call), {200: None})


def toggle_user_cap(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    """The operator switches the per-person cap of the seeded quota on (TOGGLED_CAP GPUs) or off;
    the answer carries the cap it set."""
    if world.toggled_cap_quota is None:
        return list_loans(world, actor, rng)
    cap = rng.choice([TOGGLED_CAP, None])
    call = actor.operator_client.call(
        "POST", f"quotas/{world.toggled_cap_quota}/user-cap/", json={"max_gpus_per_user": cap}
    )
    record = expect_answer(OpRecord("user-cap.toggle", OPERATOR, call), {200: None})
    if call.status == 200 and isinstance(call.body, dict):
        if call.body.get("max_gpus_per_user") != cap:
            record.unexpected = f"user-cap {cap} answered max_gpus_per_user {call.body!r:.100}"
    return record


def refused_fairness_call(world: World, actor: Actor, rng: random.Random) -> OpRecord:
    """One call the fairness API must refuse, with the status (and field) it promises: a member who
    is not a team admin asks for a loan (403) or sets a cap (403); a team admin tops up a budget (403
    for their own team's, 404 for another's); an admin asks for 0 GPUs or a window ending before it
    starts (400 naming the field); the operator tops up a negative amount or sets a cap of 0 (400)."""
    tenant = rng.choice(sorted(actor.tenants))
    quota = actor.tenants[tenant][rng.choice(sorted(actor.tenants[tenant]))]
    now = datetime.now(UTC)
    loan = {
        "borrower": quota,
        "gpus": 1,
        "starts_at": now.isoformat(),
        "ends_at": (now + timedelta(seconds=30)).isoformat(),
    }
    case = rng.choice(["loan", "cap", "top-up", "bad-loan", "bad-top-up", "bad-cap"])
    path: str
    body: dict[str, Any]
    allowed: dict[int, str | None]
    client = actor.client
    if case == "loan" and tenant not in actor.admin_of:
        path, body, allowed = "quota-loans/", loan, {403: None}
    elif case == "cap" and tenant not in actor.admin_of:
        path, body = f"quotas/{quota}/user-cap/", {"max_gpus_per_user": 3}
        allowed = {403: None}
    elif case == "top-up" and world.budgets:
        budget = rng.choice(sorted(world.budgets))
        path, body = f"quota-budgets/{budget}/top-up/", {"gpu_hours": "1", "reason": "mine"}
        allowed = {403 if world.budgets[budget] in actor.tenants else 404: None}
    elif case == "bad-loan" and tenant in actor.admin_of:
        if rng.random() < 0.5:
            path, body, allowed = "quota-loans/", {**loan, "gpus": 0}, {400: "gpus"}
        else:
            earlier = (now - timedelta(seconds=5)).isoformat()
            path, body, allowed = "quota-loans/", {**loan, "ends_at": earlier}, {400: "ends_at"}
    elif case == "bad-top-up" and world.budgets:
        client = actor.operator_client
        path = f"quota-budgets/{rng.choice(sorted(world.budgets))}/top-up/"
        body, allowed = {"gpu_hours": "-1", "reason": "chaos"}, {400: "gpu_hours"}
    else:
        client = actor.operator_client
        path, body = f"quotas/{quota}/user-cap/", {"max_gpus_per_user": 0}
        allowed = {400: "max_gpus_per_user"}
    user = actor.username if client is actor.client else OPERATOR
    return expect_answer(
        OpRecord("fairness.refused", user, client.call("POST", path, json=body)), allowed
    )


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
    # fairness over time: about one operation in ten, so the operations above stay the majority
    (0.04, "loan.request"),
    (0.025, "loan.approve"),
    (0.01, "loan.decline"),
    (0.01, "loan.cancel"),
    (0.01, "budget.top-up"),
    (0.01, "user-cap.toggle"),
    (0.015, "fairness.refused"),
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
    if kind == "loan.request":
        return request_loan(world, actor, rng)
    if kind in ("loan.approve", "loan.decline"):
        return decide_loan(world, actor, rng, kind.split(".", 1)[1])
    if kind == "loan.cancel":
        return cancel_loan(world, actor, rng)
    if kind == "budget.top-up":
        return top_up_budget(world, actor, rng)
    if kind == "user-cap.toggle":
        return toggle_user_cap(world, actor, rng)
    if kind == "fairness.refused":
        return refused_fairness_call(world, actor, rng)
    return list_codespaces(world, actor, rng)


@dataclass(frozen=True)
class Borrower:
    """One-pod jobs of `gpus` whole GPUs each that one team submits before the clients start, to
    borrow most of a pool's idle capacity (the seeded demo load leaves both pools nearly empty, and
    the clients alone rarely fill them), so that the fairness features have contention to act on."""

    pool: str
    tenant: str
    username: str
    jobs: int
    gpus: int
    priority: int


BORROWERS = (
    # `training` (80 GPUs; the demo's work holds about 8): 72 GPUs, its min of 32 and all that the
    # others leave idle, so the pool stays full (what the borrower cannot run waits, and takes back
    # whatever is freed) and the other teams' work within their mins needs a reclaim of these
    # (polite: a notice, the checkpoint hook, then the stop). Priority -1: reclaimed before anyone
    # else's work.
    Borrower("training", "ml-research", "bob", 36, 2, -1),
    # `interactive` (40 GPUs, of which inference keeps its idle min of 12): 18 GPUs with the demo's 4
    # hold ml-research near its max of 24 (plus a loan), so vision's work within its min needs a
    # reclaim. Priority 0 like codespaces: a reclaim takes the most recently started borrowed work
    # first, so ml-research's codespaces started later are suspended (home kept) before these. Three
    # owners, as the team's borrowing is shared equally among its active users.
    Borrower("interactive", "ml-research", "alice", 3, 2, 0),
    Borrower("interactive", "ml-research", "bob", 3, 2, 0),
    Borrower("interactive", "ml-research", "grace", 3, 2, 0),
)


def borrow_idle_capacity(world: World) -> list[OpRecord]:
    """Before the clients start: submit the BORROWERS' jobs through the API. Each submit is an
    ordinary record (checked for lost, duplicated and unexplained like the clients' ones)."""
    records = []
    for borrower in BORROWERS:
        info = world.users[borrower.username]
        client = ApiClient(world.base_url, info["token"])
        for _ in range(borrower.jobs):
            name = world.next_name(f"borrow-{borrower.username}")
            body = {
                "name": name,
                "tenant": borrower.tenant,
                "quota": info["tenants"][borrower.tenant][borrower.pool],
                "pods": 1,
                "member": {"cpu_milli": 2000, "memory_mib": 8192, "gpu_count": borrower.gpus},
                "priority": borrower.priority,
                "timeout_seconds": 3600,
            }
            call = client.call("POST", "jobs/", json=body)
            record = OpRecord("job.submit", borrower.username, call, name=name)
            if call.status == 201 and isinstance(call.body, dict):
                record.created = ("job", int(call.body["id"]))
            records.append(expect_answer(record, {201: None}))
    return records


def restore_cluster(world: World) -> list[OpRecord]:
    """At the end: uncordon every node the run cordoned or drained and repair every GPU it broke (so
    quiescence can place), and switch the toggled per-person cap off: switched on while someone
    already held more, it would be reported by the auditor (a cap lowered below what a person holds
    is, by design), and the caps the run never touched are still checked."""
    operator = ApiClient(world.base_url, world.operator_token)
    records = [
        OpRecord("node.uncordon", OPERATOR, operator.call("POST", f"nodes/{n}/uncordon/"))
        for n in sorted(set(world.cordoned) | world.drained)
    ]
    records += [
        OpRecord(
            "gpu.heal",
            OPERATOR,
            operator.call("POST", f"gpus/{g}/health/", json={"healthy": True, "reason": "end"}),
        )
        for g in world.failed_gpus
    ]
    if world.toggled_cap_quota is not None:
        call = operator.call(
            "POST",
            f"quotas/{world.toggled_cap_quota}/user-cap/",
            json={"max_gpus_per_user": None},
        )
        records.append(expect_answer(OpRecord("user-cap.toggle", OPERATOR, call), {200: None}))
    world.cordoned.clear()
    world.drained.clear()
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

"""`tessera`: the command-line client of the Tessera REST API (console script `tessera = portal.cli:main`).

    tessera login --url https://tessera.example.com            # asks for a token, checks it, saves it
    tessera codespace list [--state running] [--json]
    tessera codespace create NAME --template T [--preset P] [--tenant SLUG] [--set key=value ...]
    tessera codespace show|stop|start|delete ID   (delete --reason "..." for another user's)
    tessera job submit NAME --quota training --pods 4 --gpus-per-pod 1 --cpu 8 --memory 32Gi [--topology rack]
    tessera job list [--state waiting] [--tenant SLUG] [--json]
    tessera job show|cancel ID
    tessera quota show [--tenant SLUG]
    tessera reclaim-notices list [--state live|closed|all] [--group NAME_OR_ID] [--json]

The URL and token are stored in ~/.config/tessera/config.json (mode 0600; `$TESSERA_CONFIG` or
`$XDG_CONFIG_HOME` move it); `$TESSERA_URL` / `$TESSERA_TOKEN` override the file. Only `requests` and the
standard library are used, so the CLI runs anywhere Python does (also inside a codespace).

Every POST carries a fresh `Idempotency-Key`, and the CLI retries it with the same key on connection
errors, 409 `idempotency_in_progress`, 429 and 503, so a flaky network never creates a codespace twice.

Exit codes: 0 success; 1 the API refused the request (400/409/412/422...); 2 usage error; 3 not logged in
or not allowed (401/403); 4 not found (404); 5 rate limited (429, after retries); 6 server or network error.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import requests

from core.units import UnitError, cpu_milli, memory_mib

API = "/api/v1"
TIMEOUT = (5, 60)
RETRIES = 4

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_NOT_FOUND = 4
EXIT_RATE_LIMITED = 5
EXIT_SERVER = 6


class CliError(Exception):
    """A failure to report on stderr with an exit code."""

    def __init__(self, message: str, exit_code: int, fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.fields = fields or {}


# --- configuration -----------------------------------------------------------------------------------


def config_path() -> Path:
    if os.environ.get("TESSERA_CONFIG"):
        return Path(os.environ["TESSERA_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tessera" / "config.json"


def load_config() -> dict[str, str]:
    path = config_path()
    data: dict[str, str] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise CliError(
                f"{path} is not valid JSON; run `tessera login` again.", EXIT_USAGE
            ) from exc
    if os.environ.get("TESSERA_URL"):
        data["url"] = os.environ["TESSERA_URL"]
    if os.environ.get("TESSERA_TOKEN"):
        data["token"] = os.environ["TESSERA_TOKEN"]
    if not data.get("url") or not data.get("token"):
        raise CliError(
            "Not logged in: run `tessera login --url <portal URL>` (or set TESSERA_URL and TESSERA_TOKEN).",
            EXIT_AUTH,
        )
    return data


def save_config(url: str, token: str) -> Path:
    """Write the config with mode 0600 (the token is a secret), creating the directory 0700."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": url, "token": token}, handle, indent=2)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


# --- HTTP --------------------------------------------------------------------------------------------


class Client:
    """A thin API client: Bearer auth, JSON, the API error body turned into CliError, safe retries."""

    def __init__(self, url: str, token: str, session: requests.Session | None = None) -> None:
        self.base = url.rstrip("/")
        self.session = session or requests.Session()
        self.session.headers.update(
            {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        )

    def request(self, method: str, path: str, *, params: Any = None, body: Any = None) -> Any:
        url = f"{self.base}{API}{path}"
        headers = {}
        if method == "POST":
            headers["Idempotency-Key"] = str(uuid.uuid4())
        delay = 0.5
        for attempt in range(RETRIES):
            last = attempt == RETRIES - 1
            try:
                response = self.session.request(
                    method, url, params=params, json=body, headers=headers, timeout=TIMEOUT
                )
            except requests.ConnectionError as exc:
                if method in ("GET", "POST", "DELETE") and not last:
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise CliError(
                    f"Cannot reach {self.base}: {exc.__class__.__name__}.", EXIT_SERVER
                ) from exc
            except requests.Timeout as exc:
                raise CliError(f"{self.base} did not answer in time.", EXIT_SERVER) from exc
            retryable = response.status_code in (429, 503) or (
                response.status_code == 409 and _error_code(response) == "idempotency_in_progress"
            )
            if retryable and not last:
                time.sleep(min(float(response.headers.get("Retry-After", delay) or delay), 10.0))
                delay *= 2
                continue
            return self._result(response)
        raise AssertionError("unreachable")

    def _result(self, response: requests.Response) -> Any:
        if response.status_code == 204 or not response.content:
            if response.ok:
                return None
        if response.ok:
            try:
                return response.json()
            except ValueError as exc:
                raise CliError(
                    f"The server answered {response.status_code} without JSON; is the URL right?",
                    EXIT_SERVER,
                ) from exc
        error = _error_of(response)
        status = response.status_code
        code = {401: EXIT_AUTH, 403: EXIT_AUTH, 404: EXIT_NOT_FOUND, 429: EXIT_RATE_LIMITED}.get(
            status, EXIT_SERVER if status >= 500 else EXIT_REFUSED
        )
        message = error.get("message") or f"HTTP {status}"
        if status == 401:
            message += " Run `tessera login` with a valid token."
        if status == 429 and response.headers.get("Retry-After"):
            message += f" (retry after {response.headers['Retry-After']} s)"
        return_fields = error.get("fields") or {}
        raise CliError(f"{message} [{error.get('code', status)}]", code, return_fields)

    def get(self, path: str, params: Any = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body if body is not None else {})

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def list_all(self, path: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Follow the cursor pagination to the end."""
        items: list[Any] = []
        page = self.get(path, {**(params or {}), "limit": 500})
        while True:
            if isinstance(page, list):
                return page
            items.extend(page.get("results", []))
            following = page.get("next")
            if not following:
                return items
            response = self.session.get(following, timeout=TIMEOUT)
            page = self._result(response)


def _error_of(response: requests.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _error_code(response: requests.Response) -> str | None:
    return _error_of(response).get("code")


# --- output ------------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    present = [c for c in columns if any(c in row for row in rows)] or list(columns)
    cells = [[_cell(row.get(c)) for c in present] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(present)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(present, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def render_object(obj: dict[str, Any]) -> str:
    width = max((len(k) for k in obj), default=0)
    return "\n".join(f"{key.ljust(width)}  {_cell(value)}" for key, value in obj.items())


def emit(args: argparse.Namespace, data: Any, columns: Sequence[str] = ()) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    elif isinstance(data, list):
        print(render_table(data, columns) if data else "(none)")
    elif isinstance(data, dict):
        print(render_object(data))


# --- commands ----------------------------------------------------------------------------------------

CODESPACE_COLUMNS = (
    "id",
    "name",
    "tenant",
    "owner",
    "state",
    "size",
    "template",
    "node",
    "created_at",
)
JOB_COLUMNS = (
    "id",
    "name",
    "tenant",
    "owner",
    "state",
    "quota",
    "pods",
    "min_available",
    "created_at",
    "reason",
)
MEMBER_COLUMNS = ("id", "name", "state", "node", "gpus", "pending_reason")
QUOTA_COLUMNS = ("id", "tenant", "group_name", "name", "shared_weight", "version", "headroom")


def client_from_config() -> Client:
    config = load_config()
    return Client(config["url"], config["token"])


def cmd_login(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("TESSERA_TOKEN")
    if not token:
        token = (
            getpass.getpass("API token (create one at /account/tokens/): ")
            if sys.stdin.isatty()
            else sys.stdin.readline()
        ).strip()
    if not token:
        raise CliError("No token given.", EXIT_USAGE)
    me = Client(args.url, token).get("/me/")
    path = save_config(args.url, token)
    tenants = ", ".join(m["tenant"]["slug"] for m in me.get("memberships", [])) or "none"
    print(f"Logged in to {args.url} as {me['username']} (tenants: {tenants}); saved to {path}")
    return EXIT_OK


def _fields_from_sets(pairs: Sequence[str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise CliError(f"--set {pair!r}: use key=value.", EXIT_USAGE)
        key, raw = pair.split("=", 1)
        try:
            body[key] = json.loads(raw)
        except ValueError:
            body[key] = raw
    return body


def resolve_quota(client: Client, value: str | None, tenant: str | None) -> int | None:
    """`--quota`: an id as given, or the one quota in the pool (quota group) of that name among the
    caller's quotas (of `--tenant` when given). A name that matches none or several is a usage error
    that lists the candidates with their ids and says which flag picks one."""
    if value is None or value.strip().isdigit():
        return int(value) if value is not None else None
    quotas = client.list_all("/quotas/", {"tenant": tenant} if tenant else {})
    matches = [q for q in quotas if value in (q.get("group_name"), q.get("name"))]
    if len(matches) == 1:
        return int(matches[0]["id"])
    if matches:
        choices = ", ".join(f"{q['id']} ({q['tenant']})" for q in matches)
        raise CliError(
            f"--quota {value}: several teams have a quota in {value}: {choices}; "
            "pass --tenant SLUG, or --quota with the id.",
            EXIT_USAGE,
        )
    choices = ", ".join(f"{q['id']} ({q['group_name']}, {q['tenant']})" for q in quotas)
    raise CliError(
        f"--quota {value}: no quota of yours is in a pool of that name; pass --quota with a pool "
        f"name or id of: {choices or 'none (ask a platform operator for a quota)'}.",
        EXIT_USAGE,
    )


def cmd_codespace(args: argparse.Namespace) -> int:
    client = client_from_config()
    if args.action == "list":
        params = {k: v for k, v in (("state", args.state), ("tenant", args.tenant)) if v}
        emit(args, client.list_all("/codespaces/", params), CODESPACE_COLUMNS)
    elif args.action == "create":
        body: dict[str, Any] = {"name": args.name, "template": args.template}
        for key in ("preset", "tenant"):
            if getattr(args, key):
                body[key] = getattr(args, key)
        quota = resolve_quota(client, args.quota, args.tenant)
        if quota is not None:
            body["quota"] = quota
        body.update(_fields_from_sets(args.set))
        emit(args, client.post("/codespaces/", body))
    elif args.action == "show":
        emit(args, client.get(f"/codespaces/{args.id}/"))
    elif args.action == "eta":
        emit_estimates(args, [client.get(f"/codespaces/{args.id}/start-estimate/")])
    elif args.action in ("stop", "start"):
        emit(args, client.post(f"/codespaces/{args.id}/{args.action}/"))
    elif args.action == "delete":
        query = f"?{urlencode({'reason': args.reason})}" if args.reason else ""
        result = client.delete(f"/codespaces/{args.id}/{query}")
        if result is not None:
            emit(args, result)
        elif args.json:
            print(json.dumps({"deleted": args.id}))
        else:
            print(f"Codespace {args.id} deleted.")
    return EXIT_OK


def job_member(args: argparse.Namespace) -> dict[str, Any]:
    """The resources of each pod of `tessera job submit` as the API takes them (milli-CPU, MiB)."""
    member = {
        "cpu_milli": args.cpu_milli,
        "memory_mib": args.memory_mib,
        "gpu_count": args.gpus_per_pod,
        "gpu_milli": args.gpu_milli,
        "gpu_memory_mib": args.gpu_memory_mib,
        "image": args.image,
    }
    return {k: v for k, v in member.items() if v not in (None, "")}


def cmd_job(args: argparse.Namespace) -> int:
    client = client_from_config()
    if args.action == "list":
        params = {k: v for k, v in (("state", args.state), ("tenant", args.tenant)) if v}
        jobs = client.list_all("/jobs/", params)
        emit(args, jobs if args.json else [_without_members(job) for job in jobs], JOB_COLUMNS)
    elif args.action == "submit":
        body: dict[str, Any] = {
            "name": args.name,
            "pods": args.pods,
            "min_available": args.min_available or args.pods,
            "member": job_member(args),
            "timeout_seconds": args.timeout_seconds,
            "priority": args.priority,
            "preemptible": not args.not_preemptible,
        }
        if args.topology:
            body["topology_level"] = args.topology
            body["topology_mode"] = "preferred" if args.topology_preferred else "required"
        if args.tenant:
            body["tenant"] = args.tenant
        quota = resolve_quota(client, args.quota, args.tenant)
        if quota is not None:
            body["quota"] = quota
        body.update(_fields_from_sets(args.set))
        emit_job(args, client.post("/jobs/", body))
    elif args.action == "show":
        emit_job(args, client.get(f"/jobs/{args.id}/"))
    elif args.action == "cancel":
        emit_job(args, client.post(f"/jobs/{args.id}/cancel/"))
    elif args.action == "eta":
        job = client.get(f"/jobs/{args.id}/")
        members = job.get("members") or []
        emit_estimates(
            args,
            [client.get(f"/workloads/{m['id']}/start-estimate/") for m in members],
        )
    return EXIT_OK


ESTIMATE_COLUMNS = ("workload", "state", "position", "summary", "reason")


def emit_estimates(args: argparse.Namespace, estimates: list[dict[str, Any]]) -> None:
    """Start estimates: one line per workload (``likely in 20–40 min`` and why), or the JSON."""
    if args.json:
        emit(args, estimates)
        return
    rows = [
        {**e, "summary": e.get("summary") or "not waiting", "reason": e.get("reason") or ""}
        for e in estimates
    ]
    print(render_table(rows, ESTIMATE_COLUMNS) if rows else "(none)")


def _without_members(job: dict[str, Any]) -> dict[str, Any]:
    """A job's own fields for a table row (its pods are `tessera job show`'s)."""
    return {key: value for key, value in job.items() if key != "members"}


def emit_job(args: argparse.Namespace, job: dict[str, Any]) -> None:
    """A job as key/values, then one row per pod with where it runs or why it waits."""
    if args.json:
        emit(args, job)
        return
    print(render_object(_without_members(job)))
    rows = []
    for member in job.get("members") or []:
        placement = member.get("placement") or {}
        gpus = ",".join(str(g.get("index")) for g in placement.get("gpus", []) or [])
        rows.append({**member, "node": placement.get("node"), "gpus": gpus or None})
    if rows:
        print()
        print(render_table(rows, MEMBER_COLUMNS))


def cmd_quota(args: argparse.Namespace) -> int:
    client = client_from_config()
    params = {"tenant": args.tenant} if args.tenant else {}
    quotas = client.list_all("/quotas/", params)
    if not args.json:
        for quota in quotas:
            status = quota.get("status") or {}
            quota["headroom"] = status.get("headroom_text") if isinstance(status, dict) else None
    emit(args, quotas, QUOTA_COLUMNS)
    return EXIT_OK


LOAN_COLUMNS = (
    "id",
    "lender_name",
    "borrower_name",
    "gpus",
    "starts_at",
    "ends_at",
    "state",
    "active",
)
BUDGET_COLUMNS = (
    "id",
    "quota",
    "period",
    "window",
    "gpu_model",
    "used",
    "limit_with_top_ups",
    "percent",
)


def cmd_quota_fairness(args: argparse.Namespace) -> int:
    """`tessera quota fairness ID`: fair share, budgets, loans and notices of one quota."""
    data = client_from_config().get(f"/quotas/{args.id}/fairness/")
    if args.json:
        emit(args, data)
        return EXIT_OK
    fair = data.get("fair_share")
    print(fair["explanation"] if fair else "Decayed fair share is off for this quota's group.")
    for budget in data.get("budgets", []):
        print(f"budget {budget['id']}: {budget['explanation']}")
    print()
    print(render_table(data.get("loans", []), LOAN_COLUMNS) if data.get("loans") else "(no loans)")
    return EXIT_OK


def cmd_quota_user_cap(args: argparse.Namespace) -> int:
    """`tessera quota user-cap ID [--max-gpus N]`: set or clear the per-person GPU cap."""
    body = {"max_gpus_per_user": args.max_gpus}
    emit(args, client_from_config().post(f"/quotas/{args.id}/user-cap/", body))
    return EXIT_OK


def cmd_loan(args: argparse.Namespace) -> int:
    client = client_from_config()
    if args.action == "list":
        params = {"state": args.state} if args.state else {}
        emit(args, client.list_all("/quota-loans/", params), LOAN_COLUMNS)
    elif args.action == "request":
        body = {
            "borrower": args.borrower,
            "lender": args.lender,
            "gpus": args.gpus,
            "starts_at": args.starts_at,
            "ends_at": args.ends_at,
            "reason": args.reason,
        }
        emit(args, client.post("/quota-loans/", body))
    else:
        body = {"note": args.note} if args.note else {}
        emit(args, client.post(f"/quota-loans/{args.id}/{args.action}/", body))
    return EXIT_OK


def cmd_budget(args: argparse.Namespace) -> int:
    client = client_from_config()
    if args.action == "list":
        params = {"quota": args.quota} if args.quota else {}
        emit(args, client.list_all("/quota-budgets/", params), BUDGET_COLUMNS)
    elif args.action == "add":
        body = {
            "quota": args.quota,
            "period": args.period,
            "window": args.window,
            "gpu_model": args.gpu_model,
            "weighting": args.weighting,
            "limit_gpu_hours": args.gpu_hours,
            "hard": args.hard,
        }
        emit(args, client.post("/quota-budgets/", body))
    else:
        body = {"gpu_hours": args.gpu_hours, "reason": args.reason}
        emit(args, client.post(f"/quota-budgets/{args.id}/top-up/", body))
    return EXIT_OK


RECLAIM_COLUMNS = (
    "id",
    "workload",
    "kind",
    "quota",
    "owner",
    "claimant_quota",
    "state",
    "deadline",
    "seconds_left",
    "hook_state",
)


def cmd_quota_reclaim_notices(args: argparse.Namespace) -> int:
    """`tessera quota reclaim-notices ID [--state S]`: the reclaim plan that concerns a quota."""
    params = {"state": args.state} if args.state else {}
    rows = client_from_config().get(f"/quotas/{args.id}/reclaim-notices/", params)
    emit(args, rows, RECLAIM_COLUMNS)
    return EXIT_OK


BOARD_COLUMNS = (
    "id",
    "group",
    "workload",
    "kind",
    "owner",
    "quota",
    "claimant_quota",
    "state",
    "deadline",
    "seconds_left",
    "signal_state",
    "hook_state",
)


def cmd_reclaim_notices(args: argparse.Namespace) -> int:
    """`tessera reclaim-notices list [--state live|closed|all] [--group NAME_OR_ID] [--quota ID]`:
    the reclaim-notices board (operators: every group; others: their teams' quotas), every page."""
    params = {
        name: value
        for name, value in (("state", args.state), ("group", args.group), ("quota", args.quota))
        if value not in (None, "")
    }
    emit(args, client_from_config().list_all("/reclaim-notices/", params), BOARD_COLUMNS)
    return EXIT_OK


def cmd_quota_reclaim_settings(args: argparse.Namespace) -> int:
    """`tessera quota reclaim-settings ID [--webhook URL] [--equal-share | --no-equal-share]`."""
    body: dict[str, Any] = {}
    if args.webhook is not None:
        body["checkpoint_webhook_url"] = args.webhook
    if args.equal_share is not None:
        body["equal_borrowing_share"] = args.equal_share
    emit(args, client_from_config().post(f"/quotas/{args.id}/reclaim-settings/", body))
    return EXIT_OK


def cmd_quota_reclaim_notice(args: argparse.Namespace) -> int:
    """`tessera quota reclaim-notice --group ID --seconds N`: a group's notice before reclaim."""
    body = {"reclaim_notice_seconds": args.seconds}
    emit(args, client_from_config().post(f"/quota-groups/{args.group}/reclaim-notice/", body))
    return EXIT_OK


DEFRAG_MOVE_COLUMNS = (
    "workload",
    "kind",
    "tenant",
    "from_node",
    "to_node",
    "cost_seconds",
    "reason",
)


def emit_defrag_plan(args: argparse.Namespace, plan: dict[str, Any]) -> None:
    """A plan: its state and value, what it looked at and why work stayed, then one line per move
    (`--json`: the API's JSON)."""
    if args.json:
        emit(args, plan)
        return
    print(f"plan {plan['id']} of {plan['group_name']}: {plan['state']}")
    print(plan["value"])
    seen = plan.get("considered") or {}
    if seen.get("summary"):
        print(seen["summary"])
    for kept in seen.get("kept") or []:
        print(f"  kept in place: {kept['reason']} ({kept['count']} workload(s))")
    for refused in seen.get("planner") or []:
        print(f"  held the planner back: {refused['reason']} ({refused['count']}x)")
    if plan.get("error"):
        print(plan["error"])
    moves = plan.get("moves") or []
    print(render_table(moves, DEFRAG_MOVE_COLUMNS) if moves else "(no moves)")


def cmd_defrag(args: argparse.Namespace) -> int:
    """`tessera defrag preview --group ID | show ID | apply ID` (operators)."""
    client = client_from_config()
    if args.action == "preview":
        plan = client.post("/defrag/plans/", {"group": args.group})
    elif args.action == "show":
        plan = client.get(f"/defrag/plans/{args.id}/")
    else:
        plan = client.post(f"/defrag/plans/{args.id}/apply/", {})
    emit_defrag_plan(args, plan)
    return EXIT_OK


@dataclass(frozen=True)
class Arg:
    """One argparse argument: its name or flags and `add_argument`'s keyword options."""

    flags: tuple[str, ...]
    options: dict[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True)
class OneOf:
    """Flags of which at most one may be given (exactly one when `required`): one value in two units."""

    args: tuple[Arg, ...]
    required: bool = False


def one_of(*args: Arg, required: bool = False) -> OneOf:
    return OneOf(args, required)


@dataclass(frozen=True)
class Verb:
    """One subcommand of a command (`tessera loan approve ...`): its name, arguments and help."""

    name: str
    args: tuple[Arg | OneOf, ...] = ()
    help: str | None = None
    func: Any = None
    """What runs it when not the command's own function."""


def verbs(names: Sequence[str], help: str, *args: Arg) -> tuple[Verb, ...]:
    """Several subcommands that take the same arguments; `help` has `{verb}` for each one's name."""
    return tuple(Verb(name, args, help=help.format(verb=name)) for name in names)


def add_command(
    sub: Any,
    name: str,
    help: str,
    table: Sequence[Verb],
    func: Any,
    common: argparse.ArgumentParser,
) -> None:
    """`tessera NAME VERB ...` for every verb of `table`, each with the common flags (`--json`);
    `func(args)` runs it (`args.action` is the verb) unless the verb names its own."""
    command = sub.add_parser(name, help=help, description=help)
    actions = command.add_subparsers(dest="action", required=True)
    for verb in table:
        parser = actions.add_parser(
            verb.name, parents=[common], help=verb.help, description=verb.help
        )
        for argument in verb.args:
            if isinstance(argument, OneOf):
                group = parser.add_mutually_exclusive_group(required=argument.required)
                for each in argument.args:
                    group.add_argument(*each.flags, **each.options)
            else:
                parser.add_argument(*argument.flags, **argument.options)
        if verb.func is not None:
            parser.set_defaults(func=verb.func)
    command.set_defaults(func=func)


def _unit(convert: Any) -> Any:
    """An argparse `type` from a `core.units` converter: its UnitError becomes argparse's error
    (`argument --memory: '32Gb' is not an amount of memory; e.g. 32Gi, ...`, exit code 2)."""

    def parse(text: str) -> int:
        try:
            return int(convert(text))
        except UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    parse.__name__ = convert.__name__
    return parse


KEY_VALUE = arg(
    "--set",
    action="append",
    default=[],
    metavar="KEY=VALUE",
    help="any other API field, its value parsed as JSON when it is JSON (--set gpu_percent=25); repeatable",
)
TENANT = arg("--tenant", metavar="SLUG", help="team slug (default: your only team)")
TENANT_FILTER = arg("--tenant", metavar="SLUG", help="only this team's (team slug)")
QUOTA = arg(
    "--quota",
    metavar="POOL_OR_ID",
    help="the quota to charge: its pool (quota group) name, e.g. training, or its id "
    "(default: your team's only quota; `tessera quota show` lists them)",
)
ID = arg("id", help="its id (the first column of the list)")
INT_ID = arg("id", type=int, help="its id (the first column of the list)")
REASON_NOTE = arg("--note", default="", help="a note recorded with the decision")

CODESPACE_VERBS = (
    Verb(
        "list",
        (
            arg("--state", help="only in this state, e.g. running, queued, stopped"),
            TENANT_FILTER,
        ),
        help="your teams' codespaces",
    ),
    Verb(
        "create",
        (
            arg("name", help="1-63 lowercase letters, digits and dashes"),
            arg("--template", required=True, help="template name, e.g. pytorch"),
            arg("--preset", help="one of the template's sizes, e.g. quarter-h100"),
            TENANT,
            QUOTA,
            KEY_VALUE,
        ),
        help="create and start a codespace",
    ),
    *verbs(("show", "stop", "start"), "{verb} a codespace", ID),
    Verb(
        "delete",
        (
            ID,
            arg("--reason", default="", help="why (required to delete another user's codespace)"),
        ),
        help="delete a codespace",
    ),
    Verb("eta", (ID,), help="when a queued codespace is likely to start, and why"),
)

JOB_VERBS = (
    Verb(
        "list",
        (
            arg("--state", help="only in this state, e.g. waiting, running, cancelled"),
            TENANT_FILTER,
        ),
        help="your teams' jobs",
    ),
    Verb(
        "submit",
        (
            arg("name", help="1-63 lowercase letters, digits and dashes"),
            arg(
                "--pods", type=int, required=True, help="how many pods (all get the same resources)"
            ),
            arg("--min-available", type=int, help="start once this many fit (default: all --pods)"),
            one_of(
                arg(
                    "--cpu",
                    dest="cpu_milli",
                    type=_unit(cpu_milli),
                    metavar="CORES",
                    help="CPU per pod: cores or millicores, e.g. 8, 0.5, 500m",
                ),
                arg("--cpu-milli", type=int, help="CPU per pod in milli-CPU (8000 = 8 cores)"),
                required=True,
            ),
            one_of(
                arg(
                    "--memory",
                    dest="memory_mib",
                    type=_unit(memory_mib),
                    metavar="SIZE",
                    help="memory per pod with its unit, e.g. 32Gi, 512Mi, 1.5Gi, 32G (= 32e9 bytes)",
                ),
                arg("--memory-mib", type=int, help="memory per pod in MiB"),
                required=True,
            ),
            arg("--gpus-per-pod", type=int, default=0, help="GPUs per pod (default 0)"),
            arg("--gpu-milli", type=int, help="share of each GPU in milli-GPU (500 = half a GPU)"),
            one_of(
                arg(
                    "--gpu-memory",
                    dest="gpu_memory_mib",
                    type=_unit(memory_mib),
                    metavar="SIZE",
                    help="GPU memory per GPU with its unit, e.g. 20Gi (for a share of a GPU)",
                ),
                arg("--gpu-memory-mib", type=int, help="GPU memory per GPU in MiB"),
            ),
            arg("--image", default="", help="container image, e.g. pytorch:2.4"),
            arg(
                "--timeout-seconds",
                type=int,
                default=600,
                help="give up when not placed within this (default 600)",
            ),
            arg(
                "--priority",
                type=int,
                default=0,
                help="-1000..1000; higher is placed first (default 0)",
            ),
            arg(
                "--not-preemptible",
                action="store_true",
                help="its pods are never preempted (stopped to make room for other work)",
            ),
            arg(
                "--topology",
                metavar="LEVEL",
                help="all pods in one domain of this level of the pool's topology (rack, block, nvlink)",
            ),
            arg(
                "--topology-preferred",
                action="store_true",
                help="with --topology: the tightest domain that fits, else anywhere (default: required)",
            ),
            TENANT,
            QUOTA,
            KEY_VALUE,
        ),
        help="submit a gang job: N pods placed all together or not at all",
    ),
    *verbs(("show", "cancel"), "{verb} a job (one row per pod)", ID),
    Verb("eta", (ID,), help="when each waiting pod is likely to start, and why"),
)

QUOTA_VERBS = (
    Verb(
        "show",
        (arg("--tenant", metavar="SLUG", help="only this team's quotas (team slug)"),),
        help="your teams' quotas and their headroom",
    ),
    Verb(
        "fairness",
        (arg("id", type=int, help="the quota's id (`tessera quota show`)"),),
        help="fair share, budgets, loans",
        func=cmd_quota_fairness,
    ),
    Verb(
        "user-cap",
        (
            arg("id", type=int, help="the quota's id"),
            arg(
                "--max-gpus",
                type=int,
                help="the most GPUs one person may hold; omit to clear the cap",
            ),
        ),
        help="most GPUs per person (operators)",
        func=cmd_quota_user_cap,
    ),
    Verb(
        "reclaim-notices",
        (
            arg("id", type=int, help="the quota's id"),
            arg(
                "--state",
                choices=("noticed", "executed", "cancelled"),
                help="only notices in this state (default: all)",
            ),
        ),
        help="the reclaim plan: what, whose, when",
        func=cmd_quota_reclaim_notices,
    ),
    Verb(
        "reclaim-settings",
        (
            arg("id", type=int, help="the quota's id"),
            arg("--webhook", help="checkpoint webhook URL ('' to remove)"),
            arg(
                "--equal-share",
                dest="equal_share",
                action="store_true",
                default=None,
                help="share the team's borrowed GPUs equally among its active users",
            ),
            arg(
                "--no-equal-share",
                dest="equal_share",
                action="store_false",
                help="borrowed GPUs go first come, first served",
            ),
        ),
        help="checkpoint webhook, equal share (operators)",
        func=cmd_quota_reclaim_settings,
    ),
    Verb(
        "reclaim-notice",
        (
            arg("--group", type=int, required=True, help="the quota group's id"),
            arg(
                "--seconds",
                type=int,
                required=True,
                help="notice before borrowed work is stopped; 0 = stop at once",
            ),
        ),
        help="a group's notice before reclaim (operators)",
        func=cmd_quota_reclaim_notice,
    ),
)

LOAN_VERBS = (
    Verb(
        "list",
        (arg("--state", help="only in this state, e.g. requested, approved"),),
        help="loans of your teams' quotas",
    ),
    Verb(
        "request",
        (
            arg("--borrower", type=int, required=True, help="your quota id"),
            arg("--lender", type=int, help="the sibling quota id (omit: ask the operators)"),
            arg("--gpus", type=int, required=True, help="how many GPUs of min to borrow"),
            arg("--starts-at", required=True, help="ISO 8601, e.g. 2026-12-07T09:00:00Z"),
            arg("--ends-at", required=True, help="ISO 8601, after --starts-at"),
            arg("--reason", default="", help="why, for the lender"),
        ),
        help="ask for GPUs of min from a sibling quota for a window",
    ),
    *verbs(("approve", "decline", "cancel"), "{verb} a loan", INT_ID, REASON_NOTE),
)

BUDGET_VERBS = (
    Verb(
        "list",
        (arg("--quota", type=int, help="only this quota's budgets (quota id)"),),
        help="GPU-hour budgets and how much is used",
    ),
    Verb(
        "add",
        (
            arg("--quota", type=int, required=True, help="the quota id"),
            arg("--gpu-hours", required=True, help="the budget per period, e.g. 500"),
            arg("--period", choices=("week", "month"), default="week", help="default: week"),
            arg(
                "--window",
                choices=("calendar", "rolling"),
                default="calendar",
                help="calendar (resets Monday 00:00 UTC / the 1st) or rolling (the last 7 / 30 days)",
            ),
            arg("--gpu-model", default="", help="count only this GPU model (default: every model)"),
            arg(
                "--weighting",
                choices=("hours", "price"),
                default="hours",
                help="count GPU-hours, or GPU-hours weighted by each model's price",
            ),
            arg(
                "--hard",
                action="store_true",
                help="at 100 %% nothing new starts, not even work within min (default: only borrowing stops)",
            ),
        ),
        help="add a GPU-hour budget to a quota (operators)",
    ),
    Verb(
        "top-up",
        (
            INT_ID,
            arg("--gpu-hours", required=True, help="GPU-hours to add for this period"),
            arg("--reason", required=True, help="why, recorded in the activity log"),
        ),
        help="add GPU-hours to a budget for the current period (operators)",
    ),
)


RECLAIM_NOTICE_VERBS = (
    Verb(
        "list",
        (
            arg("--state", choices=("live", "closed", "all"), help="default: all"),
            arg("--group", metavar="NAME_OR_ID", help="only this quota group's notices"),
            arg("--quota", type=int, metavar="ID", help="only notices that concern this quota"),
        ),
        help="live notices first (soonest deadline first), then closed ones",
    ),
)

DEFRAG_VERBS = (
    Verb(
        "preview",
        (arg("--group", type=int, required=True, help="the quota group (pool) id"),),
        help="plan a pool's defragmentation (nothing moves)",
    ),
    *verbs(("show", "apply"), "{verb} a defragmentation plan", INT_ID),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tessera", description="Tessera GPU platform command-line client."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", help="print the API's JSON instead of a table"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    login = sub.add_parser("login", help="save the portal URL and an API token")
    login.add_argument("--url", required=True, help="the portal, e.g. https://tessera.example.com")
    login.add_argument("--token", help="a personal API token (default: prompt, or stdin)")
    login.set_defaults(func=cmd_login)

    add_command(
        sub, "codespace", "GPU-slice dev environments", CODESPACE_VERBS, cmd_codespace, common
    )
    add_command(sub, "job", "gang jobs (N pods, all or nothing)", JOB_VERBS, cmd_job, common)
    add_command(sub, "quota", "quotas of your tenants", QUOTA_VERBS, cmd_quota, common)
    add_command(
        sub,
        "loan",
        "quota loans: GPUs of min from a sibling quota for a window",
        LOAN_VERBS,
        cmd_loan,
        common,
    )
    add_command(
        sub, "budget", "GPU-hour budgets (operators write)", BUDGET_VERBS, cmd_budget, common
    )
    add_command(
        sub,
        "reclaim-notices",
        "the reclaim plan across groups: what, whose, when",
        RECLAIM_NOTICE_VERBS,
        cmd_reclaim_notices,
        common,
    )
    add_command(
        sub,
        "defrag",
        "plan and apply defragmentation of a pool (operators)",
        DEFRAG_VERBS,
        cmd_defrag,
        common,
    )
    return parser


def flags_by_field(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The flag that sets each API field on the subcommand that ran (`quota` -> `--quota`), so an API
    field error can say what to pass."""
    words = [getattr(args, "command", None), getattr(args, "action", None)]
    for word in words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            break
        parser = sub.choices[word]
    flags: dict[str, str] = {}
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            flags.setdefault(action.dest, action.option_strings[0])  # --cpu before --cpu-milli
    return flags


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "json"):
        args.json = False
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        flags = flags_by_field(parser, args)
        for field, reasons in exc.fields.items():
            text = (
                "; ".join(map(str, reasons)) if isinstance(reasons, list) else json.dumps(reasons)
            )
            flag = f" ({flags[field]})" if field in flags else ""
            print(f"  {field}{flag}: {text}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The codespace services: the functions pages, the API, the CLI (through the API) and tasks call
(docs/services.md, "codespaces"). Refusals are `portal.errors` exceptions with the field at fault and the
numbers. The scheduling service owns placement (`scheduling.services.submit_workload` /
`release_workload`).

One module per use case:
`requests` (what a caller names, resolved: templates and quotas a team may use), `sizing` (a size in
people's units → scheduler units, its one validation), `create` (the create transaction), `actions`
(start, stop, delete, keep alive), `sync` (following the scheduling workload), `picker` (what fits now),
`savings` (whole cards saved by slicing), `listings` (which codespaces a user sees), `templates_admin`
(operators' template CRUD).
"""

from codespaces.services.actions import (
    delete_codespace,
    keep_codespace,
    set_move_consent,
    start_codespace,
    stop_codespace,
)
from codespaces.services.create import create_codespace
from codespaces.services.listings import scoped_codespaces, visible_codespaces
from codespaces.services.picker import (
    PickerData,
    PresetOption,
    SizePreview,
    picker_data,
    picker_for,
    preview,
    preview_size,
    quota_headroom,
)
from codespaces.services.requests import (
    default_quota,
    quotas_for_tenant,
    resolve_quota,
    resolve_template,
    templates_for_tenant,
    templates_for_user,
    templates_overview,
)
from codespaces.services.savings import Savings, savings
from codespaces.services.sizing import (
    SIZE_INPUT_BOUNDS,
    Resources,
    SizeRequest,
    slice_models,
    validate_size,
)
from codespaces.services.sync import reconcile_codespaces, sync_from_workloads
from codespaces.services.templates_admin import (
    TEMPLATE_FIELDS,
    create_template,
    retire_template,
    update_template,
)

__all__ = [
    "SIZE_INPUT_BOUNDS",
    "TEMPLATE_FIELDS",
    "PickerData",
    "PresetOption",
    "Resources",
    "Savings",
    "SizePreview",
    "SizeRequest",
    "create_codespace",
    "create_template",
    "default_quota",
    "delete_codespace",
    "keep_codespace",
    "picker_data",
    "picker_for",
    "preview",
    "preview_size",
    "quota_headroom",
    "quotas_for_tenant",
    "reconcile_codespaces",
    "resolve_quota",
    "resolve_template",
    "retire_template",
    "savings",
    "scoped_codespaces",
    "set_move_consent",
    "slice_models",
    "start_codespace",
    "stop_codespace",
    "sync_from_workloads",
    "templates_for_tenant",
    "templates_for_user",
    "templates_overview",
    "update_template",
    "validate_size",
    "visible_codespaces",
]

"""Kubernetes label rules, for node selectors (quota groups) and node labels (workloads, jobs).

A label is `[prefix/]name`: the name at most 63 characters of letters, digits, '-', '_' and '.',
starting and ending with a letter or digit; the optional prefix a DNS subdomain of at most 253
characters; the value empty or like a name. A selector has at most `MAX_NODE_LABELS` of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_NODE_LABELS = 32
MAX_LABEL_NAME_LENGTH = 63
MAX_LABEL_PREFIX_LENGTH = 253
MAX_LABEL_VALUE_LENGTH = 63

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = (
    "a name is letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
)


def _label_error(key: str, value: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key:
        if len(prefix) > MAX_LABEL_PREFIX_LENGTH:
            return (
                f"Label prefix {prefix!r}: a DNS subdomain of at most {MAX_LABEL_PREFIX_LENGTH} "
                f"characters (got {len(prefix)})."
            )
        if not _DNS_SUBDOMAIN.fullmatch(prefix):
            return (
                f"Label prefix {prefix!r}: a DNS subdomain (lowercase letters, digits, '-', '.')."
            )
    if len(name) > MAX_LABEL_NAME_LENGTH:
        return (
            f"Label {key!r}: the name after the prefix has at most {MAX_LABEL_NAME_LENGTH} "
            f"characters (got {len(name)})."
        )
    if not _NAME.fullmatch(name):
        return f"Label {key!r}: {_NAME_RULE}."
    if len(value) > MAX_LABEL_VALUE_LENGTH:
        return (
            f"Label {key!r}: the value has at most {MAX_LABEL_VALUE_LENGTH} characters "
            f"(got {len(value)})."
        )
    if value and not _NAME.fullmatch(value):
        return f"Label {key!r}: the value is empty or {_NAME_RULE[2:]}."
    return None


def node_label_errors(labels: Mapping[str, str]) -> list[str]:
    """Why `labels` (string keys and values) is not a valid Kubernetes node selector; [] if it is."""
    if len(labels) > MAX_NODE_LABELS:
        return [f"At most {MAX_NODE_LABELS} node labels (got {len(labels)})."]
    return [error for key, value in labels.items() if (error := _label_error(key, value))][:1]

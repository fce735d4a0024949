"""Long names on narrow screens: `{{ node.name|breakable }}` lets a name wrap only at its separators
(after - . _ / : @), never mid-word; `{% name_cell value %}` shows a name in one line, cut with an
ellipsis when the column is narrow, the whole name in its title (see `.name-cell` in app.css)."""

from __future__ import annotations

import re
from typing import Any

from django import template
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# Where a name may wrap: after a separator, before the next part.
_SEPARATORS = re.compile(r"([-._/:@])")
# Longer names are cut for the page (the whole name stays in the title and the API).
MAX_SHOWN = 253


@register.filter(is_safe=True)
def breakable(value: Any) -> SafeString:
    """`value` escaped, with a <wbr> (a line-break opportunity) after each separator."""
    text = conditional_escape(str(value if value is not None else "")[:MAX_SHOWN])
    return mark_safe(_SEPARATORS.sub(r"\1<wbr>", str(text)))  # noqa: S308 - escaped above


@register.simple_tag
def name_cell(value: Any) -> SafeString:
    """A name in one line with an ellipsis when cut; the whole name in the title."""
    text = str(value if value is not None else "")[:MAX_SHOWN]
    return format_html('<span class="name-cell" title="{}">{}</span>', text, text)

"""Issue 16 (phones): long names wrap at their separators only, or are cut with an ellipsis and shown
whole in the title; never unescaped."""

from __future__ import annotations

from django.template import Context, Template

from portal.templatetags.names import breakable, name_cell


def test_breakable_offers_a_break_after_each_separator_only() -> None:
    assert breakable("gpu-node-a100.rack04_z:1") == (
        "gpu-<wbr>node-<wbr>a100.<wbr>rack04_<wbr>z:<wbr>1"
    )
    assert breakable("l40s00") == "l40s00"


def test_breakable_escapes_before_adding_breaks() -> None:
    assert breakable('<b onclick="x">-') == "&lt;b onclick=&quot;x&quot;&gt;-<wbr>"


def test_name_cell_keeps_the_whole_name_in_its_title() -> None:
    rendered = name_cell("very-long-node-name-in-rack-42")
    assert rendered == (
        '<span class="name-cell" title="very-long-node-name-in-rack-42">'
        "very-long-node-name-in-rack-42</span>"
    )
    html = Template("{% load names %}{% name_cell value %}").render(Context({"value": "<x>"}))
    assert html == '<span class="name-cell" title="&lt;x&gt;">&lt;x&gt;</span>'

"""Serve plotly.min.js from the installed plotly package, so the portal needs no CDN (air-gapped sites)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

_PLOTLY_DIR = Path(plotly.__file__).resolve().parent / "package_data"
_PUBLIC_PATH = "vendor/plotly/plotly.min.js"


class PlotlyFinder(BaseFinder):
    """Finds `vendor/plotly/plotly.min.js` inside the plotly package."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(_PLOTLY_DIR))
        self.storage.prefix = "vendor/plotly"  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:  # type: ignore[override]
        if path == _PUBLIC_PATH:
            found = str(_PLOTLY_DIR / "plotly.min.js")
            return [found] if find_all else found
        return [] if find_all else ""

    def list(self, ignore_patterns: Any) -> Any:
        yield "plotly.min.js", self.storage

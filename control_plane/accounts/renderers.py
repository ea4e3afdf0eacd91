"""CSV rendering of a usage summary (`/api/usage/?format=csv`, `/api/usage/export.csv`)."""

from __future__ import annotations

import csv
import io

from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer


class UsageCsvRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out)
        if not isinstance(data, dict) or "rows" not in data:
            for name, value in (data or {}).items() if isinstance(data, dict) else [("detail", data)]:
                writer.writerow([name, value])
            return out.getvalue().encode()
        rows = data["rows"] or [data["totals"]]
        columns = list(rows[0].keys())
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(column)) for column in columns])
        return out.getvalue().encode()


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value else "0"
    text = str(value)
    # a cell starting with = + - @ is a formula to spreadsheet programs: neutralise it
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class FirstRendererNegotiation(BaseContentNegotiation):
    """Always the view's first renderer, whatever the Accept header (for fixed-format exports)."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type

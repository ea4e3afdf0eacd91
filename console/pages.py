"""Rendering a console page: the template plus what every page needs (navigation)."""

from __future__ import annotations

from django.shortcuts import render

from console.access import navigation


def render_page(request, template: str, context: dict | None = None, *, active: str = "", status: int = 200):
    return render(request, template, {**navigation(request), "active": active, **(context or {})}, status=status)

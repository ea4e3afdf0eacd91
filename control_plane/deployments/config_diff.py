"""Config documents as the revision history reads them: a diff of two JSON configs as dotted paths,
and a JSON merge patch (RFC 7386) of a partial config onto a whole one."""

from __future__ import annotations

from typing import Any

MISSING = None


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested objects by dotted path (an empty object has none: `{}` reads as absent)."""
    if isinstance(value, dict):
        leaves: dict[str, Any] = {}
        for key, child in value.items():
            leaves.update(flatten(child, f"{prefix}.{key}" if prefix else str(key)))
        return leaves
    return {prefix: value}


def config_diff(old: dict, new: dict) -> list[dict]:
    """[{path, old, new}] for every leaf that differs, sorted by path (a missing leaf reads as null)."""
    before, after = flatten(old or {}), flatten(new or {})
    changes = []
    for path in sorted(set(before) | set(after)):
        was, now = before.get(path, MISSING), after.get(path, MISSING)
        if was != now:
            changes.append({"path": path, "old": was, "new": now})
    return changes


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged

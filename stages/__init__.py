"""Omnistage's engine library: stage configs, engines, model families, orchestrator core.

Plain Python, no Django. `from stages import Omni` runs a pipeline in-process.
"""

from __future__ import annotations

__all__ = ["AsyncOmni", "Omni"]


def __getattr__(name: str):
    if name in __all__:
        from stages import omni

        return getattr(omni, name)
    raise AttributeError(f"module 'stages' has no attribute {name!r}")

"""Typed errors of the package; each message names the file, field and value at fault."""
from __future__ import annotations


class DynparError(Exception):
    """Base class of every error this package raises on purpose."""


class InstanceError(DynparError):
    """An instance, trace or workload file is malformed; nothing was loaded."""


class InfeasibleSlotError(DynparError):
    """No feasible plan exists for a slot (nothing available, or nothing can hold the model)."""

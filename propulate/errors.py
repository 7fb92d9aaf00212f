"""The exceptions propulate raises.

Every error derives from :class:`PropulateError` and also from the builtin that matches its meaning, so
``except ValueError`` in user code keeps working.
"""

from __future__ import annotations

__all__ = ["LayoutError", "PropulateError", "SearchSpaceError"]


class PropulateError(Exception):
    """Root of every error raised by propulate."""


class SearchSpaceError(PropulateError, ValueError):
    """Invalid search-space limits; the message names the offending parameter."""


class LayoutError(PropulateError, ValueError):
    """Ranks, workers and islands do not fit together (sizes, divisibility, topology shape)."""

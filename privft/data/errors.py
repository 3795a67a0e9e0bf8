"""The error type raised for bad input data."""

from __future__ import annotations


class DataError(ValueError):
    """Input data that cannot be used; the message names the source, the row and the fix."""

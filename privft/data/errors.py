"""The error type raised for bad input data."""

from __future__ import annotations


class DataError(ValueError):
    """Input data that cannot be used; the message names the source, the row and the fix."""


class MissingColumnError(DataError):
    """A table has no column of the requested name; `option` is how the caller names the setting to change."""

    def __init__(self, source: str, text_column: str, columns: list[str], option: str = "text_column=") -> None:
        super().__init__(f"{source}: no column {text_column!r}; the columns are {columns}. "
                         f"Pass {option} with one of them")
        self.source = source
        self.text_column = text_column
        self.columns = columns

    def for_option(self, option: str) -> MissingColumnError:
        """The same error, telling the user to set `option` (a CLI flag or config key) instead."""
        return MissingColumnError(self.source, self.text_column, self.columns, option)

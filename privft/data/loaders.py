"""Load texts or records (`privft.data.records`) from files, `datasets.Dataset` objects or Python lists."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from privft.data.errors import DataError, MissingColumnError
from privft.data.records import FORMATS, Record, check_records, record_format

PREVIEW_CHARS = 60


def load_texts(source: Any, text_column: str = "text") -> list[str]:
    """Return the texts of a .jsonl/.json/.csv/.parquet file, a `datasets.Dataset` or a str list."""
    if isinstance(source, (str, os.PathLike)):
        return _load_file(Path(source), text_column)
    if _is_dataset(source):
        return _load_dataset(source, text_column)
    if isinstance(source, (list, tuple)):
        return check_texts(source, "the given list")
    raise DataError(
        f"cannot load texts from a {type(source).__name__}; pass a path to a "
        f"{_extensions()} file, a datasets.Dataset (pick a split of a DatasetDict, "
        "e.g. ds['train']) or a list of strings"
    )


def load_records(source: Any, text_column: str = "text", format: str = "auto") -> list[Record]:
    """The records of a file, a `datasets.Dataset` or a list: texts, prompt–completion or messages records.

    Under `format="auto"` a row with 'messages', or with 'prompt' and 'completion', is a record of that
    format (its other keys dropped), and any other row is a text read from `text_column`; every row must
    then have the first row's format. CSV holds texts or string prompt–completion pairs.
    """
    if format != "auto" and format not in FORMATS:
        raise DataError(f"format={format!r} is not one of {('auto', *FORMATS)}; leave it 'auto' to detect it")
    if isinstance(source, (str, os.PathLike)):
        rows, where = _rows_of_file(Path(source)), str(source)
    elif _is_dataset(source):
        rows, where = source.to_list(), f"datasets.Dataset with {source.num_rows} rows"
    elif isinstance(source, (list, tuple)):
        rows, where = list(source), "the given list"
    else:
        raise DataError(f"cannot load records from a {type(source).__name__}; pass a path to a {_extensions()} "
                        "file, a datasets.Dataset (pick a split of a DatasetDict) or a list of strings or records")
    if format == "text" or (format == "auto" and rows and record_format(_as_record(rows[0])) in (None, "text")):
        return [_text_of(row, text_column, f"{where}, row {i}") for i, row in enumerate(rows)]
    return check_records([_as_record(row) for row in rows], where, format)


def _as_record(row: Any) -> Any:
    """A row reduced to its format's keys ('messages', or 'prompt' and 'completion'); other rows as they are."""
    fmt = record_format(row)
    if fmt == "messages":
        return {"messages": row["messages"]}
    if fmt == "prompt_completion":
        return {"prompt": row["prompt"], "completion": row["completion"]}
    return row


def _rows_of_file(path: Path) -> list[Any]:
    """The rows of a file as JSON values (CSV and Parquet rows as dicts)."""
    suffix = path.suffix.lower()
    if suffix not in _READERS:
        raise DataError(f"{path}: unknown file extension {path.suffix!r}; use one of {_extensions()}")
    if not path.is_file():
        raise DataError(f"{path}: no such file; check the path")
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_rows(path)
    if suffix == ".json":
        return _json_rows(path)
    if suffix == ".csv":
        return list(csv.DictReader(io.StringIO(_decode(path), newline="")))
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def check_texts(values: Sequence[Any], source: str, text_column: str | None = None) -> list[str]:
    """Return `values` as a list of strings, raising `DataError` on a non-string or empty entry."""
    column = f", column {text_column!r}" if text_column else ""
    return [_check_text(value, f"{source}, row {row}{column}") for row, value in enumerate(values)]


def _check_text(value: Any, where: str) -> str:
    """Return `value` if it is a non-blank string, else raise `DataError` naming `where`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(
            f"{where}: the text is empty or whitespace-only; drop the row or fill in its text"
        )
    if not isinstance(value, str):
        raise DataError(
            f"{where}: expected a string, got {type(value).__name__} {_preview(value)}; "
            "convert the value to text or drop the row"
        )
    return value


def _load_file(path: Path, text_column: str) -> list[str]:
    """Dispatch on the file extension of `path`."""
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(
            f"{path}: unknown file extension {path.suffix!r}; "
            f"use one of {_extensions()} or pass a list of strings"
        )
    if not path.is_file():
        raise DataError(f"{path}: no such file; check the path")
    return reader(path, text_column)


def _read_jsonl(path: Path, text_column: str) -> list[str]:
    """Read one JSON object (or string) per non-blank line (lines end at \\n; U+2028 inside a string is text)."""
    numbered = _jsonl_numbered_rows(path)
    return [_text_of(row, text_column, f"{path}, row {i} (line {line_no})")
            for i, (line_no, row) in enumerate(numbered)]


def _jsonl_rows(path: Path) -> list[Any]:
    """The JSON value of each non-blank line."""
    return [row for _, row in _jsonl_numbered_rows(path)]


def _jsonl_numbered_rows(path: Path) -> list[tuple[int, Any]]:
    """(line number, JSON value) of each non-blank line, refusing a line that is not JSON."""
    rows: list[tuple[int, Any]] = []
    for line_no, line in enumerate(_decode(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append((line_no, json.loads(line)))
        except json.JSONDecodeError as err:
            raise DataError(
                f"{path}, line {line_no}: not valid JSON ({err.msg}); "
                "write one JSON object per line"
            ) from err
    return rows


def _read_json(path: Path, text_column: str) -> list[str]:
    """Read a JSON list of objects or strings."""
    return [_text_of(row, text_column, f"{path}, row {i}") for i, row in enumerate(_json_rows(path))]


def _json_rows(path: Path) -> list[Any]:
    """The rows of a JSON file holding a list."""
    try:
        rows = json.loads(_decode(path))
    except json.JSONDecodeError as err:
        raise DataError(
            f"{path}: not valid JSON at line {err.lineno}, column {err.colno} ({err.msg}); "
            "fix the file"
        ) from err
    if not isinstance(rows, list):
        raise DataError(
            f"{path}: expected a JSON list of objects or strings, got a {type(rows).__name__}; "
            "wrap the records in a list or save them as JSONL"
        )
    return rows


def _read_csv(path: Path, text_column: str) -> list[str]:
    """Read a CSV file with a header row."""
    reader = csv.DictReader(io.StringIO(_decode(path), newline=""))
    columns = reader.fieldnames or []
    if text_column not in columns:
        raise _missing_column(str(path), text_column, columns)
    return check_texts([row[text_column] for row in reader], str(path), text_column)


def _read_parquet(path: Path, text_column: str) -> list[str]:
    """Read one column of a Parquet file."""
    import pyarrow.parquet as pq

    columns = pq.read_schema(path).names
    if text_column not in columns:
        raise _missing_column(str(path), text_column, columns)
    values = pq.read_table(path, columns=[text_column]).column(text_column).to_pylist()
    return check_texts(values, str(path), text_column)


def _load_dataset(dataset: Any, text_column: str) -> list[str]:
    """Read one column of a `datasets.Dataset`."""
    source = f"datasets.Dataset with {dataset.num_rows} rows"
    if text_column not in dataset.column_names:
        raise _missing_column(source, text_column, dataset.column_names)
    return check_texts(list(dataset[text_column]), source, text_column)


def _text_of(row: Any, text_column: str, where: str) -> str:
    """Return the text of one JSON row: the row itself if a string, else its `text_column`."""
    if isinstance(row, str):
        return _check_text(row, where)
    if not isinstance(row, dict):
        raise DataError(
            f"{where}: expected an object or a string, got {type(row).__name__} {_preview(row)}; "
            "make every record an object with a text field"
        )
    if text_column not in row:
        raise _missing_column(where, text_column, list(row))
    return _check_text(row[text_column], f"{where}, column {text_column!r}")


def _decode(path: Path) -> str:
    """Return the file's contents decoded as UTF-8 (a leading BOM is dropped)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}: byte 0x{data[err.start]:02x} at offset {err.start} (line {line}) is not "
            "valid UTF-8; re-encode the file as UTF-8, e.g. "
            f"`iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}`"
        ) from err


def _missing_column(source: str, text_column: str, columns: Sequence[str]) -> MissingColumnError:
    """Build the error for a text column that does not exist."""
    return MissingColumnError(source, text_column, list(columns))


def _is_dataset(source: Any) -> bool:
    """Tell whether `source` is a `datasets.Dataset` (without importing `datasets`)."""
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(source, datasets.Dataset)


def _preview(value: Any) -> str:
    """Return a short repr of `value` for an error message."""
    text = repr(value)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


def _extensions() -> str:
    """List the supported file extensions."""
    return ", ".join(sorted(_READERS))


_READERS: dict[str, Callable[[Path, str], list[str]]] = {
    ".jsonl": _read_jsonl,
    ".ndjson": _read_jsonl,
    ".json": _read_json,
    ".csv": _read_csv,
    ".parquet": _read_parquet,
}

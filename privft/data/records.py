"""Training records in trl's dataset formats: what a record is, which format it has, and its content.

A record is one training example, in one of the formats trl's `SFTTrainer` takes:

- ``text`` (language modelling): a plain string, tokenized privft's way (start token, then the text);
- ``prompt_completion``: ``{"prompt": ..., "completion": ...}``, both strings or both lists of messages;
- ``messages`` (conversational): ``{"messages": [{"role": ..., "content": ...}, ...]}``, system turns allowed.

This module is model-free: it checks records, names their format and gives their *content*, the text
that identity, de-duplication, near-duplicate checks and the blind baseline read. Turning a record into
token ids and the mask of trained tokens is `privft.scoring.render`'s job, the one place that does it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from privft.data.errors import DataError

Message = dict[str, str]
Record = str | dict[str, Any]  # a text, or a prompt–completion or messages record
FORMATS = ("text", "prompt_completion", "messages")
ROLES = ("system", "user", "assistant")
PREVIEW_CHARS = 60


def record_format(record: Any) -> str | None:
    """The format of one record ("text", "prompt_completion", "messages"), or None if it has none of them."""
    if isinstance(record, str):
        return "text"
    if isinstance(record, dict):
        if "messages" in record:
            return "messages"
        if "prompt" in record and "completion" in record:
            return "prompt_completion"
    return None


def is_conversational(record: Record) -> bool:
    """Whether a record is rendered through a chat template (its turns are lists of messages)."""
    fmt = record_format(record)
    return fmt == "messages" or (fmt == "prompt_completion" and isinstance(record["prompt"], list))


def check_records(values: Sequence[Any], source: str, format: str = "auto") -> list[Record]:
    """`values` as checked records of one format (`format`, or the first record's under "auto").

    Refuses, naming the row and the fix: a value of no format, records that mix formats, blank text,
    a messages record without an assistant turn, and a prompt–completion record with an empty completion.
    """
    if format != "auto" and format not in FORMATS:
        raise DataError(f"{source}: format={format!r} is not one of {('auto', *FORMATS)}")
    records = list(values)
    expected = format if format != "auto" else (record_format(records[0]) if records else None)
    for row, record in enumerate(records):
        found = record_format(record)
        where = f"{source}, row {row}"
        if found is None:
            raise DataError(_no_format(record, where))
        if expected is None:
            expected = found
        if found != expected and format != "auto":
            raise DataError(f"{where}: a {found} record ({_preview(record)}), but format={format!r} was asked; set "
                            "the format to 'auto' to detect it, or convert the records")
        if found != expected:
            raise DataError(f"{where}: a {found} record among {expected} records ({_preview(record)}); records of "
                            "one dataset must share one format: convert them, or split them into separate datasets")
        _CHECKS[found](record, where)
    return records


def record_content(record: Record) -> str:
    """The text a record is identified by: a text itself, else its turns' contents, one per line, role first.

    A string prompt and completion are joined as trl joins them (prompt + completion).
    """
    if isinstance(record, str):
        return record
    if "messages" in record:
        return _turns_text(record["messages"])
    if isinstance(record["prompt"], str):
        return record["prompt"] + record["completion"]
    return _turns_text([*record["prompt"], *record["completion"]])


def map_turns(record: Record, change: Callable[[str], str], roles: Sequence[str] = ROLES) -> Record:
    """A copy of `record` with `change` applied to the content of each turn whose role is in `roles`.

    A text counts as one assistant turn; a string prompt as a user turn and a string completion as an
    assistant turn. Other keys are kept.
    """
    if isinstance(record, str):
        return change(record) if "assistant" in roles else record
    if "messages" in record:
        return {**record, "messages": _mapped(record["messages"], change, roles)}
    if isinstance(record["prompt"], str):
        return {**record, "prompt": change(record["prompt"]) if "user" in roles else record["prompt"],
                "completion": change(record["completion"]) if "assistant" in roles else record["completion"]}
    return {**record, "prompt": _mapped(record["prompt"], change, roles),
            "completion": _mapped(record["completion"], change, roles)}


def turn_contents(record: Record, roles: Sequence[str] = ROLES) -> list[str]:
    """The contents of a record's turns whose role is in `roles`, in order (as `map_turns` assigns roles)."""
    contents: list[str] = []
    map_turns(record, lambda content: contents.append(content) or content, roles=roles)
    return contents


def record_json(record: Record) -> str:
    """A canonical JSON form of a record (sorted keys): its hash and cache key; a text is its JSON string."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True)


def describe_records(records: Sequence[Record]) -> str:
    """How a report names the unit, e.g. "500 prompt–completion records" or "500 texts"."""
    fmt = record_format(records[0]) if records else "text"
    return f"{len(records)} " + {"text": "texts", "prompt_completion": "prompt–completion records",
                                 "messages": "conversations"}[fmt or "text"]


def _turns_text(messages: Sequence[Message]) -> str:
    return "\n".join(f"{message['role']}: {message['content']}" for message in messages)


def _mapped(messages: Sequence[Message], change: Callable[[str], str], roles: Sequence[str]) -> list[Message]:
    return [{**m, "content": change(m["content"])} if m["role"] in roles else dict(m) for m in messages]


def _check_text(record: str, where: str) -> None:
    if not record.strip():
        raise DataError(f"{where}: the text is empty or whitespace-only; drop the row or fill in its text")


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: expected a non-empty list of messages, got {_preview(messages)}; give each turn "
                        "as {'role': 'user' | 'assistant' | 'system', 'content': str}")
    for turn, message in enumerate(messages):
        if (not isinstance(message, dict) or message.get("role") not in ROLES
                or not isinstance(message.get("content"), str)):
            raise DataError(f"{where}, turn {turn}: {_preview(message)} is not a message; give each turn as "
                            "{'role': 'user' | 'assistant' | 'system', 'content': str}")


def _check_conversation(record: dict[str, Any], where: str) -> None:
    _check_messages(record["messages"], where)
    if not any(m["role"] == "assistant" and m["content"].strip() for m in record["messages"]):
        raise DataError(f"{where}: the conversation has no assistant turn with content, so nothing of it would be "
                        "trained on; add the reply or drop the record")


def _check_prompt_completion(record: dict[str, Any], where: str) -> None:
    prompt, completion = record["prompt"], record["completion"]
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion.strip():
            raise DataError(f"{where}: the completion is empty, so nothing of the record would be trained on; "
                            "fill it in or drop the record")
        return
    if isinstance(prompt, str) or isinstance(completion, str):
        raise DataError(f"{where}: the prompt and the completion must both be strings or both lists of messages "
                        f"(got {type(prompt).__name__} and {type(completion).__name__})")
    _check_messages(prompt, f"{where}, prompt")
    _check_messages(completion, f"{where}, completion")
    if not any(m["content"].strip() for m in completion):
        raise DataError(f"{where}: the completion is empty, so nothing of the record would be trained on; fill it "
                        "in or drop the record")


_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "text": _check_text, "prompt_completion": _check_prompt_completion, "messages": _check_conversation,
}


def _no_format(value: Any, where: str) -> str:
    if isinstance(value, dict):
        return (f"{where}: a record with keys {sorted(value)} is in none of the formats; give a 'text' string, "
                "'prompt' and 'completion', or 'messages'")
    return (f"{where}: expected a string, got {type(value).__name__} {_preview(value)}; convert the value to text "
            "or drop the row (a conversational record is a dict with 'prompt' and 'completion', or 'messages')")


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."

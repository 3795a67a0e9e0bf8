"""Nested dataclass configs that round-trip to YAML, with errors that name unknown or mistyped keys."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from privft.io import atomic_write_text

T = TypeVar("T")
SAVED_BEFORE = "saved_before"  # field metadata: the value of a setting in configs saved before it existed


class ConfigError(ValueError):
    """A config file or dict does not match the config's fields."""


class SettingError(ValueError):
    """One setting's value is out of range; `from_dict` names it by its full key (e.g. `training.epochs`)."""

    def __init__(self, key: str, value: Any, requirement: str) -> None:
        super().__init__(f"{key}={value!r} {requirement}")
        self.key = key
        self.value = value
        self.requirement = requirement


def require(condition: bool, key: str, value: Any, requirement: str) -> None:
    """Raise `SettingError(key, value, requirement)` unless `condition` holds."""
    if not condition:
        raise SettingError(key, value, requirement)


def to_dict(config: Any) -> dict[str, Any]:
    """A plain dict (tuples as lists) of a dataclass config, ready for YAML or JSON."""
    def plain(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def config_changes(old: Any, new: Any) -> dict[str, tuple[Any, Any]]:
    """The settings that differ between two configs of one type, by dotted key: (old value, new value).

    Sections in both are compared key by key; a section on one side only (e.g. `training.lora: null`) is one change.
    """
    def diff(before: Any, after: Any, prefix: str) -> dict[str, tuple[Any, Any]]:
        if not (isinstance(before, dict) and isinstance(after, dict)):
            return {} if before == after else {prefix: (before, after)}
        return {key: change for name in [*before, *(k for k in after if k not in before)]
                for key, change in diff(before.get(name), after.get(name), f"{prefix}.{name}".lstrip(".")).items()}

    return diff(to_dict(old), to_dict(new), "")


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    """`config_changes` as one line: "training.epochs: 2 → 3; data.seed: 0 → 1"."""
    return "; ".join(f"{key}: {old!r} → {new!r}" for key, (old, new) in changes.items())


def _convert(value: Any, annotation: Any, where: str, saved: bool = False) -> Any:
    """Build a value of type `annotation` from plain YAML data."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        return _convert(value, options[0], where, saved) if len(options) == 1 else value
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping of {annotation.__name__} fields, got {value!r}.")
        return from_dict(annotation, value, where, saved=saved)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}.")
        args = typing.get_args(annotation)
        items = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(items) != len(value):
            raise ConfigError(f"{where} must be a list of {len(items)} items, got {value!r}.")
        return tuple(_convert(v, item, f"{where}[{i}]") for i, (v, item) in enumerate(zip(value, items)))
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping (key: value lines, or {{}} for none), got {value!r}.")
        key_type, value_type = typing.get_args(annotation) or (Any, Any)
        return {_convert(k, key_type, f"{where} key {k!r}"): _convert(v, value_type, f"{where}.{k}")
                for k, v in value.items()}
    if annotation is float and isinstance(value, str):
        try:  # YAML 1.1 reads a float without a dot, such as 5e-5, as a string
            return float(value)
        except ValueError:
            raise ConfigError(f"{where} must be float, got {value!r}.") from None
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation in (int, float, str, bool) and (not isinstance(value, annotation)
                                                  or (annotation is not bool and isinstance(value, bool))):
        raise ConfigError(f"{where} must be {annotation.__name__}, got {value!r}.")
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config", *, saved: bool = False) -> T:
    """Build dataclass `cls` from a dict, refusing keys it does not have.

    `saved=True` reads a config a run recorded: a key missing from it takes the field's
    `SAVED_BEFORE` metadata where it has one (the value runs made before the field existed had),
    and its default otherwise.
    """
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"Unknown key(s) {unknown} in {where}; valid keys: {sorted(fields)}.")
    if saved:
        data = {**{name: f.metadata[SAVED_BEFORE] for name, f in fields.items() if SAVED_BEFORE in f.metadata}, **data}
    hints = typing.get_type_hints(cls)
    values = {name: _convert(value, hints[name], f"{where}.{name}", saved) for name, value in data.items()}
    try:
        return cls(**values)
    except SettingError as error:  # a range check of the dataclass itself: name the key as the file spells it
        raise ConfigError(f"{where}.{error}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader refusing a key given twice in one mapping, where it would keep the last value silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping of `node`, once no key of its own (merged `<<` keys aside) occurs twice in it."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader refuses it itself
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"found the key {key!r} twice (first on line {seen[key]}), where the last value would silently "
                    "replace the first: keep one", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def load_yaml(cls: type[T], path: str | Path) -> T:
    """Read a YAML file into dataclass `cls`; a key given twice in one mapping is refused."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys, got {type(data).__name__}.")
    return from_dict(cls, data, where=str(path))


def save_yaml(config: Any, path: str | Path) -> Path:
    """Write a dataclass config to YAML atomically; `load_yaml` reads it back equal."""
    return atomic_write_text(path, yaml.safe_dump(to_dict(config), sort_keys=False, allow_unicode=True))

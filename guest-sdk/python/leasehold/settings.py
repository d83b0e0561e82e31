"""The controller's settings: its `[controllers.settings]` table as JSON.

`settings()` returns them as a dict; `settings(Cfg)` decodes them into a
dataclass, checking each field's type, and a shape error (`SettingsError`)
names the key it failed on (`region`, `db.port`, `exempt[2]`) and what was
there by its type alone, never by its value: settings may hold secrets.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from enum import Enum
from typing import Any, Callable, List, Optional, TypeVar, Union

from . import _host
from .errors import SettingsError

T = TypeVar("T")


def settings_json() -> str:
    """The settings as JSON text: always an object, `{}` when there are none."""
    return _host.current().settings()


def settings(decode: Optional[Callable[[dict], T]] = None) -> Any:
    """The settings as a dict, or decoded by `decode`.

    A dataclass type is decoded by the SDK: each field from the key of its
    name (a field with a default may be absent; other keys are ignored),
    checked against its annotation (`str`, `int`, `float`, `bool`,
    `Optional[...]`, `List[...]`, `Dict[str, ...]`, an `Enum` by value, a
    nested dataclass, `Any`). Any other callable is called with the dict.
    A shape error raises `SettingsError`: its `key` names the key it failed
    on, as a path from the top (`db.port`, `exempt[2]`), or is None when
    the settings as a whole did not fit, and its message says what was
    wrong by type ("invalid type: a string, expected int", "missing"),
    never quoting a value. A callable's own `KeyError` names the missing
    key; its other errors keep only their type.
    """
    try:
        data = json.loads(settings_json())
    except ValueError as e:
        raise SettingsError(f"not JSON ({type(e).__name__})") from None
    if decode is None:
        return data
    if isinstance(decode, type) and dataclasses.is_dataclass(decode):
        return _decode(decode, data, [])
    try:
        return decode(data)
    except KeyError as e:
        if e.args and isinstance(e.args[0], str):
            raise SettingsError("missing", key=e.args[0]) from None
        raise SettingsError("KeyError") from None
    except (TypeError, ValueError) as e:
        # The exception's text may quote a value: only its type is kept.
        raise SettingsError(type(e).__name__) from None


def _path(steps: List[Union[str, int]]) -> Optional[str]:
    shown = ""
    for step in steps:
        if isinstance(step, int):
            shown += f"[{step}]"
        else:
            shown += f".{step}" if shown else step
    return shown or None


def _found(value: Any) -> str:
    """What a JSON value is, by its type alone."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _expected(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Union:
        return " or ".join(_expected(a) for a in typing.get_args(hint))
    if origin in (list, List):
        return "an array"
    if origin is dict:
        return "an object"
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))


def _wrong(value: Any, hint: Any, path: List[Union[str, int]]) -> SettingsError:
    return SettingsError(f"invalid type: {_found(value)}, expected {_expected(hint)}", key=_path(path))


def _decode(hint: Any, value: Any, path: List[Union[str, int]]) -> Any:
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if origin is Union:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, value, path)
            except SettingsError:
                continue
        raise _wrong(value, hint, path)
    if origin in (list, List) or hint is list:
        if not isinstance(value, list):
            raise _wrong(value, hint, path)
        args = typing.get_args(hint)
        item = args[0] if args else Any
        return [_decode(item, v, path + [i]) for i, v in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise _wrong(value, hint, path)
        args = typing.get_args(hint)
        item = args[1] if len(args) == 2 else Any
        return {k: _decode(item, v, path + [k]) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, value, path)
    if isinstance(hint, type) and issubclass(hint, Enum):
        for member in hint:
            if member.value == value:
                return member
        # Which value it was is not said: it may be a secret.
        raise SettingsError(f"not one of the values of {hint.__name__}", key=_path(path))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _wrong(value, hint, path)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _wrong(value, hint, path)
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _wrong(value, hint, path)
    if hint is str:
        if isinstance(value, str):
            return value
        raise _wrong(value, hint, path)
    raise TypeError(
        f"settings({_path(path) or 'the settings'}): the SDK does not decode {hint!r}; "
        "use a callable decoder for it"
    )


def _decode_dataclass(cls: Any, value: Any, path: List[Union[str, int]]) -> Any:
    if not isinstance(value, dict):
        raise SettingsError(f"invalid type: {_found(value)}, expected an object", key=_path(path))
    hints = typing.get_type_hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name not in value:
            has_default = (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            )
            if has_default:
                continue
            raise SettingsError("missing", key=_path(path + [f.name]))
        fields[f.name] = _decode(hints.get(f.name, Any), value[f.name], path + [f.name])
    try:
        return cls(**fields)
    except (TypeError, ValueError) as e:
        # The class's own checks (`__post_init__`) may quote a value.
        raise SettingsError(type(e).__name__, key=_path(path)) from None


def schema_of(cls: Any) -> str:
    """The JSON Schema (JSON text) of the settings dataclass `cls`, for
    `Description.settings_of`: the host checks the config's
    `[controllers.settings]` against it and names every wrong, missing or
    unknown key. Every field of `cls` (and of a nested dataclass) is a
    property; a field without a default is required; keys that are no
    field are unknown (refused). The annotations map as `settings(cls)`
    decodes them: `str`, `int`, `float`, `bool`, `Optional[...]`,
    `List[...]`, `Dict[str, ...]`, an `Enum` (its values), a nested
    dataclass, `Any` (anything).
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError("schema_of takes a dataclass type")
    schema = _schema(cls)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return json.dumps(schema, sort_keys=True)


def _schema(hint: Any) -> dict:
    if hint is Any or hint is object:
        return {}
    origin = typing.get_origin(hint)
    if origin is Union:
        return {"anyOf": [_schema(option) for option in typing.get_args(hint)]}
    if hint is type(None):
        return {"type": "null"}
    if origin in (list, List) or hint is list:
        args = typing.get_args(hint)
        return {"type": "array", "items": _schema(args[0]) if args else {}}
    if origin is dict or hint is dict:
        args = typing.get_args(hint)
        values = _schema(args[1]) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": values}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        properties = {}
        required = []
        for f in dataclasses.fields(hint):
            if not f.init:
                continue
            properties[f.name] = _schema(hints.get(f.name, Any))
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
    if isinstance(hint, type) and issubclass(hint, Enum):
        return {"enum": [member.value for member in hint]}
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if hint is kind:
            return {"type": name}
    raise TypeError(f"schema_of: the SDK has no schema for {hint!r}")

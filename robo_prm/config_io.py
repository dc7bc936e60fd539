"""YAML → typed dataclasses, with one-line errors that name the file and the field.

Every config in robo_prm (task files, train configs) goes through `from_dict`, so a typo
anywhere reads the same way: ``configs/tasks/x.yaml: milestones[1].when: unknown predicate 'nearr'``.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value is wrong. The message is one line: 'where: what'."""


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{line}: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: unexpected value {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item = args[0] if args else Any
        out = [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        kt, vt = args if args else (Any, Any)
        return {_convert(k, kt, f"{where}"): _convert(v, vt, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            out = float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
        if out != out:  # NaN never enters a config
            raise ConfigError(f"{where}: NaN is not allowed")
        return out
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            out = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
        if isinstance(value, float) and value != out:
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return out
    if tp is str:
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{where}: expected text, got {value!r}")
        return str(value)
    return value


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """Build dataclass `cls` from a mapping; unknown or missing fields are errors.

    `where` is the dotted field path so far; errors read 'field.sub: what is wrong'.
    """
    here = where or "top level"
    if not isinstance(data, dict):
        raise ConfigError(f"{here}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        close = _closest(unknown[0], list(fields))
        hint = f" (did you mean '{close}'?)" if close else ""
        raise ConfigError(f"{here}: unknown field '{unknown[0]}'{hint}")
    kwargs = {}
    for name, f in fields.items():
        sub = f"{where}.{name}" if where else name
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{sub}: missing required field")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{here}: {exc}") from None


def load_dataclass(cls: type[T], path: str | Path) -> T:
    """Read a YAML file into `cls`; errors name the file and the field."""
    data = load_yaml(path)
    try:
        return from_dict(cls, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def to_dict(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def merge(base: dict, override: dict) -> dict:
    """Deep-merge plain dicts: override wins, nested mappings merge."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def parse_value(text: str) -> Any:
    """CLI values are YAML scalars: 8 → int, 0.5 → float, true → bool, rules → str."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_overrides(extra: list[str]) -> dict[str, Any]:
    """['--judge.backend', 'rules', '--reward.judge_every=8'] → {'judge.backend': 'rules', 'reward.judge_every': 8}."""
    out: dict = {}
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}' (config fields are set as --field VALUE or --section.field VALUE)")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(extra):
                raise ConfigError(f"option '{arg}' needs a value")
            key, value = arg[2:], extra[i + 1]
            i += 2
        out[key] = parse_value(value)
    return out


def dotted_to_nested(pairs: dict[str, Any]) -> dict:
    """{'judge.backend': 'rules'} → {'judge': {'backend': 'rules'}}."""
    out: dict = {}
    for key, value in pairs.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def _closest(word: str, options: list[str]) -> str | None:
    import difflib

    hits = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return hits[0] if hits else None

"""YAML → typed dataclasses, with one-line errors that name the file and the field.

Every config in robo_prm (task files, train configs, command-line flags through
`robo_prm.config_flags`) goes through `from_dict`, so a typo anywhere reads the same way:
``configs/tasks/x.yaml: milestones[1].when: unknown predicate 'nearr'``.
"""
from __future__ import annotations

import dataclasses
import keyword
import math
import re
import reprlib
import types
import typing
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

T = TypeVar("T")


class _Loader(yaml.SafeLoader):
    """YAML as PyYAML's safe loader reads it, plus exponent floats without a dot (1e-5), which YAML 1.1 leaves as text."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"), list("-+.0123456789"))


class ConfigError(ValueError):
    """A config value is wrong. The message is one line: 'where: what'."""


MAX_CONFIG_BYTES = 1_000_000  # the largest shipped config is ~3 kB
MAX_CONFIG_NODES = 100_000  # values after YAML aliases are expanded (a 500-byte alias bomb expands to billions)


def load_yaml(path: str | Path) -> dict:
    """A YAML mapping from `path`, bounded before it is parsed (size) and before anyone walks it
    (expanded size), so a hostile file costs a one-line error, not a MemoryError."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a YAML file")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {size} bytes; a config file is at most {MAX_CONFIG_BYTES}")
    try:
        data = yaml.load(path.read_bytes().decode("utf-8"), Loader=_Loader)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{line}: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    if _expanded_size(data, MAX_CONFIG_NODES) > MAX_CONFIG_NODES:
        raise ConfigError(f"{path}: more than {MAX_CONFIG_NODES} values once its aliases are expanded")
    return data


def _expanded_size(data: Any, cap: int) -> int:
    """How many values `data` holds counting shared (aliased) parts each time they appear; stops past `cap`."""
    n, todo = 0, [data]
    while todo and n <= cap:
        item = todo.pop()
        n += 1
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return n


def _short(value: Any) -> str:
    """repr() for error messages, cut to a line (a value may be huge or deeply nested)."""
    return _REPR.repr(value)


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 60, 60, 3, 6, 6


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
        raise ConfigError(errors[0] if errors else f"{where}: unexpected value {_short(value)}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: must be one of {', '.join(map(repr, args))}, got {_short(value)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_short(value)}")
        item = args[0] if args else Any
        out = [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_short(value)}")
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
        raise ConfigError(f"{where}: expected true/false, got {_short(value)}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{where}: expected a number, got {_short(value)}")
        try:
            out = float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {_short(value)}") from None
        if out != out:  # NaN never enters a config
            raise ConfigError(f"{where}: NaN is not allowed")
        return out
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {_short(value)}")
        try:
            out = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {_short(value)}") from None
        if isinstance(value, float) and value != out:
            raise ConfigError(f"{where}: expected an integer, got {_short(value)}")
        return out
    if tp is str:
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{where}: expected text, got {_short(value)}")
        return str(value)
    return value


def convert(value: Any, tp: Any, where: str = "") -> Any:
    """One value → type `tp`, by the rules `from_dict` applies to every field (errors name `where`)."""
    return _convert(value, tp, where)


def _in_range(value: Any, meta: Any, where: str) -> Any:
    """The bounds a field declares in its metadata (`opt(..., min=1)`, `gt=0`, `max=…`), checked on numbers."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return value
    lo, gt, hi = meta.get("min"), meta.get("gt"), meta.get("max")
    if lo is not None and value < lo:
        raise ConfigError(f"{where}: must be at least {lo}, got {value}")
    if gt is not None and not value > gt:
        raise ConfigError(f"{where}: must be greater than {gt}, got {value}")
    if hi is not None and value > hi:
        raise ConfigError(f"{where}: must be at most {hi}, got {value}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value}")
    return value


def spelt(name: str) -> str:
    """A field's name in YAML and on the command line: a Python keyword with the trailing underscore PEP 8
    gives it (`async_`) is spelt as the keyword (`async:`, `--reward.async`); every other name as written."""
    return name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """Build dataclass `cls` from a mapping; unknown or missing fields are errors.

    `where` is the dotted field path so far; errors read 'field.sub: what is wrong'.
    """
    here = where or "top level"
    if not isinstance(data, dict):
        raise ConfigError(f"{here}: expected a mapping, got {_short(data)}")
    hints = typing.get_type_hints(cls)
    fields = {spelt(f.name): f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        close = _closest(unknown[0], list(fields))
        hint = f" (did you mean '{close}'?)" if close else ""
        raise ConfigError(f"{here}: unknown field '{unknown[0]}'{hint}")
    kwargs = {}
    for name, f in fields.items():
        sub = f"{where}.{name}" if where else name
        if name in data:
            kwargs[f.name] = _in_range(_convert(data[name], hints[f.name], sub), f.metadata, sub)
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
        return {spelt(f.name): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
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
    """CLI values are YAML scalars: 8 → int, 0.5 and 1e-5 → float, true → bool, rules → str."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text


def parse_overrides(extra: list[str], allowed: Callable[[str], bool] | None = None, names: list[str] = ()) -> dict[str, Any]:
    """['--judge.backend', 'rules', '--reward.judge_every=8'] → {'judge.backend': 'rules', 'reward.judge_every': 8}.
    A key `allowed` refuses is an unknown option, named with the closest of `names`."""
    out: dict = {}
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}' (config fields are set as --field VALUE or --section.field VALUE)")
        key, eq, value = arg[2:].partition("=")
        if allowed is not None and not allowed(key):
            close = _closest(key, list(names))
            raise ConfigError(f"unknown option '--{key}'" + (f" (did you mean '--{close}'?)" if close else ""))
        if not eq:
            if i + 1 >= len(extra):
                raise ConfigError(f"option '{arg}' needs a value")
            value, i = extra[i + 1], i + 1
        out[key] = parse_value(value)
        i += 1
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

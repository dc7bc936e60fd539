"""Dataclass fields ⇄ command-line flags: every `robo-prm` flag is a config field (CleanRL's `Args`).

    @dataclass
    class EvalArgs:
        run: str = opt(help="a run directory", positional=True)
        episodes: int = opt(20, "episodes to run")

`opt(default, help)` declares a field and its help; `add_config_args` turns a dataclass into flags
named exactly as the fields (``--max_minutes``; nested sections ``--judge.openai.base_url``; dict
fields take free keys ``--sac.learning_starts 50``); `config_from_args` builds the dataclass back
from the flags given. argparse never holds a default: the dataclass is the only source, and flags
layer on top of YAML (`robo_prm.config.load_train_config`). Values are read as in YAML files.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import types
import typing
from typing import Any, Callable, TypeVar

from robo_prm.config_io import (ConfigError, convert, dotted_to_nested, from_dict, merge, parse_overrides, parse_value, spelt,
                                to_dict)

T = TypeVar("T")


def opt(default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable[[], Any] | None = None,
        positional: bool = False, min: float | None = None, gt: float | None = None, max: float | None = None) -> Any:
    """A dataclass field that carries its command-line help: ``steps: int = opt(10_000, "total env steps")``.

    A list or dict default is copied for every instance; `factory` builds the default instead
    (``judge: JudgeConfig = opt(factory=JudgeConfig)``). No default: a required flag. `positional`:
    an argument without a flag name (a run folder, an episode folder). `min`, `gt`, `max`: bounds a
    number must keep, checked wherever the config is read (YAML, flags)."""
    meta = {"help": help, "positional": positional, "min": min, "gt": gt, "max": max}
    if factory is None and isinstance(default, (list, dict, set)):
        factory = lambda: copy.deepcopy(default)  # noqa: E731
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # MISSING: required


def config_fields(cls: type, prefix: str = "") -> list[tuple[str, Any, dataclasses.Field]]:
    """(dotted path, type, field) of every settable leaf of dataclass `cls`, nested sections walked
    (``judge.openai.base_url``); dict fields (free keys) are leaves too."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            out += config_fields(hints[f.name], f"{prefix}{spelt(f.name)}.")
        else:
            out.append((prefix + spelt(f.name), hints[f.name], f))
    return out


def _optional(tp: Any) -> tuple[Any, bool]:
    """`X | None` → (X, True); anything else → (tp, False)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(tp)):
            return args[0], True
    return tp, False


def flag_value(text: str, tp: Any, where: str = "") -> Any:
    """One command-line value → the field's type. Text fields take the text as given (``null``: None
    where allowed); lists take ``a,b,c`` or YAML ``[a, b]``; everything else is a YAML scalar."""
    base, nullable = _optional(tp)
    if nullable and text in ("null", "~"):
        return None
    origin = typing.get_origin(base)
    if base is str or (origin is typing.Literal and all(isinstance(a, str) for a in typing.get_args(base))):
        value: Any = text
    elif origin in (list, tuple):
        value = parse_value(text)
        if not isinstance(value, list):
            item = (typing.get_args(base) or (Any,))[0]
            value = [t.strip() if item is str else parse_value(t) for t in text.split(",") if t.strip()]
    else:
        value = parse_value(text)
    return convert(value, tp, where)


def flag_text(value: Any) -> str:
    """A value as it is written on the command line; `flag_value` reads it back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)  # YAML 1.1 reads 1e-05 as text; 1.0e-05 is a number
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    if isinstance(value, (list, tuple)):
        plain = value and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                              or isinstance(v, str) and v == v.strip() and v and not set(v) & set(',[]{}"\'')
                              for v in value)
        return ",".join(map(flag_text, value)) if plain else json.dumps(to_dict(value))
    if isinstance(value, dict) or dataclasses.is_dataclass(value):
        return json.dumps(to_dict(value))
    return str(value)


def _metavar(tp: Any) -> str:
    base, _ = _optional(tp)
    if typing.get_origin(base) in (list, tuple):
        return "YAML" if any(dataclasses.is_dataclass(a) for a in typing.get_args(base)) else "LIST"
    return {bool: "BOOL", int: "INT", float: "FLOAT", str: "STR"}.get(base, "YAML")


def _flag_type(tp: Any, path: str) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return flag_value(text, tp, path)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{path}: ")) from None

    convert.__name__ = _metavar(tp).lower()
    return convert


class _FreeKeys(argparse.Action):
    """The help line of a dict field: the real flags are ``--sac.learning_starts 50`` (see `free_flags`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string}: write the keyword itself, e.g. {option_string.replace('KEY', 'learning_starts')} 50")


def add_config_args(parser: argparse.ArgumentParser, cls: type, title: str | None = None, defaults: Any = None,
                    prefix: str = "") -> None:
    """One flag per field of dataclass `cls`, named as the field (``--max_minutes``); nested dataclasses
    become ``--section.field`` in a help group of their own. argparse gets `SUPPRESS` as every default,
    so the namespace holds only the flags given (`given_flags`): they layer on top of YAML, and the
    defaults stay in the dataclass. `defaults` (an instance) changes only the defaults the help shows."""
    target = parser.add_argument_group(title) if title else parser
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp, path, text = hints[f.name], prefix + spelt(f.name), f.metadata.get("help", "")
        default = getattr(defaults, f.name) if defaults is not None else field_default(f)
        if dataclasses.is_dataclass(tp):
            add_config_args(parser, tp, f"{path}: {text}" if text else path, default, path + ".")
            continue
        shown = "" if default is dataclasses.MISSING else f" (default: {flag_text(default)})"
        shown += "".join(f"; {sign} {f.metadata[key]}" for key, sign in (("min", "≥"), ("gt", ">"), ("max", "≤"))
                         if f.metadata.get(key) is not None)
        kw: dict[str, Any] = {"default": argparse.SUPPRESS, "help": (text + shown).strip().replace("%", "%%")}
        base, _ = _optional(tp)
        if typing.get_origin(base) is dict:
            kw["help"] = f"{text}: one keyword per flag, any YAML value{shown}".replace("%", "%%")
            target.add_argument(f"--{path}.KEY", action=_FreeKeys, metavar="VALUE", **kw)
            continue
        if typing.get_origin(base) is typing.Literal:
            kw["choices"] = typing.get_args(base)
        else:
            kw["metavar"] = _metavar(tp)
        if f.metadata.get("positional"):
            listed = typing.get_origin(base) in (list, tuple)
            item = (typing.get_args(base) or (str,))[0] if listed else tp
            nargs = ("*" if default is not dataclasses.MISSING else "+") if listed else (
                "?" if default is not dataclasses.MISSING else None)
            kw.pop("metavar", None)
            target.add_argument(path, type=_flag_type(item, path), nargs=nargs, metavar=None if "choices" in kw else path.upper(), **kw)
            continue
        if base is bool:
            kw.update(nargs="?", const=True)
        target.add_argument(f"--{path}", dest=path, type=_flag_type(tp, path), required=default is dataclasses.MISSING, **kw)


def given_flags(namespace: argparse.Namespace, cls: type) -> dict[str, Any]:
    """{dotted path: value} of the fields of `cls` set on the command line (those the user typed)."""
    paths = {path for path, _, _ in config_fields(cls)}
    return {k: v for k, v in vars(namespace).items() if k in paths}


def free_flags(extra: list[str], cls: type, known: tuple[str, ...] = ()) -> dict[str, Any]:
    """Words argparse did not know → ``{'sac.learning_starts': 50}`` for keys under a dict field of `cls`.
    Anything else is an unknown option: one line, with the closest flag of `cls` (or of `known`)."""
    fields = config_fields(cls)
    free = [path for path, tp, _ in fields if typing.get_origin(_optional(tp)[0]) is dict]
    names = [path for path, _, _ in fields] + list(known)
    return parse_overrides(extra, allowed=lambda key: any(key.startswith(p + ".") for p in free), names=names)


def config_from_args(cls: type[T], namespace: argparse.Namespace, extra: list[str] = (), base: Any = None) -> T:
    """The dataclass `cls` from the flags given, layered on `base` (an instance) or the dataclass defaults."""
    given = {**given_flags(namespace, cls), **free_flags(list(extra), cls)}
    data = merge(to_dict(base) if base is not None else {}, dotted_to_nested(given))
    try:
        return from_dict(cls, data)
    except ConfigError as exc:
        raise ConfigError(f"command line: {exc}") from None


def config_command(cls: type, run: Callable[[Any], int], base: Callable[[], Any] | None = None):
    """An argparse `func(namespace, extra)` that builds `cls` from the flags and calls run(config)."""
    return lambda namespace, extra: run(config_from_args(cls, namespace, extra, base() if base else None))


class ConfigParser(argparse.ArgumentParser):
    """argparse with one-line errors (``robo-prm: error: …``, exit 2), no abbreviated flags, and flags
    added on first use (`defer`): a subcommand imports its config classes only when it runs or shows help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._deferred: list[Callable[[argparse.ArgumentParser], Any]] = []

    def defer(self, add: Callable[[argparse.ArgumentParser], Any]) -> None:
        self._deferred.append(add)

    def _populate(self) -> None:
        while self._deferred:
            self._deferred.pop(0)(self)

    def parse_known_args(self, args=None, namespace=None):
        self._populate()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._populate()
        return super().format_help()

    def error(self, message: str):
        self.exit(2, f"{self.prog.split()[0]}: error: {message}\n")

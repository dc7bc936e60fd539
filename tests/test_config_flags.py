"""Flags are generated from the config dataclasses: help with every field and its default, one
spelling, no argparse defaults, and YAML → dataclass → flags → saved config.yaml → the same dataclass."""
import argparse
import dataclasses
import json
import re
import typing

import pytest
import yaml

from robo_prm.cli import build_parser, main, train_config_from_args
from robo_prm.config import TrainConfig, config_to_yaml, load_train_config
from robo_prm.config_flags import flag_text, flag_value
from robo_prm.config_io import spelt, to_dict


def leaves(cls, obj=None, prefix=""):
    """(dotted path, type, value) of every leaf field of dataclass `cls` (values from `obj`, else defaults)."""
    obj = cls() if obj is None else obj
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            yield from leaves(hints[f.name], value, f"{prefix}{spelt(f.name)}.")
        else:
            yield prefix + spelt(f.name), hints[f.name], value


def test_a_keyword_field_is_spelt_as_the_keyword():
    """`async_` (a Python keyword with PEP 8's underscore) is `--reward.async` and `async:` in YAML."""
    args, extra = build_parser().parse_known_args(["train", "--reward.async", "true"])
    cfg = train_config_from_args(args, extra)
    assert cfg.reward.async_ is True and "async: true" in config_to_yaml(cfg)
    assert spelt("async_") == "async" and spelt("cache_") == "cache_" and spelt("lambda_") == "lambda"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--reward.async_", "true"])


def help_entries(text: str) -> dict[str, str]:
    """'--flag' → its help entry with all whitespace removed (argparse wraps lines and long words)."""
    entries, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^  (-[-\w.]+)", line)
        if m:
            current = m.group(1)
            entries[current] = ""
        elif not line.startswith("   "):
            current = None
        if current:
            entries[current] += "".join(line.split())
    return entries


def test_train_help_lists_every_field_with_its_default(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    entries = help_entries(capsys.readouterr().out)
    paths = list(leaves(TrainConfig))
    assert len(paths) > 60 and any(p.startswith("judge.openai.") for p, _, _ in paths)
    for path, tp, default in paths:
        flag = f"--{path}.KEY" if typing.get_origin(tp) is dict else f"--{path}"
        assert flag in entries, f"{flag} missing from robo-prm train --help"
        assert "".join(f"(default: {flag_text(default)})".split()) in entries[flag], (flag, entries[flag])
    assert "(default:10000)" in entries["--steps"] and "(default:4)" in entries["--reward.judge_every"]
    assert "(default:q_proj" not in "".join(entries.values())  # no other command's defaults leak in


def _all_parsers(parser):
    parser.format_help()  # populates the deferred flags
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _all_parsers(sub)


def test_every_flag_is_spelt_as_its_field_and_holds_no_default():
    parsers = list(_all_parsers(build_parser()))
    assert len(parsers) >= 15  # robo-prm, its commands and the perception subcommands
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.default is argparse.SUPPRESS, (parser.prog, action.dest, action.default)
            for option in action.option_strings:
                assert "-" not in option[2:], (parser.prog, option)  # --max_labels, never --max-labels


def _differs(tp, value):
    """A valid value of type `tp` different from `value`."""
    if type(None) in typing.get_args(tp):  # X | None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    origin = typing.get_origin(tp)
    if tp is bool:
        return not value
    if origin is typing.Literal:
        return next(a for a in typing.get_args(tp) if a != value)
    if tp is int:
        return value + 3
    if tp is float:
        return value / 2 if value else 0.25
    if tp is str:
        return "some dir/x_1" if value is None else f"{value}_x"
    if origin is list:
        return value[:-1] if value else [_differs(typing.get_args(tp)[0], None)]
    if origin is dict:
        return {"learning_starts": 7, "policy_kwargs": {"net_arch": [8, 8]}, "learning_rate": 1e-05, "note": "0012"}
    raise AssertionError(f"no changed value for {tp}")


def _flags(cfg) -> list[str]:
    out = []
    for path, tp, value in leaves(TrainConfig, cfg):
        if isinstance(value, dict):
            out += [x for k, v in value.items() for x in (f"--{path}.{k}", json.dumps(v))]
        else:
            out += [f"--{path}", flag_text(value)]
    return out


def test_yaml_to_flags_to_saved_config_round_trip(tmp_path):
    from robo_prm.train.run import load_run_config

    # every field away from its default, so a flag that is dropped or misread shows
    data = to_dict(TrainConfig())
    for path, tp, value in leaves(TrainConfig):
        node = data
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        node[last] = to_dict(_differs(tp, value))
    (tmp_path / "all.yaml").write_text(yaml.safe_dump(data))
    from_yaml = load_train_config(str(tmp_path / "all.yaml"))
    assert all(v != d for (_, _, v), (_, _, d) in zip(leaves(TrainConfig, from_yaml), leaves(TrainConfig)))

    args, extra = build_parser().parse_known_args(["train", *_flags(from_yaml)])
    from_flags = train_config_from_args(args, extra)
    assert from_flags == from_yaml
    assert from_flags.sac["note"] == "0012" and from_flags.sac["learning_rate"] == 1e-05

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(config_to_yaml(from_flags))  # what `robo-prm train` saves
    assert load_run_config(run) == from_yaml


def test_flags_layer_on_the_task_yaml_and_only_given_flags_count():
    parser = build_parser()
    args, extra = parser.parse_known_args(["train"])
    cfg = train_config_from_args(args, extra)
    shipped = yaml.safe_load(open(__import__("robo_prm.config", fromlist=["x"]).train_configs_dir() / "reach_tool.yaml"))
    assert cfg.task == "reach_tool" and cfg.steps == shipped["steps"] != TrainConfig().steps
    assert cfg.sac == shipped["sac"]
    args, extra = parser.parse_known_args(["train", "--steps", "77", "--sac.learning_starts", "5", "--judge.model", "null",
                                           "--reward.center", "--eval.episodes=3", "--sac.learning_rate", "3e-4"])
    cfg = train_config_from_args(args, extra)
    assert (cfg.steps, cfg.sac["learning_starts"], cfg.sac["gamma"]) == (77, 5, shipped["sac"]["gamma"])
    assert cfg.sac["learning_rate"] == 3e-4  # a number, though YAML 1.1 reads 3e-4 as text
    assert cfg.judge.model is None and cfg.reward.center is True and cfg.eval.episodes == 3
    assert cfg.eval.every_steps == shipped["eval"]["every_steps"]  # a section keeps the YAML's other fields
    args, extra = parser.parse_known_args(["train", "--algo", "ppo"])  # reach_tool.yaml is a SAC config
    assert train_config_from_args(args, extra).steps == TrainConfig().steps


def test_when_pixels_section_applies_only_to_pixel_runs_and_flags_still_win(tmp_path):
    """reach_tool.yaml ships one env for pixel runs (the setting that learns from pixel captions); a state run
    keeps the file's two, a flag beats both, and a typo in the section is named before any run uses it."""
    from robo_prm.config_io import ConfigError

    def n_envs(*flags):
        args, extra = build_parser().parse_known_args(["train", *flags])
        cfg = train_config_from_args(args, extra)
        return cfg.n_envs, cfg.updates_per_step

    assert n_envs() == (2, 0.5)
    assert n_envs("--describe.source", "pixels") == (1, 1)
    assert n_envs("--describe.source", "pixels", "--n_envs", "3") == (3, 1)
    assert n_envs("--reward_source", "clip") == (2, 0.5)  # the CLIP baseline keeps the settings it was measured with
    own = tmp_path / "own.yaml"
    own.write_text("task: reach_tool\nn_envs: 4\ndescribe: {source: pixels}\nwhen_pixels: {n_envs: 2}\n")
    assert load_train_config(str(own)).n_envs == 2
    assert load_train_config(str(own), {"describe.source": "state"}).n_envs == 4
    own.write_text("task: reach_tool\nwhen_pixels: {n_env: 2}\n")
    with pytest.raises(ConfigError, match=r"own.yaml: when_pixels: .*n_env"):
        load_train_config(str(own))
    own.write_text("task: reach_tool\nwhen_pixels: 1\n")
    with pytest.raises(ConfigError, match="when_pixels: expected a mapping"):
        load_train_config(str(own))


@pytest.mark.parametrize("text, tp, value", [
    ("q_proj,v_proj", list[str], ["q_proj", "v_proj"]), ("[a, b]", list[str], ["a", "b"]), ("", list[str], []),
    ("0.25,0.35,0.4", tuple[float, float, float], (0.25, 0.35, 0.4)), ("007", str, "007"), ("null", str | None, None),
    ("1.0e-05", float, 1e-05), ("false", bool | None, False), ("null", bool | None, None),
])
def test_flag_values_read_as_yaml_and_back(text, tp, value):
    assert flag_value(text, tp) == value
    assert flag_value(flag_text(value), tp) == value


def test_former_default_disagreements_follow_the_shipped_artefacts():
    """perception collect (frames/stride/max_steps) and finetune (targets/max_labels) once had argparse
    defaults that differed from their dataclasses; the dataclass is now the only source, and it says
    what produced the shipped models."""
    from importlib import resources

    from robo_prm.config_flags import config_from_args
    from robo_prm.finetune.cli import FinetuneArgs
    from robo_prm.finetune.lora import LoraTrainConfig
    from robo_prm.perception.cli import CollectArgs
    from robo_prm.perception.dataset import CollectConfig

    models = resources.files("robo_prm") / "models"
    parser = build_parser()
    args, extra = parser.parse_known_args(["perception", "collect", "--out", "x"])
    collect = config_from_args(CollectArgs, args, extra)
    assert collect == CollectArgs(out="x") and to_dict(collect) == {**to_dict(CollectConfig()), "out": "x"}
    shipped = json.loads((models / "perception" / "manifest.json").read_text())["data"]["collect"][0]
    assert {k: shipped[k] for k in ("frames", "stride", "max_steps")} == {"frames": 14_000, "stride": 3, "max_steps": 240}
    assert (collect.frames, collect.stride, collect.max_steps) == (14_000, 3, 240)

    args, extra = parser.parse_known_args(["finetune", "--labels", "l", "--out", "o"])
    lora = config_from_args(FinetuneArgs, args, extra)
    assert {f.name: getattr(lora, f.name) for f in dataclasses.fields(LoraTrainConfig)} == to_dict(LoraTrainConfig())
    trained = json.loads((models / "judge_lora" / "train_info.json").read_text())["config"]
    assert (lora.targets, lora.max_labels) == (trained["targets"], trained["max_labels"]) == (["q_proj", "v_proj", "o_proj"], 960)

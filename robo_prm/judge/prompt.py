"""One prompt for every backend: `.txt` templates in `prompts/`, rendered by the model's
own chat template, split so the task part is a shareable prefix.

A prompt is ``prefix + scene + tail``:

* ``prefix``  – system turn + the user turn's task text (background, goal, dimensions,
  hazards, output format) up to the scene. Equal for every scene of a task, so llama.cpp
  evaluates it once and reuses its KV cache.
* ``scene``   – the SceneDescription's text (last in the user turn).
* ``tail``    – the end of the user turn and the start of the assistant turn, ending where
  the model answers: ``Score:`` (score), or a yes/no hazard question ending ``Answer:``.

Backends differ only in how they render chat messages (`ChatRenderer`) and tokenize.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Callable, Sequence

from robo_prm.types import SceneDescription, TaskText

ChatRenderer = Callable[[list[dict[str, str]]], str]  # messages → text, generation prompt included

_SCENE_MARK = "\x00SCENE\x00"  # split point; never appears in task text


@lru_cache(maxsize=None)
def load_template(name: str) -> str:
    """A template from `robo_prm/judge/prompts/<name>.txt` (one trailing newline dropped)."""
    text = (resources.files("robo_prm.judge") / "prompts" / f"{name}.txt").read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


def template_names() -> list[str]:
    folder = resources.files("robo_prm.judge") / "prompts"
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".txt"))


def task_text(s: TaskText) -> str:
    dims = "\n".join(load_template("dimension_item").format(text=d) for d in s.dimensions)
    hazards = "\n".join(load_template("hazard_item").format(name=h.name, text=h.text) for h in s.hazards) or "- none"
    return load_template("task").format(
        background=s.background.strip(), goal=s.goal.strip(), dimensions=dims, hazards=hazards
    )


def scene_text(scene: SceneDescription) -> str:
    return load_template("scene").format(text=scene.text.strip())


@dataclass(frozen=True)
class TaskPrompt:
    prefix: str
    score_tail: str
    hazard_tails: dict[str, str]  # hazard name → tail asking whether it is present
    reason_tails: tuple[str, ...]  # per digit 0–9: "… Score: d\nReason:" (explain only)

    def score_prompt(self, scene: SceneDescription) -> str:
        return self.prefix + scene_text(scene) + self.score_tail


def _split(render: ChatRenderer, user_head: str, question: str, answer: str) -> tuple[str, str]:
    messages = [
        {"role": "system", "content": load_template("system")},
        {"role": "user", "content": user_head + "\n" + _SCENE_MARK + question},
    ]
    prefix, tail = render(messages).split(_SCENE_MARK)
    return prefix, tail + answer


def build_prompt(task: TaskText, render: ChatRenderer) -> TaskPrompt:
    head = task_text(task)
    prefix, score_tail = _split(render, head, "", load_template("score_answer"))
    hazard_tails = {}
    for h in task.hazards:
        p, tail = _split(render, head, load_template("hazard_question").format(name=h.name, text=h.text),
                         load_template("hazard_answer"))
        assert p == prefix, "the chat template must not depend on the scene's position"
        hazard_tails[h.name] = tail
    reason_base = score_tail[: len(score_tail) - len(load_template("score_answer"))]
    reasons = tuple(reason_base + load_template("reason_answer").format(digit=d) for d in range(10))
    return TaskPrompt(prefix, score_tail, hazard_tails, reasons)


# ---- chat renderers -----------------------------------------------------------------
def chatml(messages: Sequence[dict[str, str]]) -> str:
    """ChatML (SmolLM2, Qwen, …): the default for servers whose template we cannot read."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n"


def jinja_renderer(template: str, bos_token: str = "", eos_token: str = "") -> ChatRenderer:
    """Render with a model's own chat template (GGUF metadata, tokenizer_config, a file)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    compiled = env.from_string(template)

    def render(messages: list[dict[str, str]]) -> str:
        return compiled.render(messages=messages, bos_token=bos_token, eos_token=eos_token,
                               add_generation_prompt=True)

    return render

"""The judge stage: scoring arithmetic, parser fuzzing, prompts on shipped tasks, the
confidence fallback, a tiny in-process transformers model, and the bundled llama.cpp judge."""
from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from conftest import SMOL_TEMPLATE
from hypothesis import given, settings
from hypothesis import strategies as st

from robo_prm.judge import ConfidentJudge, Judge, JudgeConfig, Scored, TransformersConfig, make_judge
from robo_prm.judge.confident import merge_hazards
from robo_prm.judge.parse import match_hazards, parse_answer
from robo_prm.judge.prompt import build_prompt, chatml, jinja_renderer, load_template, scene_text, template_names
from robo_prm.judge.scoring import Calibrator, digit_ids, digit_probs, summarize, vote_histogram, yes_no_ids
from robo_prm.envs.task import load_task, shipped_tasks
from robo_prm.types import HazardReport, SceneDescription

torch.set_num_threads(1)

SCENES = [
    SceneDescription("The gripper is open 10 cm above the hammer. The hammer lies 3 cm from the front edge of the table. "
                     "Milestones reached: 0 of 2.", ("near_edge(hammer)",), 0, 2, hazards=("tool_near_edge",)),
    SceneDescription("The hammer lies on the floor in front of the table. The gripper is open above the front edge. "
                     "Milestones reached: 1 of 2.", ("off_table(hammer)",), 1, 2, hazards=("tool_fell",)),
    SceneDescription("The hammer lies in the middle of the table. The gripper is closed 4 cm from it. "
                     "Milestones reached: 2 of 2.", ("in_zone(hammer, middle)",), 2, 2, rule_progress=1.0),
]


@pytest.fixture(scope="module")
def task():
    return load_task("push_tool_from_edge")


# ---- scoring arithmetic ----------------------------------------------------------------
def test_expected_score_on_known_logits():
    ids = list(range(100, 110))  # digit tokens inside a 200-token vocabulary
    logits = np.full(200, -1e9)
    logits[ids[7]] = 0.0
    p, mass = digit_probs(logits, ids)
    progress, conf = summarize(p, mass)
    assert progress == pytest.approx(7 / 9) and conf == pytest.approx(1.0)
    assert 1 + 9 * progress == pytest.approx(8.0)  # the method's 1–10 scale

    logits = np.full(200, -1e9)
    logits[ids] = 0.0
    logits[5] = 0.0  # one non-digit token with as much mass as each digit
    p, mass = digit_probs(logits, ids)
    progress, conf = summarize(p, mass)
    assert progress == pytest.approx(0.5)  # E[uniform 0..9] = 4.5 → 4.5 / 9
    assert mass == pytest.approx(10 / 11)
    assert conf == pytest.approx(0.3 * 10 / 11)  # median 4: P(3..5) = 0.3, times the digit share


ALL_HAZARDS = ["tool_near_edge", "tool_fell"]  # push_tool_from_edge


def test_confidence_is_agreement_around_the_median():
    p = np.zeros(10)
    p[[2, 8]] = 0.5  # a split vote: half the samples at 2, half at 8
    progress, conf = summarize(p, 1.0)
    assert progress == pytest.approx(5 / 9) and conf == pytest.approx(0.5)
    p = np.array([0, 0, 0, 0, 0.25, 0.5, 0.25, 0, 0, 0])
    assert summarize(p, 0.8) == (pytest.approx(5 / 9), pytest.approx(0.8))
    assert summarize(np.zeros(10), 1.0) == (0.0, 0.0)
    assert summarize(np.full(10, np.nan), np.nan) == (0.0, 0.0)


def _word_tokenizer(space_joined: bool):
    """A fake tokenizer: words, with either ' 7'-style tokens or a separate ' ' token."""
    vocab: dict[str, int] = {}

    def tok(text: str) -> list[int]:
        out, i = [], 0
        pieces = []
        for word in text.split(" "):
            pieces += ([" " + word] if space_joined else [" ", word]) if pieces or i else [word]
            i += 1
        for p in pieces:
            if p:
                out.append(vocab.setdefault(p, len(vocab)))
        return out

    return tok, vocab


@pytest.mark.parametrize("space_joined", [True, False])
def test_digit_tokens_follow_the_tokenizer(space_joined):
    tok, vocab = _word_tokenizer(space_joined)
    tail, ids = digit_ids(tok, "Score:")
    names = {v: k for k, v in vocab.items()}
    if space_joined:  # " 7" is one token: read after "Score:"
        assert [names[t] for t in tail] == ["Score:"] and [names[i] for i in ids] == [f" {d}" for d in range(10)]
    else:  # " ", "7": the space joins the prompt, "7" is read
        assert [names[t] for t in tail] == ["Score:", " "] and [names[i] for i in ids] == [str(d) for d in range(10)]
    head, yes, no = yes_no_ids(tok, "Answer:")
    assert len(yes) == 2 and len(no) == 2 and not set(yes) & set(no)  # yes/Yes vs no/No


def test_votes_and_calibrator(tmp_path):
    hist, share = vote_histogram([7, None, 8])
    assert share == pytest.approx(2 / 3) and hist[7] == hist[8] == 0.5
    assert vote_histogram([None, None]) is None
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"x": [0, 0.5, 1], "y": [0, 0.2, 1]}))
    cal = Calibrator.load(path)
    assert cal(0.25) == pytest.approx(0.1) and cal(2.0) == 1.0


# ---- parser ------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.binary(), st.none(), st.integers(), st.lists(st.text())))
def test_parser_never_raises_and_stays_in_range(text):
    a = parse_answer(text)
    assert a.score is None or (isinstance(a.score, int) and 0 <= a.score <= 9)
    assert (a.score is None) == (a.progress is None)
    assert a.progress is None or (math.isfinite(a.progress) and 0.0 <= a.progress <= 1.0)
    assert all(isinstance(h, str) and h for h in a.hazards)


_garbage = st.text(alphabet=st.characters(blacklist_characters="sScCoOrReE0123456789"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(_garbage, st.integers(0, 9), _garbage, st.sampled_from(["Score: {}", "score={}", "SCORE - {}", "Score:{}"]))
def test_parser_finds_a_digit_score_in_garbage(before, digit, after, fmt):
    a = parse_answer(before + "\n" + fmt.format(digit) + "\n" + after)
    assert a.score == digit and a.progress == pytest.approx(digit / 9)


@pytest.mark.parametrize("text, score, progress", [
    ("Score: 7/10", 6, 6 / 9), ("Score: 10 out of 10", 9, 1.0), ("score 1/10", 0, 0.0), ("Score: 3/4", 7, 0.75),
    ("Score: 75%", 7, 0.75), ("Score: seven", 7, 7 / 9), ("Score: 10", 9, 1.0), (" 4\nReason: ok", 4, 4 / 9),
    ("Score: 4711", None, None), ("The gripper is 10 cm above it.", None, None), ("", None, None),
    ("Score: 8/0", None, None),
])
def test_parser_scales(text, score, progress):
    a = parse_answer(text)
    assert a.score == score
    assert (a.progress is None) if progress is None else a.progress == pytest.approx(progress)


def test_parser_reason_and_hazards():
    a = parse_answer("Score: 3\nReason:  the hammer is   close\n to the edge\nHazards: tool near edge, None; tool_fell.")
    assert a.reason == "the hammer is close to the edge"
    assert a.hazards == ("tool near edge", "tool_fell")
    known = {"tool_near_edge": "the hammer lies near an edge", "tool_fell": "the hammer fell"}
    assert match_hazards(a.hazards + ("unicorns",), known) == ("tool_near_edge", "tool_fell")
    assert parse_answer("Score: 3\nHazards: none").hazards == ()


# ---- prompts -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", shipped_tasks())
@pytest.mark.parametrize("render", [chatml, jinja_renderer(SMOL_TEMPLATE)], ids=["chatml", "jinja"])
def test_templates_fill_with_shipped_task(name, render):
    task = load_task(name)
    p = build_prompt(task.text, render)
    s = task.spec
    for text in [s.background.strip(), s.goal.strip(), *s.dimensions, *(h.text for h in s.hazards)]:
        assert text in p.prefix
    assert "{" not in p.prefix.replace(s.background, "")  # every field filled
    scene = SCENES[0]
    full = p.score_prompt(scene)
    assert full.startswith(p.prefix) and full.endswith("Score:")
    assert full.index(scene.text) > len(p.prefix) - 1  # the scene comes after the whole task part
    assert scene.text not in p.prefix and "Score: <one digit" in p.prefix
    assert set(p.hazard_tails) == {h.name for h in s.hazards}
    for h in s.hazards:
        assert h.text in p.hazard_tails[h.name] and p.hazard_tails[h.name].endswith("Answer:")
    assert all(t.endswith(f"Score: {d}\nReason:") for d, t in enumerate(p.reason_tails))


def test_every_template_file_is_used(monkeypatch, task):
    """Building a task's prompt (with hazards) and a scene's text loads every .txt in prompts/: no
    template file is dead, and no code asks for one that is not there."""
    from robo_prm.judge import prompt as prompt_mod

    loaded = []

    def recording(name):
        loaded.append(name)
        return load_template(name)

    monkeypatch.setattr(prompt_mod, "load_template", recording)
    build_prompt(task.text, chatml)
    prompt_mod.scene_text(SCENES[0])
    assert set(loaded) == set(template_names())
    assert load_template("score_answer") == "Score:"
    assert scene_text(SCENES[0]) == SCENES[0].text


# ---- rules and the confidence fallback ---------------------------------------------------
def test_rules_judge(task):
    j = make_judge(JudgeConfig(backend="rules"))
    a, b, c = j.judge(task.text, SCENES)
    assert (a.progress, b.progress, c.progress) == (0.0, 0.5, 1.0)  # milestones, milestones, rule_progress
    assert a.hazards == (HazardReport("tool_near_edge", 0.5, 1.0),) and b.hazards[0].severity == 1.0
    assert a.confidence == 1.0 and not a.fallback and a.reason is None
    assert "tool_fell" in j.judge(task.text, SCENES[1:2], explain=True)[0].reason
    text_only = SceneDescription("A hammer.", ())
    assert j.judge(task.text, [text_only])[0].progress == 0.0
    assert j.stats()["calls"] == 5 and j.stats()["fallbacks"] == 0
    assert "from the simulator" in j.judge(task.text, SCENES[2:3], explain=True)[0].reason
    seen = j.judge(task.text, [dataclasses.replace(SCENES[2], source="pixels")], explain=True)[0].reason
    assert "camera frame" in seen and "simulator state" in seen and "from the simulator" not in seen  # pixels mode says so
    assert isinstance(j, Judge) and j.judge(task.text, []) == []


def test_openai_top_logprobs_skip_a_lone_space():
    from robo_prm.judge.backends.openai import OpenAIBackend

    lp = {"tokens": [" ", "7"], "top_logprobs": [{" ": -0.1, "7": -2.5}, {"7": math.log(0.6), "8": math.log(0.3)}]}
    top = OpenAIBackend._top({"logprobs": lp}, skip_space=True)
    assert top == {"7": pytest.approx(0.6), "8": pytest.approx(0.3)}
    assert OpenAIBackend._top({"logprobs": None}, skip_space=True) is None
    assert OpenAIBackend._top({}, skip_space=False) is None


class _Fixed:
    """A test backend answering with a fixed distribution (or raising)."""

    name = "fixed"

    def __init__(self, digits=None, hazards=None, fail=False):
        self.digits, self.hazards, self.fail = digits, hazards or {}, fail
        self.closed = False
        self.calls = 0

    def score(self, task, scenes, hazards, explain):
        self.calls += 1
        if self.fail:
            raise ConnectionError("server gone")
        asked = {k: v for k, v in self.hazards.items() if k in hazards}
        return [Scored(self.digits, 1.0, asked, "llm says" if explain else None, 5.0)
                for _ in scenes]

    def close(self):
        self.closed = True


def test_low_confidence_falls_back_to_rules_and_is_counted(task):
    sure = np.eye(10)[6]
    j = ConfidentJudge(_Fixed(sure), JudgeConfig(confidence_threshold=1.01, fallback="milestones_only"))
    out = j.judge(task.text, SCENES)
    assert all(o.fallback for o in out) and [o.progress for o in out] == [0.0, 0.5, 1.0]
    assert j.stats()["fallbacks"] == 3 and j.stats()["calls"] == 3 and j.stats()["mean_latency_ms"] > 0
    j = ConfidentJudge(_Fixed(sure), JudgeConfig(confidence_threshold=0.7, fallback="milestones_only"))
    out = j.judge(task.text, SCENES)
    assert not any(o.fallback for o in out) and out[0].progress == pytest.approx(6 / 9) and out[0].confidence == 1.0
    assert j.stats()["fallbacks"] == 0


def test_backend_error_falls_back_without_raising(task, caplog):
    backend = _Fixed(fail=True)
    j = ConfidentJudge(backend, JudgeConfig(hazards_from="llm"))
    out = j.judge(task.text, SCENES, explain=True)
    assert all(o.fallback for o in out) and out[1].hazard_names() == ("tool_fell",)  # rules stand in for the LLM
    assert "LLM unavailable" in out[0].reason
    assert "server gone" in caplog.text and j.stats()["errors"] == 1
    j.close()
    assert backend.closed


@pytest.mark.parametrize("mode, expected", [
    ("llm", {"tool_near_edge": 0.2, "tool_fell": 0.9}),
    ("rules", {"tool_near_edge": 1.0}),
    ("union", {"tool_near_edge": 1.0, "tool_fell": 0.9}),
    ("auto", {"tool_near_edge": 1.0}),  # both hazards have simulator checks: the LLM is not asked
])
def test_hazards_from(task, mode, expected):
    j = ConfidentJudge(_Fixed(np.eye(10)[3], {"tool_near_edge": 0.2, "tool_fell": 0.9}), JudgeConfig(hazards_from=mode))
    [out] = j.judge(task.text, SCENES[:1])
    assert {h.name: h.probability for h in out.hazards} == expected
    assert all(h.severity == task.text.severity(h.name) for h in out.hazards)


def test_auto_asks_the_llm_only_about_hazards_without_a_check(task):
    from robo_prm.judge.confident import hazards_to_ask

    spec = copy.deepcopy(task.spec)
    spec.hazards[1].check = None  # tool_fell now exists only in words
    from robo_prm.envs.task import Task

    words_only = Task(spec)
    assert hazards_to_ask(words_only.text, "auto") == ["tool_fell"] and hazards_to_ask(words_only.text, "union") == ["tool_near_edge", "tool_fell"]
    j = ConfidentJudge(_Fixed(np.eye(10)[3], {"tool_near_edge": 0.2, "tool_fell": 0.9}), JudgeConfig(hazards_from="auto"))
    [out] = j.judge(words_only.text, SCENES[:1])
    assert {h.name: h.probability for h in out.hazards} == {"tool_near_edge": 1.0, "tool_fell": 0.9}


def test_equal_scene_text_reuses_the_model_answer_but_not_the_rules(task):
    backend = _Fixed(np.eye(10)[6])
    j = ConfidentJudge(backend, JudgeConfig(confidence_threshold=1.01, fallback="milestones_only"))
    a = SceneDescription(text="same words", facts=(), rule_progress=0.2)
    b = SceneDescription(text="same words", facts=(), rule_progress=0.7)
    out = j.judge(task.text, [a]) + j.judge(task.text, [b])
    assert backend.calls == 1 and j.stats()["answer_cache_hits"] == 1
    assert [o.progress for o in out] == [0.2, 0.7]  # the fallback still reads each state


def test_merge_hazards_keeps_the_higher_belief():
    llm = (HazardReport("a", 0.5, 0.9), HazardReport("b", 0.5, 0.1))
    rules = (HazardReport("b", 0.5, 1.0),)
    assert {h.name: h.probability for h in merge_hazards(llm, rules, "union")} == {"a": 0.9, "b": 1.0}


def test_config_defaults_are_the_product_defaults():
    cfg = JudgeConfig()
    assert (cfg.backend, cfg.model, cfg.n_threads, cfg.seed, cfg.confidence_threshold, cfg.hazards_from,
            cfg.reason_tokens, cfg.votes) == ("llamacpp", None, 2, 0, 0.7, "auto", 40, 3)
    assert cfg.openai.api_key_env == "OPENAI_API_KEY"
    from robo_prm.config_io import ConfigError, from_dict

    assert from_dict(JudgeConfig, {"backend": "rules", "openai": {"retries": 5}}).openai.retries == 5
    with pytest.raises(ConfigError, match="backend"):
        from_dict(JudgeConfig, {"backend": "gpt"})


# ---- transformers backend on a tiny in-process model ------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tiny_llama):
    return tiny_llama


def test_transformers_backend_expected_score_on_flat_model(task, tiny_model):
    _, flat, n_vocab = tiny_model
    j = make_judge(JudgeConfig(backend="transformers", model=flat, confidence_threshold=0.0, hazards_from="union",
                               hazard_answerer="backend", fallback="none"))  # the model's own score and yes/no answers
    out = j.judge(task.text, SCENES)
    for o in out:  # uniform next-token distribution: E[digit] = 4.5, agreement 0.3, digit share 10/V
        assert o.progress == pytest.approx(0.5, abs=1e-9)
        assert o.confidence == pytest.approx(0.3 * 10 / n_vocab, rel=1e-6)
    # yes/Yes vs no/No under uniform logits: 0.5; the rules' ground truth wins in the union
    assert {h.name: h.probability for h in out[0].hazards} == {"tool_near_edge": 1.0, "tool_fell": pytest.approx(0.5)}
    assert {h.name: h.probability for h in out[1].hazards} == {"tool_near_edge": pytest.approx(0.5), "tool_fell": 1.0}


def test_transformers_backend_matches_a_direct_forward_pass(task, tiny_model):
    folder, _, _ = tiny_model
    j = make_judge(JudgeConfig(backend="transformers", model=folder, confidence_threshold=0.0, hazards_from="union",
                               transformers=TransformersConfig(batch_size=4)))
    b = j.backend
    scored = b.score(task.text, SCENES, hazards=ALL_HAZARDS, explain=False)
    _, prefix, tail, digits, hz = b._task(task.text)
    for scene, s in zip(SCENES, scored):
        ids = torch.tensor([prefix + b.tokenize(scene.text) + tail])
        with torch.no_grad():
            p = torch.softmax(b.model(ids).logits[0, -1].double(), -1).numpy()
        assert np.allclose(s.digits, p[digits] / p[digits].sum(), atol=1e-5)
        assert s.digit_mass == pytest.approx(p[digits].sum(), rel=1e-4)
        assert set(s.hazards) == {"tool_near_edge", "tool_fell"} and all(0 <= v <= 1 for v in s.hazards.values())
    # left padding does not change a row: batch of 3 (different lengths) vs one by one
    one = [b.score(task.text, [sc], hazards=[], explain=False)[0].digits for sc in SCENES]
    assert all(np.allclose(a.digits, o, atol=1e-6) for a, o in zip(scored, one))
    [e] = j.judge(task.text, SCENES[:1], explain=True)
    assert isinstance(e.reason, str) and j.judge(task.text, SCENES[:1])[0].reason is None


def test_transformers_backend_with_lora_adapter_and_calibrator(task, tiny_model, tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    folder, _, _ = tiny_model
    base = AutoModelForCausalLM.from_pretrained(folder)
    torch.manual_seed(1)  # init_lora_weights=False: a non-zero B, so the adapter changes the answers
    lora = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    (tmp_path / "cal.json").write_text(json.dumps({"x": [0, 1], "y": [0, 0.5]}))
    plain = make_judge(JudgeConfig(backend="transformers", model=folder, confidence_threshold=0.0))
    tuned = make_judge(JudgeConfig(backend="transformers", model=folder, confidence_threshold=0.0,
                                   transformers=TransformersConfig(adapter=str(tmp_path / "adapter"),
                                                                   calibrator=str(tmp_path / "cal.json"))))
    a = plain.backend.score(task.text, SCENES[:1], hazards=[], explain=False)[0]
    b = tuned.backend.score(task.text, SCENES[:1], hazards=[], explain=False)[0]
    assert np.abs(a.digits - b.digits).max() > 1e-6
    [j] = tuned.judge(task.text, SCENES[:1])
    assert j.progress == pytest.approx(0.5 * summarize(b.digits, b.digit_mass)[0])


# ---- the real bundled llama.cpp judge ----------------------------------------------------
@pytest.fixture(scope="module")
def bundled():
    pytest.importorskip("llama_cpp")
    j = make_judge(JudgeConfig(n_threads=1, confidence_threshold=0.0, hazards_from="union", finetuned=False))
    yield j
    j.close()


def test_bundled_judge_scores_scenes_deterministically(task, bundled):
    first = bundled.judge(task.text, SCENES)
    second = bundled.judge(task.text, SCENES)
    for a, b in zip(first, second):
        assert 0.0 <= a.progress <= 1.0 and 0.0 <= a.confidence <= 1.0
        assert a.progress == b.progress and a.confidence == b.confidence and a.hazards == b.hazards
        assert a.reason is None and a.backend == "llamacpp"
        assert {h.name for h in a.hazards} == {"tool_near_edge", "tool_fell"}
    assert bundled.stats()["calls"] == 6


def test_prefix_reuse_equals_full_evaluation(task, bundled):
    b = bundled.backend
    tt = b._task(task.text)
    for scene in SCENES:  # splitting the prompt for reuse does not change its tokens
        assert tt.prefix + b.tokenize(scene_text(scene)) + tt.score_tail + [tt.digits[0]] == \
            b.tokenize(tt.prompt.score_prompt(scene) + " 0", bos=True)
    reused = b.score(task.text, SCENES, hazards=ALL_HAZARDS, explain=False)
    b.cfg = dataclasses.replace(b.cfg, prefix_reuse=False)
    try:
        full = b.score(task.text, SCENES, hazards=ALL_HAZARDS, explain=False)
    finally:
        b.cfg = dataclasses.replace(b.cfg, prefix_reuse=True)
    for r, f in zip(reused, full):
        assert np.abs(r.digits - f.digits).max() < 1e-4 and abs(r.digit_mass - f.digit_mass) < 1e-4
        assert all(abs(r.hazards[k] - f.hazards[k]) < 1e-4 for k in f.hazards)


def test_switching_tasks_restores_the_saved_prefix(task, bundled):
    other = load_task("reach_tool")
    before = bundled.backend.score(task.text, SCENES[:1], hazards=[], explain=False)[0].digits
    bundled.backend.score(other.text, SCENES[:1], hazards=[], explain=False)  # evicts the prefix from the context
    after = bundled.backend.score(task.text, SCENES[:1], hazards=[], explain=False)[0].digits
    assert np.abs(before - after).max() < 1e-4


def test_bundled_judge_explains_only_on_request(task, bundled):
    [j] = bundled.judge(task.text, SCENES[:1], explain=True)
    assert isinstance(j.reason, str) and "\n" not in j.reason
    [k] = bundled.judge(task.text, SCENES[:1])
    assert k.reason is None and k.progress == j.progress


@pytest.mark.slow  # loads the GGUF into transformers (~20-30 s, 1.5 GB): run with -m slow
def test_transformers_on_the_bundled_gguf_agrees_with_llamacpp(task, bundled):
    """One prompt for every backend: the same model read by two backends gives close answers
    (llama.cpp runs Q4_1 weights with 8-bit activations, transformers the fp32 dequantised ones)."""
    pytest.importorskip("gguf")
    hf = make_judge(JudgeConfig(backend="transformers", confidence_threshold=0.0, finetuned=False))
    a = hf.backend.score(task.text, SCENES, hazards=ALL_HAZARDS, explain=False)
    b = bundled.backend.score(task.text, SCENES, hazards=ALL_HAZARDS, explain=False)
    for x, y in zip(a, b):
        assert np.abs(x.digits - y.digits).max() < 0.05 and abs(x.digit_mass - y.digit_mass) < 0.05
        assert all(abs(x.hazards[k] - y.hazards[k]) < 0.05 for k in y.hazards)
    hf.close()


def test_default_judge_is_the_shipped_fine_tuned_one(tmp_path, monkeypatch):
    from robo_prm.judge import resolve_finetuned

    monkeypatch.setenv("ROBO_PRM_CACHE", str(tmp_path))
    cfg = resolve_finetuned(JudgeConfig())
    assert cfg.model.endswith(".gguf") and "lora" in cfg.model and cfg.transformers.calibrator.endswith("judge_calibrator.json")
    assert resolve_finetuned(JudgeConfig(finetuned=False)).model is None  # the zero-shot bundled model
    assert resolve_finetuned(JudgeConfig(model="/my/model.gguf")).model == "/my/model.gguf"
    hf = resolve_finetuned(JudgeConfig(backend="transformers"))
    assert hf.model is None and hf.transformers.adapter.endswith("judge_lora")


def test_evaluate_judge_zero_shot_row_is_the_base_model():
    # A None model with the default finetuned=True resolves to the shipped fine-tuned judge: the
    # held-out table's zero-shot row once measured the fine-tuned model this way.
    from robo_prm.finetune.cli import zero_shot_judge_config
    from robo_prm.judge import resolve_finetuned

    cfg = resolve_finetuned(zero_shot_judge_config(threads=1))
    assert cfg.model is None and cfg.transformers.calibrator is None and cfg.confidence_threshold == 0.0


def test_tidy_reason_drops_greedy_loops():
    from robo_prm.judge.parse import tidy_reason

    loop = ("The gripper is moving fast and is not stopping. The task is not finished. The task is not finished. "
            "The task is not finished. The task is not finished. The task is not finished")
    assert tidy_reason(loop) == "The gripper is moving fast and is not stopping. The task is not finished."
    assert tidy_reason("The hammer is near. The task") == "The hammer is near. The task"  # a new sentence cut short stays
    assert tidy_reason("Close to the hammer. Close to the") == "Close to the hammer."
    assert tidy_reason("No loop here, one sentence") == "No loop here, one sentence"
    assert tidy_reason(None) is None and tidy_reason("") == ""

"""The score head (judge.score_head): the hidden state recovered from the logits is llama.cpp's own, the folded first
layer gives the head's answer, `robo-prm finetune-head` fits a head that orders its labels, and the judge uses it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from robo_prm.judge.score_head import HiddenFromLogits, ScoreHead


def _random_head(rng, hidden_size: int, hidden: int) -> ScoreHead:
    widths = [hidden_size, *([hidden] if hidden else []), 10]
    w = {"mean": rng.normal(size=hidden_size).astype(np.float32),
         "std": rng.uniform(0.5, 2.0, size=hidden_size).astype(np.float32)}
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        w[f"w{i}"], w[f"b{i}"] = rng.normal(size=(b, a)) / np.sqrt(a), rng.normal(size=b)
    return ScoreHead(w, {"kind": "score_head"})


@pytest.mark.parametrize("hidden", [0, 7])
def test_folded_first_layer_reads_the_hidden_state_behind_the_logits(hidden, tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(300, 12)).astype(np.float32)  # vocabulary × hidden, full column rank
    h = rng.normal(size=(5, 12)).astype(np.float32)
    recover = HiddenFromLogits(w)
    np.testing.assert_allclose(recover(w @ h[0]), h[0], atol=1e-4)
    head = _random_head(rng, 12, hidden)
    head.save(tmp_path / "head")
    head = ScoreHead.load(tmp_path / "head").bind(recover)
    want = head.digits_from_hidden(h)
    got = np.stack([head.digits(w @ x) for x in h])
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(got.sum(1), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="hidden states of size 12"):
        head.bind(HiddenFromLogits(rng.normal(size=(300, 8)).astype(np.float32)))


def test_missing_or_broken_head_folder_is_a_one_line_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="finetune-head"):
        ScoreHead.load(tmp_path)
    head = _random_head(np.random.default_rng(1), 6, 0)
    head.weights["w0"] = head.weights["w0"][:, :4]  # does not chain from the hidden size
    head.save(tmp_path)
    with pytest.raises(ValueError, match="not a score head"):
        ScoreHead.load(tmp_path)


def test_hidden_state_from_logits_is_llamacpps_embedding():
    llama_cpp = pytest.importorskip("llama_cpp")
    from robo_prm.judge import bundled_model_path
    from robo_prm.judge.backends.llamacpp import extra_buffers
    from robo_prm.judge.score_head import output_matrix

    path = bundled_model_path()
    with extra_buffers(False):
        llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=1, logits_all=False, verbose=False, embedding=True)
    tokens = llm.tokenize(b"The gripper is open, 5 cm from the hammer. Score:", add_bos=True)
    llm.eval(tokens)
    logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).astype(np.float64)
    emb = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_ith(llm._ctx.ctx, -1), shape=(llm.n_embd(),)).copy()
    llm.close()
    h = HiddenFromLogits(output_matrix(path))(logits)
    assert h.shape == emb.shape and np.corrcoef(h, emb)[0, 1] > 0.999  # up to the 8-bit quantization of h


TASK = {"background": "A hammer lies on the table.", "goal": "Bring the open gripper to the hammer.",
        "dimensions": ["how close the gripper is to the hammer"], "hazards": []}


def _labels(path, n_train: int = 24):
    from robo_prm.finetune.labels import Label, write_labels

    labels = []
    for i in range(n_train + 6):
        cm = 2 * (i % 15)
        labels.append(Label(task="reach_words", scene=f"The gripper is open, {cm} cm from the hammer.",
                            target=10.0 - 9.0 * cm / 28, task_text=TASK, split="train" if i < n_train else "heldout",
                            episode=f"e{i // 15}", step=i % 15))
    write_labels(labels, path)
    return labels


@pytest.fixture(scope="module")
def fitted_head(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    from robo_prm.finetune.score_head import ScoreHeadTrainConfig, train_score_head
    from robo_prm.judge import bundled_model_path

    root = tmp_path_factory.mktemp("head")
    labels = _labels(root / "labels.jsonl")
    cfg = ScoreHeadTrainConfig(labels=str(root / "labels.jsonl"), out=str(root / "head"), model=bundled_model_path(),
                               epochs=60, lr=3e-3)
    info = train_score_head(cfg, echo=lambda *_: None)
    return root / "head", labels, info


def test_finetune_head_fits_its_labels_and_the_judge_reads_with_it(fitted_head, tmp_path, monkeypatch):
    from scipy.stats import spearmanr

    from robo_prm.judge import JudgeConfig, bundled_model_path, make_judge
    from robo_prm.finetune.labels import read_labels
    from robo_prm.types import SceneDescription

    monkeypatch.setenv("ROBO_PRM_CACHE", str(tmp_path))
    folder, labels, info = fitted_head
    assert info["history"][-1]["loss"] < info["history"][0]["loss"]
    assert info["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and (folder / "features.npz").exists()
    cfg = JudgeConfig(model=bundled_model_path(), finetuned=False, score_head=str(folder), n_threads=1, batch_seqs=1,
                      cache_size=0)
    judge = make_judge(cfg)
    train = [lab for lab in read_labels(folder.parent / "labels.jsonl", split="train")]
    got = judge.judge(train[0].judge_text(), [SceneDescription(lab.scene, ()) for lab in train])
    assert spearmanr([j.progress for j in got], [lab.target for lab in train])[0] > 0.8  # it learnt its rows
    cached = list(tmp_path.glob("score_head-*.npy"))
    assert len(cached) == 1  # the folded layer, so the next load skips the output matrix
    again = make_judge(cfg).judge(train[0].judge_text(), [SceneDescription(lab.scene, ()) for lab in train])
    assert [j.progress for j in again] == [j.progress for j in got]
    plain = make_judge(dataclasses.replace(cfg, score_head="none"))
    other = plain.judge(train[0].judge_text(), [SceneDescription(lab.scene, ()) for lab in train[:3]])
    assert [j.progress for j in other] != [j.progress for j in got[:3]]  # "none": the LLM's own digits


def test_a_prompt_seen_before_is_read_once(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    from robo_prm.finetune.score_head import features
    from robo_prm.judge import bundled_model_path
    from robo_prm.judge.backends.llamacpp import LlamaCppBackend

    labels = _labels(tmp_path / "labels.jsonl")[:18]
    calls, read = [], LlamaCppBackend.score_logits
    monkeypatch.setattr(LlamaCppBackend, "score_logits", lambda self, *a: calls.append(1) or read(self, *a))
    h, digits = features(labels, bundled_model_path())
    assert len(calls) == 15  # 18 labels, 3 of them a state visited again (the same task text and scene)
    assert np.array_equal(h[15], h[0]) and np.array_equal(digits[17], digits[2]) and not np.array_equal(h[1], h[0])


def test_a_grown_label_set_reads_only_its_new_prompts(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    from robo_prm.finetune.score_head import features
    from robo_prm.judge import bundled_model_path
    from robo_prm.judge.backends.llamacpp import LlamaCppBackend

    labels = _labels(tmp_path / "labels.jsonl")[:18]
    calls, read = [], LlamaCppBackend.score_logits
    monkeypatch.setattr(LlamaCppBackend, "score_logits", lambda self, *a: calls.append(1) or read(self, *a))
    cache = tmp_path / "features.npz"
    first, _ = features(labels[:10], bundled_model_path(), cache=cache)
    assert len(calls) == 10
    grown, _ = features(labels, bundled_model_path(), cache=cache)
    assert len(calls) == 15 and np.array_equal(grown[:10], first)  # 5 new prompts; 3 rows repeat earlier ones
    features(labels, bundled_model_path(), cache=cache)
    assert len(calls) == 15  # the same set: all from the cache


def test_a_head_trained_with_the_judges_numerical_noise(tmp_path):
    pytest.importorskip("llama_cpp")
    from robo_prm.finetune.score_head import ScoreHeadTrainConfig, train_score_head
    from robo_prm.judge import bundled_model_path

    _labels(tmp_path / "labels.jsonl")
    cfg = ScoreHeadTrainConfig(labels=str(tmp_path / "labels.jsonl"), out=str(tmp_path / "head"), model=bundled_model_path(),
                               epochs=30, lr=3e-3, noise=2.0, noise_prompts=16)
    info = train_score_head(cfg, echo=lambda *_: None)
    std = np.load(tmp_path / "head" / "noise.npz")["std"]
    h = np.load(tmp_path / "head" / "features.npz")["h"]
    # batches round the hidden state otherwise than one prompt at a time: small against its spread, not zero
    assert std.shape == (h.shape[1],) and 0 < std.mean() < 0.5 * h.std(0).mean()
    assert info["config"]["noise"] == 2.0 and info["history"][-1]["loss"] < info["history"][0]["loss"]


def test_score_head_config_errors(fitted_head, tmp_path):
    from robo_prm.judge import JudgeConfig, bundled_model_path, make_judge

    with pytest.raises(ValueError, match="judge.score_head"):
        make_judge(JudgeConfig(model=bundled_model_path(), finetuned=False, score_head=str(tmp_path), n_threads=1))
    with pytest.raises(ValueError, match="judge.score_head reads llama.cpp"):
        make_judge(JudgeConfig(backend="openai", score_head=str(fitted_head[0])))


def test_the_shipped_head_belongs_to_the_shipped_judge():
    from pathlib import Path

    from robo_prm.judge import JudgeConfig, resolve_finetuned
    from robo_prm.judge.score_head import shipped_score_head_folder

    cfg = resolve_finetuned(JudgeConfig())
    assert cfg.score_head == str(shipped_score_head_folder())
    head = ScoreHead.load(cfg.score_head)
    assert head.info["model"] == Path(cfg.model).name  # fitted to the merged fine-tuned GGUF's hidden states
    assert head.llm_share == 0.0 and head.hidden_size == 576
    assert resolve_finetuned(JudgeConfig(score_head="none")).score_head == "none"
    assert resolve_finetuned(JudgeConfig(finetuned=False)).score_head is None  # the zero-shot model has no head


def test_row_weights_balance_tasks_and_weigh_policy_rows():
    from types import SimpleNamespace

    from robo_prm.finetune.score_head import row_weights

    rows = [SimpleNamespace(task="a", source="scripted")] * 2 + [SimpleNamespace(task="a", source="policy")] * 2 + \
        [SimpleNamespace(task="b", source="scripted")] * 4 + [SimpleNamespace(task="c", source="scripted")]
    train = np.array([True] * 8 + [False])
    even = row_weights(rows, train)
    assert even[:4].sum() == pytest.approx(even[4:8].sum()) and even[8] == 0.0 and even[train].mean() == pytest.approx(1)
    heavy = row_weights(rows, train, policy_weight=4.0)
    assert heavy[2] == pytest.approx(4 * heavy[0]) and heavy[:4].sum() > heavy[4:8].sum()

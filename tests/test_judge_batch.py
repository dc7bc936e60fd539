"""Batched judging gives the one-at-a-time answers: llama.cpp's multi-sequence batches (on an f32
model cut from the bundled GGUF, where only the kernels' summation order differs, and on the shipped
Q4 model within the tolerance its 8-bit activations leave), the transformers backend with its
prefix KV cache, and the token tree the llama.cpp batches are built from."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from robo_prm.envs.task import load_task
from robo_prm.judge import JudgeConfig, bundled_model_path, make_judge
from robo_prm.judge.backends.llama_batch import TokenTree
from robo_prm.types import SceneDescription

HAZARDS = ["tool_near_edge", "tool_fell"]
WORDS = ["open", "closed", "above", "beside", "far from", "touching"]
SCENES = [SceneDescription(f"The gripper is {WORDS[i % 6]} {3 + i} cm from the hammer. The hammer lies {i % 4 + 2} cm "
                           f"from the front edge of the table.", ()) for i in range(13)]
SCENES.insert(3, SCENES[2])  # the same prompt twice in one batch


def test_token_tree_shares_common_starts_and_keeps_parents_first():
    tree = TokenTree.build([[1, 2, 3], [1, 2, 4], [1, 2, 3], [5]])
    assert tree.tokens == [1, 2, 3, 4, 5] and tree.depth == [0, 1, 2, 2, 0]
    assert tree.seqs == [[1, 2, 3], [1, 2, 3], [1, 3], [2], [4]]
    assert tree.ends == [2, 3, 2, 4]  # equal prompts end on one node
    with pytest.raises(ValueError):
        TokenTree.build([[1], []])


@pytest.fixture(scope="module")
def f32_gguf(tmp_path_factory):
    """The bundled SmolLM2 GGUF cut to its first 2 blocks, their weights dequantised to f32 (its tokenizer,
    template and Q8 embedding kept): no 8-bit activations inside the blocks."""
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("llama_cpp")
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(bundled_model_path())
    out = tmp_path_factory.mktemp("gguf") / "smollm2-2blocks-f32.gguf"
    writer = gguf.GGUFWriter(str(out), "llama", endianess=reader.endianess)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        if f.name == "llama.block_count":
            writer.add_uint32(f.name, 2)
            continue
        vtype = f.types[0]
        writer.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)
    data = {}
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= 2:
            continue
        if t.name.startswith("blk."):
            a = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
            data[t.name] = (a, gguf.GGMLQuantizationType.F32)
        else:
            data[t.name] = (t.data, t.tensor_type)
        a, qtype = data[t.name]
        writer.add_tensor_info(t.name, a.shape, a.dtype, a.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for a, _ in data.values():
        writer.write_tensor_data(a, tensor_endianess=reader.endianess)
    writer.close()
    return str(out)


def _pair(model: str | None, finetuned: bool = False, score_head: str | None = None):
    cfg = JudgeConfig(model=model, finetuned=finetuned, n_threads=1, cache_size=0, confidence_threshold=0.0,
                      score_head=score_head)
    return (make_judge(dataclasses.replace(cfg, batch_seqs=1)).backend,
            make_judge(dataclasses.replace(cfg, batch_seqs=16)).backend)


def _compare(one, many, task, hazards, tol, scenes=SCENES):
    alone = one.score(task, scenes, hazards, explain=False)
    many.score(task, scenes[:1], [], explain=False)  # the context holds something else first
    batched = many.score(task, scenes, hazards, explain=False)
    for a, b in zip(alone, batched):
        assert np.abs(a.digits - b.digits).max() < tol and abs(a.digit_mass - b.digit_mass) < tol
        assert a.hazards.keys() == b.hazards.keys() and all(abs(a.hazards[k] - b.hazards[k]) < tol for k in a.hazards)
    np.testing.assert_array_equal(batched[2].digits, batched[3].digits)  # one tree node, one answer
    return alone, batched


def test_llamacpp_batches_equal_one_at_a_time_on_an_f32_model(f32_gguf):
    task = load_task("push_tool_from_edge").text
    one, many = _pair(f32_gguf)
    assert many.llm.context_params.n_seq_max == 17 and one.llm.context_params.n_seq_max == 1
    # 14 scenes × 3 prompts = 42 prompts: three batches of 16, trees past n_batch (512) decoded in pieces
    _compare(one, many, task, HAZARDS, tol=1e-4)
    _compare(one, many, task, [], tol=1e-4)
    # after a batch the context holds the prefix alone: the one-prompt path answers as before
    [before] = one.score(task, SCENES[5:6], [], explain=False)
    [after] = many.score(task, SCENES[5:6], [], explain=False)
    assert np.abs(before.digits - after.digits).max() < 1e-4


def test_llamacpp_batches_follow_one_at_a_time_on_the_shipped_model():
    """The shipped judge (Q4 weights, 8-bit activations: summation-order bits become small differences)."""
    pytest.importorskip("llama_cpp")
    task = load_task("push_tool_from_edge").text
    progress = lambda s: float(np.dot(s.digits, np.arange(10)) / 9)  # noqa: E731
    one, many = _pair(None, finetuned=True, score_head="none")  # the LLM's own digit tokens
    alone, batched = _compare(one, many, task, HAZARDS[:1], tol=0.08, scenes=SCENES[:6])
    assert max(abs(progress(a) - progress(b)) for a, b in zip(alone, batched)) < 0.04
    # the score head reads the whole hidden state, whose 8-bit quantization differs a little more between the two
    # paths than the ten digit rows show (digit probabilities up to ~0.12 apart); the progress stays as close
    one, many = _pair(None, finetuned=True)
    alone = one.score(task, SCENES[:6], HAZARDS[:1], explain=False)
    batched = many.score(task, SCENES[:6], HAZARDS[:1], explain=False)
    assert one.score_head is not None and many.score_head is not None
    assert max(abs(progress(a) - progress(b)) for a, b in zip(alone, batched)) < 0.04


def test_equal_texts_in_one_call_are_scored_once():
    from robo_prm.judge import ConfidentJudge, Scored

    class Counting:
        name, asked = "counting", []

        def score(self, task, scenes, hazards, explain):
            self.asked.append([s.text for s in scenes])
            return [Scored(np.eye(10)[len(s.text) % 10], 1.0) for s in scenes]

        def close(self):
            pass

    task = load_task("push_tool_from_edge").text
    judge = ConfidentJudge(Counting(), JudgeConfig(confidence_threshold=0.0))
    a, b, c = SCENES[0], SCENES[1], dataclasses.replace(SCENES[0], milestones_reached=1)  # c: a's text, another state
    out = judge.judge(task, [a, b, c, a])
    assert judge.backend.asked == [[a.text, b.text]]
    assert out[0].progress == out[2].progress == out[3].progress != out[1].progress


def test_transformers_batches_with_the_prefix_cache_equal_whole_prompts_one_at_a_time(tiny_llama):
    from robo_prm.judge import TransformersConfig

    task = load_task("push_tool_from_edge").text
    cfg = JudgeConfig(backend="transformers", model=tiny_llama[0], confidence_threshold=0.0, cache_size=0)
    batched = make_judge(dataclasses.replace(cfg, transformers=TransformersConfig(batch_size=16))).backend
    got = batched.score(task, SCENES, HAZARDS, explain=False)
    _, prefix, tail, digits, hz = batched._task(task)
    for scene, s in zip(SCENES, got):  # each prompt whole, alone, no cache
        head = prefix + batched.tokenize(scene.text)
        rows = [head + tail] + [head + hz[name][0] for name in HAZARDS]
        logits = np.concatenate([batched.last_logits([r]) for r in rows])
        p = np.exp(logits[0] - logits[0].max())
        np.testing.assert_allclose(s.digits, p[digits] / p[digits].sum(), atol=1e-6)
        for name, row in zip(HAZARDS, logits[1:]):
            q = np.exp(row - row.max())
            _, yes, no = hz[name]
            assert s.hazards[name] == pytest.approx(q[yes].sum() / (q[yes].sum() + q[no].sum()), abs=1e-6)


COPY_SCENE = ("The gripper is closed around the hammer. The hammer is held 20 cm above the table. It is over the green "
              "tray. The glass cup stands in the middle of the table. Milestones reached: 1 of 5.")


def _whole(logits_after, row, conts):
    """Each continuation's token log-probabilities, every prefix of it evaluated whole and alone."""
    from robo_prm.judge.copy_reason import log_softmax

    return [[log_softmax(logits_after(row + c[:j]))[c[j]] for j in range(len(c))] for c in conts]


def test_llamacpp_copied_reasons_score_every_sentence_as_whole_prompts_do(f32_gguf):
    """reason_mode copy: the sentences' log-probabilities from multi-sequence batches (and one token at a time)
    equal those of each prompt evaluated whole; the reason is made of the scene's sentences."""
    from robo_prm.judge.copy_reason import reason_units

    task = load_task("push_tool_from_edge").text
    one, many = _pair(f32_gguf)
    tt = many._task(task)
    row = tt.prefix + many.tokenize("The hammer lies 5 cm from the front edge of the table. Score: 3\nReason:")
    conts = [many.tokenize(" " + u) for u in reason_units(COPY_SCENE)]
    want = _whole(lambda r: one._eval(one._task(task), r), row, conts)
    for backend in (one, many):
        got = backend._continuations(backend._task(task), row, backend._eval(backend._task(task), row), conts)
        assert [len(g) for g in got] == [len(c) for c in conts]
        # nats; a misread token is off by many. llama.cpp's kernels for different batch sizes round differently by CPU:
        # on an AMD EPYC two unlikely tokens (−11.3, −8.6) differed by 0.1 % (0.009 nats), hence rtol beside atol
        np.testing.assert_allclose(np.concatenate(got), np.concatenate(want), rtol=2e-3, atol=5e-3)
    [s] = many.score(task, [SceneDescription(COPY_SCENE, ())], [], explain=True)
    units = reason_units(COPY_SCENE)
    assert "The hammer is over the green tray." in units
    picked = [u for u in units if u in s.reason]
    assert len(picked) == 2 and " ".join(picked) == s.reason.strip()


def test_transformers_copied_reasons_score_every_sentence_as_whole_prompts_do(tiny_llama):
    from robo_prm.judge.copy_reason import reason_units

    task = load_task("push_tool_from_edge").text
    b = make_judge(JudgeConfig(backend="transformers", model=tiny_llama[0], confidence_threshold=0.0,
                               cache_size=0)).backend
    _, prefix, tail, _, _ = b._task(task)
    row = prefix + b.tokenize("The hammer lies 5 cm from the front edge.") + tail
    conts = [b.tokenize(" " + u) for u in reason_units(COPY_SCENE)]
    want = _whole(lambda r: b.last_logits([r])[0], row, conts)
    np.testing.assert_allclose(np.concatenate(b._continuations(row, conts)), np.concatenate(want), atol=1e-5)
    [s] = b.score(task, [SceneDescription(COPY_SCENE, ())], [], explain=True)
    assert sum(u in s.reason for u in reason_units(COPY_SCENE)) == 2

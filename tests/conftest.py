"""Shared fixtures: tidy envs that are closed after the test (EGL contexts left open
at interpreter exit print errors)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import robo_prm


@pytest.fixture(scope="session")
def load_benchmark():
    """benchmarks/<name>.py as a module (the benchmarks are scripts, not a package)."""
    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"{name}_bench", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return load


@pytest.fixture(autouse=True, scope="session")
def run_key_dir(tmp_path_factory):
    """Run folders are signed with a key (robo_prm/train/trust.py): tests make their own, never one in ~/.config."""
    mp = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("robo_prm_config")
    mp.setenv("ROBO_PRM_CONFIG_DIR", str(folder))  # subprocesses inherit it
    yield folder
    mp.undo()


@pytest.fixture
def make_env():
    """`make_env(task, describe=True, **kwargs)`: robo_prm.make_env behind the describe stage
    (`DescribeWrapper` with the state captioner) unless describe=False; every env made is
    closed at teardown."""
    from robo_prm.describe import DescribeWrapper

    made = []

    def _make(task, describe: bool = True, **kwargs):
        env = robo_prm.make_env(str(task), **kwargs)
        env = DescribeWrapper(env) if describe else env
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close()


SMOL_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}"
                 "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """(folder, flat folder, vocab size): a 2-layer Llama with a byte-level tokenizer (so " 7" is
    " ", "7") and SmolLM2's ChatML template; in the flat copy the final norm is zeroed, so every
    logit is 0."""
    pytest.importorskip("transformers")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {s: i for i, s in enumerate(specials)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>")
    tok.chat_template = SMOL_TEMPLATE
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      bos_token_id=0, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    folder = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    flat = tmp_path_factory.mktemp("tiny_llama_flat")
    with torch.no_grad():
        model.model.norm.weight.zero_()
    model.save_pretrained(flat)
    tok.save_pretrained(flat)
    return str(folder), str(flat), len(vocab)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """40 labelled 64-px frames of reach_tool and place_cup_in_bin (`robo-prm perception collect`), front camera only
    (a one-view model, like those trained before camera views were a choice)."""
    from robo_prm.perception.dataset import CollectConfig, collect

    out = tmp_path_factory.mktemp("frames")
    meta = collect(CollectConfig(tasks=["reach_tool", "place_cup_in_bin"], frames=40, size=64, views=["front"], stride=2,
                                 heldout_every=3, max_steps=20, seed=1), out, progress=False)
    return out, meta


@pytest.fixture(scope="session")
def tiny_two_view_model(tmp_path_factory, tiny_text):
    """A perception folder reading the front and side cameras side by side: 24 48-px frames of reach_tool, 1 epoch."""
    from robo_prm.perception.dataset import CollectConfig, collect
    from robo_prm.perception.train import PerceptionTrainConfig, captioner_defaults, train

    data = tmp_path_factory.mktemp("frames_two_view")
    collect(CollectConfig(tasks=["reach_tool"], frames=24, size=48, views=["front", "side"], stride=2, heldout_every=3,
                          max_steps=12, seed=2), data, progress=False)
    cfg = captioner_defaults(PerceptionTrainConfig(data=str(data), out=str(tmp_path_factory.mktemp("two_view")),
                                                   text_model=tiny_text, epochs=1, batch=8, hidden=32, embed_dim=16))
    return train(cfg, progress=False, command="test")


@pytest.fixture(scope="session")
def tiny_text(tmp_path_factory):
    """A 1-layer BERT with a word-level vocabulary, saved like a sentence-transformers folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = ("the gripper is open closed far from hammer glass cup lies stands in middle of table cm above at very "
             "front back left right edge part blue bin held air reached milestones 0 1 2 3 4 5 10 15 20 30 , .").split()
    folder = tmp_path_factory.mktemp("tiny_bert")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(words) + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tiny_model(tiny_data, tiny_text, tmp_path_factory):
    """A perception folder trained for 2 epochs on tiny_data (`robo-prm perception train-captioner`)."""
    from robo_prm.perception.train import PerceptionTrainConfig, captioner_defaults, train

    data, _ = tiny_data
    out = tmp_path_factory.mktemp("perception")
    cfg = captioner_defaults(PerceptionTrainConfig(data=str(data), out=str(out), text_model=tiny_text, epochs=2, batch=16,
                                                   hidden=32, embed_dim=16))
    return train(cfg, progress=False, command="test")

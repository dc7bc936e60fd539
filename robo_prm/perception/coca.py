"""A CoCa captioner in open_clip, trained in the simulator: frame → the state describer's caption, word for word.

`open_clip.CoCa` unchanged (its causal text tower, its multimodal text decoder, its contrastive latent, its forward
and `open_clip.CoCaLoss`), with two in-domain parts plugged into its extension points:

* the vision tower (`SceneTokens`, assigned to `coca.visual`): EfficientNet-Lite0 (ImageNet weights) cut at
  stride 16, so an 8×8 grid of tokens with a learned position each reaches the decoder's cross-attention — the
  captions are about *where* things are;
* the token ids (`CaptionTokens`): open_clip's BPE tokenizer splits the text, and the ~60 BPE ids that the
  shipped tasks' captions use are renumbered into a compact vocabulary (softmax over ~64 ids, not 49,408), with
  pad 0 / start 1 / end 2 / unknown 3. open_clip's tokenizer lower-cases and spaces out punctuation and digits;
  `restore()` puts the captions' casing and spacing back (tests check the round trip on every collected caption),
  so the judge and its caches read the same text as from the state describer.

A folder holds `coca.safetensors` + `config.json` (CocaConfig, vocabulary) + `manifest.json`.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robo_prm.perception.backbone import Trunk, to_tensor

PAD, SOT, EOT, UNK = 0, 1, 2, 3
WEIGHTS_FILE, CONFIG_FILE, MANIFEST_FILE = "coca.safetensors", "config.json", "manifest.json"


@dataclass
class CocaConfig:
    size: int = 128  # frame width = height
    trunk_blocks: int = 11  # Lite0 blocks kept (11: stride 16, an 8×8 grid at 128 px)
    embed_dim: int = 128  # contrastive latent (CLIP embedding)
    width: int = 192  # text tower, decoder and image tokens
    heads: int = 4
    text_layers: int = 1  # the causal unimodal text tower (its tokens feed the decoder)
    decoder_layers: int = 2  # the multimodal decoder (cross-attends to the image tokens)
    context_length: int = 96  # start + ≤ 78 BPE tokens (tidy_table's longest caption) + end, with room
    bpe_ids: list[int] = field(default_factory=list)  # open_clip BPE ids the captions use; compact id = 4 + index


def restore(text: str) -> str:
    """open_clip's decoded text → the captions' own form: 'the hammer lies 1 0 cm from the front edge .' →
    'The hammer lies 10 cm from the front edge.'"""
    s = " ".join(text.split())
    s = re.sub(r"(?<=\d) (?=\d)", "", s)  # digits are single tokens
    s = re.sub(r" ([.,:;!?])", r"\1", s)
    return re.sub(r"(^|[.!?] )([a-z])", lambda m: m.group(1) + m.group(2).upper(), s)


class CaptionTokens:
    """open_clip's BPE tokenizer over a compact vocabulary of the ids scene captions use."""

    def __init__(self, bpe_ids: list[int], context_length: int = 96):
        from open_clip.tokenizer import SimpleTokenizer

        self.bpe = SimpleTokenizer()
        self.context_length = context_length
        self._set_ids(bpe_ids)

    def _set_ids(self, bpe_ids) -> None:
        self.bpe_ids = list(bpe_ids)
        self.index = {b: i + 4 for i, b in enumerate(self.bpe_ids)}

    @classmethod
    def fit(cls, captions, context_length: int = 96) -> "CaptionTokens":
        """The vocabulary of these captions (open_clip's BPE vocabulary file is read once)."""
        tok = cls([], context_length)
        tok._set_ids(sorted({i for c in captions for i in tok.bpe.encode(str(c))}))
        return tok

    @property
    def vocab_size(self) -> int:
        return len(self.bpe_ids) + 4

    def encode(self, texts) -> torch.Tensor:
        """(B, context_length) long: start, ids, end, pad…; too long a caption is cut (its end token kept)."""
        out = torch.full((len(texts), self.context_length), PAD, dtype=torch.long)
        for r, t in enumerate(texts):
            ids = [SOT] + [self.index.get(b, UNK) for b in self.bpe.encode(str(t))][: self.context_length - 2] + [EOT]
            out[r, : len(ids)] = torch.tensor(ids)
        return out

    def decode(self, ids) -> str:
        bpe = []
        for i in (int(x) for x in ids):
            if i == EOT:
                break
            if i >= 4:
                bpe.append(self.bpe_ids[i - 4])
        return restore(self.bpe.decode(bpe))


class SceneTokens(nn.Module):
    """open_clip vision tower for CoCa: frame → (contrastive latent, 8×8 position-aware tokens)."""

    output_tokens = True

    def __init__(self, cfg: CocaConfig, imagenet: bool = True):
        super().__init__()
        self.trunk = Trunk(cfg.size, cfg.trunk_blocks, imagenet=imagenet)
        n = self.trunk.out_size ** 2
        self.proj = nn.Conv2d(self.trunk.channels, cfg.width, 1)
        self.pos = nn.Parameter(torch.randn(n, cfg.width) * 0.02)
        self.ln = nn.LayerNorm(cfg.width)
        # the latent keeps where things are too: a linear map of the flattened (narrowed) grid, not a pooled vector
        self.narrow = nn.Linear(cfg.width, 32)
        self.latent = nn.Linear(32 * n, cfg.embed_dim)

    def tokens_from(self, fmap: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """From the output of trunk block `start - 1` (the stem's for 0): the rest of the trunk, then the head."""
        x = fmap
        for b in self.trunk.blocks[start:]:
            x = b(x)
        tok = self.ln(self.proj(x).flatten(2).transpose(1, 2) + self.pos)  # (B, 64, width)
        return self.latent(F.gelu(self.narrow(tok)).flatten(1)), tok

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens_from(self.trunk.prefix(images, 0), 0)

    def set_grad_checkpointing(self, enable: bool = True):  # open_clip calls it on every tower
        pass


def build_coca(cfg: CocaConfig, imagenet: bool = True):
    """An `open_clip.CoCa` with the scene vision tower and the compact caption vocabulary."""
    import open_clip

    vocab = len(cfg.bpe_ids) + 4
    text_cfg = dict(context_length=cfg.context_length, vocab_size=vocab, width=cfg.width, heads=cfg.heads,
                    layers=cfg.text_layers, embed_cls=True, output_tokens=True, pad_id=PAD)
    multimodal_cfg = dict(context_length=cfg.context_length, vocab_size=vocab, width=cfg.width, heads=cfg.heads,
                          layers=cfg.decoder_layers)
    # a minimal ViT stands in for the vision config open_clip requires; it is replaced right after
    vision_cfg = dict(image_size=cfg.size, layers=1, width=64, head_width=64, patch_size=cfg.size // 2, output_tokens=True)
    coca = open_clip.CoCa(cfg.embed_dim, multimodal_cfg, text_cfg, vision_cfg, pad_id=PAD)
    coca.visual = SceneTokens(cfg, imagenet=imagenet)
    # open_clip leaves the decoder's output projection as torch.empty (its init_parameters is never called, and
    # pretrained weights overwrite it); training from scratch needs it set
    nn.init.normal_(coca.text_decoder.text_projection, std=cfg.width ** -0.5)
    coca.text.correct_cls_mask = True  # open_clip keeps the legacy (shifted) mask unless told; new weights need no legacy
    return coca


@dataclass
class CocaBundle:
    model: nn.Module
    tokens: CaptionTokens
    cfg: CocaConfig
    folder: Path | None = None
    manifest: dict | None = None

    @torch.no_grad()
    def generate(self, images: torch.Tensor) -> torch.Tensor:
        """Greedy decoding through CoCa's forward: (B, T) ids, start token first. (open_clip's own `generate` needs
        transformers' BeamSearchScorer, which transformers 5 — the judge's dependency — no longer has.)"""
        out = self.model(images)
        latent, embs = out["image_features"], out["image_embs"]
        ids = torch.full((len(images), 1), SOT, dtype=torch.long)
        done = torch.zeros(len(images), dtype=torch.bool)
        for _ in range(self.cfg.context_length - 1):
            logits = self.model(None, ids, image_latent=latent, image_embs=embs, output_labels=False)["logits"][:, -1]
            nxt = logits.argmax(-1).masked_fill(done, PAD)
            ids = torch.cat([ids, nxt[:, None]], 1)
            done |= nxt == EOT
            if bool(done.all()):
                break
        return ids

    def caption(self, frames, batch: int = 64) -> list[str]:
        """uint8 frames (B,S,S,3) or one (S,S,3) → one caption each (greedy)."""
        frames = np.asarray(frames)
        if frames.ndim == 3:
            frames = frames[None]
        self.model.eval()
        out = []
        for i in range(0, len(frames), batch):
            out += [self.tokens.decode(row[1:]) for row in self.generate(to_tensor(frames[i:i + batch]))]
        return out

    @torch.no_grad()
    def encode_image(self, frames, normalize: bool = True) -> torch.Tensor:
        return self.model.encode_image(to_tensor(frames), normalize=normalize)

    @torch.no_grad()
    def encode_text(self, texts, normalize: bool = True) -> torch.Tensor:
        return self.model.encode_text(self.tokens.encode(texts), normalize=normalize)


def save_coca(folder: str | Path, bundle: CocaBundle, manifest: dict | None = None, fp16: bool = True) -> Path:
    """Weights in fp16 by default (half the size; loaded back as fp32)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if fp16 and v.is_floating_point() else v).detach().contiguous()
             for k, v in bundle.model.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps(asdict(bundle.cfg), indent=1))
    if manifest is not None:
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, default=str))
    return folder


def load_coca(folder: str | Path) -> CocaBundle:
    """A folder written by `robo-prm perception train-coca`."""
    from safetensors.torch import load_file

    folder = Path(folder)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).exists():
            raise FileNotFoundError(f"{folder / name}: no such file (a folder written by `robo-prm perception train-coca`)")
    cfg = CocaConfig(**json.loads((folder / CONFIG_FILE).read_text()))
    model = build_coca(cfg, imagenet=False)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in load_file(str(folder / WEIGHTS_FILE)).items()})
    manifest = json.loads((folder / MANIFEST_FILE).read_text()) if (folder / MANIFEST_FILE).exists() else None
    return CocaBundle(model.eval(), CaptionTokens(cfg.bpe_ids, cfg.context_length), cfg, folder, manifest)


LINE = " Milestones reached:"


def with_milestone_line(caption: str, described: str) -> str:
    """`caption`'s sentences with the milestone line of `described` (none where it has none)."""
    body = caption.split(LINE, 1)[0]
    return body + LINE + described.split(LINE, 1)[1] if LINE in described else body


class CocaCaptioner:
    """A `Describer` (robo_prm.describe): the pixel captioner's description with the CoCa caption as its text.

    Hazards, milestones reached, rule progress and the CLIP features stay the perception model's (`base`, a
    PixelCaptioner), and so does the text's milestone line (its predicate heads read milestones better than the
    decoder writes them, docs/BENCHMARKS.md, and the line then agrees with `milestones_reached`). The CoCa model
    writes the names it was trained on (the shipped tasks'), so it is for those tasks."""

    needs_frame = True

    def __init__(self, base, coca: CocaBundle):
        if coca.cfg.size != base.size:
            raise ValueError(f"{coca.folder}: the captioner reads {coca.cfg.size}-px frames, the perception model "
                             f"{base.size}-px ones")
        if "front" not in base.views:
            raise ValueError(f"{coca.folder}: the captioner reads the front camera, the perception model only {base.views}")
        self.base, self.coca = base, coca
        self._front = base.views.index("front")  # the CoCa model reads the front camera's tile of the frame

    @property
    def size(self) -> int:
        return self.base.size

    @property
    def views(self) -> tuple[str, ...]:
        return self.base.views

    def render_frame(self, env) -> np.ndarray:
        return self.base.render_frame(env)

    def describe(self, frames) -> list:
        import dataclasses

        s = self.size
        front = np.asarray(frames)[..., self._front * s:(self._front + 1) * s, :]
        return [dataclasses.replace(d, text=with_milestone_line(c, d.text))
                for d, c in zip(self.base.describe(frames), self.coca.caption(front))]

    def describe_step(self, state, status, frame):
        self.base.check_frame(frame)
        return self.describe(np.asarray(frame)[None])[0]

    def __call__(self, frame):
        return self.describe(np.asarray(frame)[None])[0]

"""The hazard kinds the hazard reader knows, in words: which kind a hazard text is (its route), and other
wordings of a generated hazard for training.

A hazard written by a user ("the stubby screwdriver is about to go over a side of the workbench") has to
reach the reader as the kind it is (edge), whatever its words and names. Two routes, both from MiniLM
sentence embeddings (robo_prm/judge/hazard_reader.py, KindBank):

* the kind bank — the generator's train templates and configs/reader/paraphrases.yaml, filled with neutral
  words ("the object … the table"); a text goes to the kind of its nearest wording. The object's and the
  table's own names then weigh as much as the verb: "the phillips screwdriver is close to an edge of the
  bench", a train template, went to "moved".
* the kind classifier (`fit_kind_classifier`) — a linear softmax over the embedding, fitted on the same
  wordings each filled with many of the generator's *train* object, table and edge words, so the names
  average out and the words that say the kind carry it. Held-out words and templates stay out.
"""
from __future__ import annotations

import random
import string
from pathlib import Path

# generator hazard kind → the reader's kind (a bystander moved is "moved" as much as the object itself)
KIND_OF = {"near_edge": "edge", "named_edge": "named_edge", "fell": "fell", "tipped": "tipped", "disturbed": "moved",
           "bystander_moved": "moved"}
FILLERS = {"obj": "object", "table": "table", "edge": "edge", "bys": "object"}


def reader_yaml(name: str) -> dict:
    """configs/reader/<name>.yaml (packaged as robo_prm.configs)."""
    from importlib import resources

    from robo_prm.config_io import load_yaml

    return load_yaml(Path(str(resources.files("robo_prm.configs") / "reader")) / f"{name}.yaml")


def paraphrases() -> dict[str, list[str]]:
    """configs/reader/paraphrases.yaml: generator hazard kind → extra wordings."""
    return reader_yaml("paraphrases")


def kind_templates() -> dict[str, list[str]]:
    """Each reader kind's wordings with their {obj} / {table} / {edge} / {bys} fields: the generator's train
    templates and the paraphrases."""
    from robo_prm.envs.generate import load_data

    extra = paraphrases()
    out: dict[str, list[str]] = {}
    for kind, templates in load_data()["phrasing"]["hazards"].items():
        texts = [t["text"] for t in templates if t["split"] == "train"] + list(extra.get(kind, []))
        out.setdefault(KIND_OF.get(kind, kind), []).extend(texts)
    return {k: list(dict.fromkeys(v)) for k, v in out.items()}


def kind_bank() -> dict[str, list[str]]:
    """Each reader kind's wordings, neutral fillers."""
    return {k: sorted({t.format(**FILLERS) for t in v}) for k, v in kind_templates().items()}


def train_words() -> dict[str, list[str]]:
    """The generator's train-split words a hazard's fields take (configs/generator/words.yaml)."""
    from robo_prm.envs.generate import load_data

    words = load_data()["words"]
    objects = [w for v in words["objects"].values() for w in v["train"]]
    return {"obj": objects, "bys": objects, "table": list(words["table"]["train"]),
            "edge": [w for v in words["edges"].values() for w in v["train"]]}


def fit_kind_classifier(tokens, fills: int = 12, weight_decay: float = 1e-5, seed: int = 0) -> dict:
    """A softmax over MiniLM sentence embeddings → reader kind, fitted on every kind wording filled `fills`
    times with random train words. Returns reader.json's "kind_classifier": {kinds, weight, bias, accuracy}."""
    import torch

    from robo_prm.judge.hazard_reader import KindBank

    rng = random.Random(seed)
    words = train_words()
    templates = kind_templates()
    kinds = sorted(templates)
    texts, y = [], []
    for i, kind in enumerate(kinds):
        for t in templates[kind]:
            for _ in range(fills):
                texts.append(t.format(**{f: rng.choice(words[f]) for f in template_fields(t)}))
                y.append(i)
    x = KindBank.embed(tokens, texts)
    target = torch.tensor(y)
    torch.manual_seed(seed)
    lin = torch.nn.Linear(x.shape[1], len(kinds))
    opt = torch.optim.LBFGS(lin.parameters(), max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(lin(x), target) + weight_decay * lin.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        accuracy = float((lin(x).argmax(1) == target).float().mean())
    return {"kinds": kinds, "weight": lin.weight.detach().tolist(), "bias": lin.bias.detach().tolist(),
            "texts": len(texts), "accuracy": round(accuracy, 4), "fills": fills, "weight_decay": weight_decay}


class Renamer:
    """Renames the things of a training pair the same way in every text: each train-split word of
    configs/generator/words.yaml (objects, table, edges, middle, bins) found in the texts becomes another
    name of its slot (configs/reader/renames.yaml or the slot's other train words), each thing its own name;
    a share `p` of the calls rename, the rest pass the texts through."""

    def __init__(self, p: float = 0.5, seed: int = 0):
        import re

        from robo_prm.envs.generate import load_data

        self.p, self.rng = p, random.Random(seed)
        words, train = load_data()["words"], train_words()
        known = {"objects": train["obj"], "table": train["table"],
                 **{k: list(v["train"]) for k, v in {**words["places"], **words["edges"]}.items()}}
        extra = reader_yaml("renames")
        self.slot_of = {w.lower(): slot for slot, ws in known.items() for w in ws}
        self.pool = {slot: list(dict.fromkeys(ws + list(extra.get(slot, [])))) for slot, ws in known.items()}
        names = sorted(self.slot_of, key=len, reverse=True)  # "claw hammer" before "hammer"
        self.pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b", re.IGNORECASE)

    def __call__(self, texts: list[str]) -> list[str]:
        if self.rng.random() >= self.p:
            return texts
        found = list(dict.fromkeys(m.lower() for t in texts for m in self.pattern.findall(t)))
        used: set[str] = set()
        new = {}
        for name in found:
            options = [w for w in self.pool[self.slot_of[name]] if w.lower() not in used and w.lower() not in found]
            new[name] = self.rng.choice(options) if options else name
            used.add(new[name].lower())

        def swap(m):
            word = new[m.group(0).lower()]
            return word[0].upper() + word[1:] if m.group(0)[0].isupper() else word

        return [self.pattern.sub(swap, t) for t in texts]


def template_fields(template: str) -> list[str]:
    """The {field} names of a format template, in order."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def template_pattern(template: str):
    """A regex matching the texts `template` makes, each {field} a named group (what filled it)."""
    import re

    rx = re.escape(template)
    for field in template_fields(template):
        rx = rx.replace(re.escape("{" + field + "}"), f"(?P<{field}>.+?)", 1)
    return re.compile(f"^{rx}$")


class Paraphraser:
    """A generated hazard's text in other words: the text is matched against the generator's train templates
    of its kind (the hazard's name, configs/generator/phrasing.yaml) to recover {obj}, {table}, …, and re-worded
    with a random line of configs/reader/paraphrases.yaml. None for a text no train template made."""

    def __init__(self, seed: int = 0):
        from robo_prm.envs.generate import load_data

        self.rng = random.Random(seed)
        self.extra = paraphrases()
        phrasing = load_data()["phrasing"]["hazards"]
        self.patterns: dict[str, list] = {}
        for kind, templates in phrasing.items():
            for t in templates:
                if t["split"] != "train" or kind not in self.extra:
                    continue
                self.patterns.setdefault(kind, []).append(template_pattern(t["text"]))

    def __call__(self, kind: str, text: str) -> str | None:
        for rx in self.patterns.get(kind, ()):
            m = rx.match(text)
            if m:
                fields = m.groupdict()
                options = [o for o in self.extra[kind] if all(f in fields for f in template_fields(o))]
                return self.rng.choice(options).format(**fields) if options else None
        return None

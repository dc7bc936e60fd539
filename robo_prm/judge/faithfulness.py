"""Does a judge's reason say what the scene says? Claims read from a reason, checked against the scene.

The scene's claims come from its named facts (`SceneDescription.facts`: `gripper_open`,
`distance(gripper, hammer) = 15 cm`, `grasped(hammer)`, `in(glass cup, blue bin)`, `near_edge(hammer, front)`,
`tipped(glass cup)`, `moving(hammer)` …) and, for the buckets the facts leave out (height above an object,
distance to an edge), from its text. A reason's claims are read sentence by sentence with a few patterns:

* gripper open / closed;
* gripper–object distance ("15 cm from the hammer", "far from", "at / touching the hammer", "5 cm above");
* held or not ("holding the hammer", "the hammer lies …"), in a container or not, near an edge or not
  (with the edge distance when given), fallen off, standing / tipped over, moving fast.

A claim agrees when the scene states the same value for the same thing. A claim about something the scene
does not state (the gripper's distance to an object that is not the nearest) does not agree: the reason
then says more than the judge was shown. `reason_faithfulness` is the share of reasons all of whose claims
agree (a reason with no claim agrees), with the number of reasons that repeat a sentence, and the share of
`grounded` reasons: every sentence one of the scene's own or a claim that agrees (a sentence that claims nothing the
patterns read — "The glass cup has reached the end of the scene." — is not grounded).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from robo_prm.judge.copy_reason import reason_units, sentences

_FACT = re.compile(r"^(\w+)\((.*?)\)(?:\s*=\s*(.+))?$")
_CM = r"(\d+(?:\.\d+)?)\s*(?:cm|centimet(?:er|re)s?)"
_NOT = re.compile(r"\b(?:not|no longer|isn't|is not|never)\b")


def _bucket_of(cm: float) -> str:
    """A claimed distance in cm → the describer's bucket words (facts.distance_words)."""
    if cm < 2.0:
        return "touching"
    for b in (3, 5, 10, 15, 20, 30):
        if cm <= b:
            return f"{b} cm"
    return "far"


@dataclass
class SceneClaims:
    """What a scene states: key → value (keys as in `reason_claims`)."""

    values: dict[tuple, object] = field(default_factory=dict)
    objects: tuple[str, ...] = ()
    places: tuple[str, ...] = ()


def scene_claims(facts: Sequence[str], text: str = "") -> SceneClaims:
    v: dict[tuple, object] = {}
    objects: list[str] = []
    places: list[str] = []
    for f in facts:
        m = _FACT.match(f.strip())
        if f == "gripper_open" or f == "gripper_closed":
            v[("gripper", "open")] = f == "gripper_open"
            continue
        if not m:
            continue
        name, args, value = m.group(1), [a.strip() for a in m.group(2).split(",")], m.group(3)
        w = args[-1] if name in ("at", "above", "distance") else args[0]
        if name in ("at", "above", "distance"):
            objects.append(w)
            if name == "at":
                v[("gripper", "rel", w)] = "touching"
            elif name == "above":
                b = re.search(r"is \w+, (\d+ cm|touching) above the " + re.escape(w), text)
                v[("gripper", "above", w)] = b.group(1) if b else None
                v[("gripper", "rel", w)] = "touching" if b and b.group(1) == "touching" else None
            else:
                v[("gripper", "rel", w)] = value.strip()
            continue
        if name in ("grasped", "fallen", "in", "lifted", "near_edge", "in_zone", "on_table"):
            objects.append(w)
            v[(w, "held")] = name == "grasped"
            v[(w, "fallen")] = name == "fallen"
            v[(w, "near_edge")] = name == "near_edge"
            if name == "in":
                places.append(args[1])
            v[(w, "in")] = args[1] if name == "in" else ""  # the container's words, "" when in none
            if name == "near_edge":
                b = re.search(re.escape(w) + r" \w+(?: tipped over)? (?:(\d+ cm) from|at the very) ", text)
                v[(w, "edge_bucket")] = (b.group(1) or "touching") if b else None
            if name == "grasped":
                v[("gripper", "open")] = False
        elif name == "over_edge":  # a held / lifted object near an edge: after its grasped / lifted fact
            v[(w, "near_edge")] = True
            b = re.search(re.escape(w) + r" (?:is held|is in the air)[^.]*?"
                                         r"(?:(\d+ cm) from|at the very) (?:the )?\w* ?edge", text)
            v[(w, "edge_bucket")] = (b.group(1) or "touching") if b else None
        elif name == "tipped":
            v[(w, "upright")] = False
        elif name == "moving":
            v[(w, "moving")] = True
    for w in objects:
        v.setdefault((w, "moving"), False)
        v[(w, "present")] = True
        if re.search(re.escape(w) + r" stands\b", text):
            v.setdefault((w, "upright"), True)
    return SceneClaims(v, tuple(dict.fromkeys(objects)), tuple(dict.fromkeys(places)))


def _neg_before(sent: str, m: re.Match) -> bool:
    """A negation in the few words before a match ("is not moving fast"), not anywhere in the sentence."""
    return bool(_NOT.search(sent[max(0, m.start() - 24):m.start()]))


def _words_re(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True) if w) or r"(?!x)x"


def reason_claims(reason: str, scene: SceneClaims) -> list[tuple[tuple, object]]:
    """(key, claimed value) for every claim the patterns find in the reason, about the scene's objects."""
    obj = _words_re(scene.objects)
    place = _words_re(scene.places) + r"|[\w\- ]{0,20}?\b(?:bin|tray|box|basket|crate|container)"
    out: list[tuple[tuple, object]] = []
    for sent in sentences(reason.lower()):
        subj = re.search(r"\b(" + obj + r"|gripper)\b", sent)
        subject = subj.group(1) if subj else None
        neg = bool(_NOT.search(sent))
        if "gripper" in sent:
            m = re.search(r"\bgripper(?: is| remains| stays)?(?: still)?(?: fully| wide)? (not )?(open|opened|closed)\b", sent)
            if m:
                out.append((("gripper", "open"), (m.group(2) != "closed") != bool(m.group(1))))
        for m in re.finditer(_CM + r"\s+(?:away\s+)?(from|above)\s+the\s+(" + obj + r")\b", sent):
            if subject == "gripper" or subject == m.group(3) and "gripper" not in sent:
                key = ("gripper", "above" if m.group(2) == "above" else "rel", m.group(3))
                out.append((key, _bucket_of(float(m.group(1)))))
        for m in re.finditer(r"\bfar (?:away )?from the (" + obj + r")\b", sent):
            if subject == "gripper":
                out.append((("gripper", "rel", m.group(1)), "far"))
        for m in re.finditer(r"\b(?:is |are )?(?:at|touching|touches|on) the (" + obj + r")\b", sent):
            if subject == "gripper" and not neg:
                out.append((("gripper", "rel", m.group(1)), "touching"))
        for m in re.finditer(r"(?<!to )\b(?:holding|holds|held|grasp(?:s|ed|ing)|gripping|closed around|picked up|carrying)"
                             r"(?: up)?(?: the)? (" + obj + r")\b", sent):
            out.append(((m.group(1), "held"), not _neg_before(sent, m)))
        for w in scene.objects:
            if re.search(r"\b(?:the )?" + re.escape(w) + r" (?:is |has been )?(?:held|grasped|in the gripper)\b", sent):
                out.append(((w, "held"), not neg))
            elif re.search(r"\b" + re.escape(w) + r" (?:still )?(?:lies|lying|rests|resting|sits|sitting|stands|standing)\b", sent):
                out.append(((w, "held"), False))
        if subject in scene.objects:
            w = subject
            for m in re.finditer(r"\b(?:in|inside|into) the (" + place + r")\b", sent):
                out.append(((w, "in"), ("not", m.group(1)) if _neg_before(sent, m) else m.group(1)))
            m = re.search(r"\b(?:near|at|close to|on|by) the (?:very )?(?:\w+ )?edge\b|\bedge of the\b", sent)
            if m:
                far = re.search(r"\b(?:away|far) from the (?:\w+ )?edge\b", sent)
                out.append(((w, "near_edge"), not far and not _neg_before(sent, m)))
            m = re.search(_CM + r" from the (?:front |back |left |right )?edge\b", sent)
            if m:
                out.append(((w, "edge_bucket"), _bucket_of(float(m.group(1)))))
            if m := re.search(r"\b(?:fallen|fell|dropped) off\b|\bon the floor\b", sent):
                out.append(((w, "fallen"), not _neg_before(sent, m)))
            if m := re.search(r"\btipped( over)?\b|\bknocked over\b|\bon its side\b", sent):
                out.append(((w, "upright"), _neg_before(sent, m)))
            elif m := re.search(r"\b(?:stands|standing|upright)\b", sent):
                out.append(((w, "upright"), not _neg_before(sent, m)))
            if m := re.search(r"\bmoving fast\b|\bsliding\b", sent):
                out.append(((w, "moving"), not _neg_before(sent, m)))
            if re.search(r"\b(?:(?:no longer|not) (?:in|part of) the scene|(?:disappeared|vanished|gone|missing)\b)", sent):
                out.append(((w, "present"), False))  # every object the scene names is in it (fallen off included)
    return out


def _same_place(claimed: str, actual: str) -> bool:
    """'bin' names the scene's 'blue bin'; 'red bin' does not."""
    return bool(actual) and (claimed == actual or actual.endswith(" " + claimed))


def _agrees(key: tuple, value: object, scene: SceneClaims) -> bool:
    if key not in scene.values or scene.values[key] is None:
        return False  # the scene does not say: the reason claims more than the judge was shown
    actual = scene.values[key]
    if key[1] == "in":
        if isinstance(value, tuple):  # ("not", container)
            return not _same_place(value[1], actual)
        return _same_place(value, actual)
    return actual == value


def grounded(reason: str | None, facts: Sequence[str], text: str = "") -> bool:
    """Every sentence of the reason is one of the scene's own (copy_reason.reason_units) or makes at least one claim
    the patterns read, all of them agreeing. Stricter than `faithful`, which a sentence that claims nothing passes
    ("The previous scene was not started.")."""
    return _grounded(reason, scene_claims(facts, text), _own_sentences(text))


def _grounded(reason: str | None, scene: SceneClaims, own: set[str]) -> bool:
    for sent in sentences(reason or ""):
        claims = reason_claims(sent, scene)
        if _norm(sent) not in own and not (claims and all(_agrees(k, v, scene) for k, v in claims)):
            return False
    return bool(sentences(reason or ""))


def _own_sentences(text: str) -> set[str]:
    """The scene's sentences as a copied reason states them (normalised)."""
    return {_norm(u) for u in reason_units(text)}


def _norm(sent: str) -> str:
    return re.sub(r"[^a-z0-9 ]+", "", sent.lower()).strip()


def repeats_a_sentence(reason: str | None) -> bool:
    norm = [_norm(s) for s in sentences(reason or "")]
    norm = [s for s in norm if s]
    return len(norm) != len(set(norm))


def check_reason(reason: str | None, facts: Sequence[str], text: str = "") -> dict:
    """{'claims': n, 'wrong': [(key, claimed, scene's value)], 'faithful': bool, 'repeated': bool}."""
    scene = scene_claims(facts, text)
    claims = reason_claims(reason or "", scene)
    wrong = [(k, v, scene.values.get(k)) for k, v in claims if not _agrees(k, v, scene)]
    return {"claims": len(claims), "wrong": wrong, "faithful": not wrong, "repeated": repeats_a_sentence(reason),
            "grounded": _grounded(reason, scene, _own_sentences(text))}


def _grounded_numbers(sent: str, text: str) -> bool:
    """Every "N cm" of the sentence is a distance the scene text states (the reason restates the scene; a number the
    scene never showed — "the previous milestone was 40 cm" — is made up)."""
    said = {float(v) for v in re.findall(_CM, text.lower())}
    return all(float(v) in said for v in re.findall(_CM, sent.lower()))


def _words(sent: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]+", " ", sent.lower()).split()


def _opening(sent: str, words: int = 4) -> str:
    return " ".join(_words(sent)[:words])


def _said_before(sent: str, kept: Sequence[str]) -> bool:
    """The sentence opens with the same four words as one kept before it, or all its words are a run inside one
    (an echo: "… with no more milestones reached. no more milestones reached.")."""
    words = " ".join(_words(sent))
    return any(_opening(sent) == _opening(k) or f" {words} " in f" {' '.join(_words(k))} " for k in kept)


def drop_contradictions(reason: str | None, facts: Sequence[str], text: str = "") -> tuple[str | None, int]:
    """The reason without the sentences that contradict the scene (a small model's greedy reason can say "15 cm"
    where the scene says 5), that state a distance the scene text does not, or that say again what a sentence kept
    before them said (a greedy loop: "The previous milestone was 20 cm. … was 40 cm."; `_said_before`):
    (what is left or None, sentences dropped). A sentence that is one of the scene's own (a copied reason,
    `judge.reason_mode copy`) is kept unless it came already. The judge shows only what is left; the raw model's
    faithfulness is measured before this (benchmarks/judge_any_task.py)."""
    if not reason:
        return reason, 0
    scene = scene_claims(facts, text)
    own = _own_sentences(text)  # a copied sentence (reason_mode copy) goes unless said twice
    kept: list[str] = []
    for sent in sentences(reason):
        if _norm(sent) in own:
            if all(_norm(sent) != _norm(k) for k in kept):
                kept.append(sent)
            continue
        agrees = all(_agrees(k, v, scene) for k, v in reason_claims(sent, scene))
        if agrees and _grounded_numbers(sent, text) and not _said_before(sent, kept):
            kept.append(sent)
    return (" ".join(kept) or None), len(sentences(reason)) - len(kept)


def reason_faithfulness(pairs: Iterable[tuple[str | None, Sequence[str], str]]) -> dict:
    """Over (reason, scene facts, scene text) triples (reasons that are None are skipped): faithfulness (share of
    reasons whose every claim agrees with the scene; None for no reasons), reasons, claims, wrong_claims, and
    repeated (reasons with a sentence said twice)."""
    n = faithful = claims = wrong = repeated = ground = 0
    for reason, facts, text in pairs:
        if reason is None:
            continue
        r = check_reason(reason, facts, text)
        n, faithful, claims = n + 1, faithful + r["faithful"], claims + r["claims"]
        wrong, repeated, ground = wrong + len(r["wrong"]), repeated + r["repeated"], ground + r["grounded"]
    return {"faithfulness": faithful / n if n else None, "reasons": n, "claims": claims, "wrong_claims": wrong,
            "repeated": repeated, "grounded": ground / n if n else None}

"""The judge stage: SceneDescription → Judgement (progress, confidence, hazards, reason).

    judge = make_judge(JudgeConfig())            # bundled SmolLM2 GGUF via llama.cpp
    [j] = judge.judge(task.text, [scene])        # j.progress, j.confidence, j.hazards
    judge.judge(task.text, scenes, explain=True) # + a one-line reason (off the hot path)
"""
from __future__ import annotations

from robo_prm.judge.base import Backend, Judge, Scored
from robo_prm.judge.config import JudgeConfig, OpenAIConfig, TransformersConfig
from robo_prm.judge.confident import ConfidentJudge
from robo_prm.judge.weights import bundled_model_path

def resolve_finetuned(cfg: JudgeConfig) -> JudgeConfig:
    """Fill in the shipped fine-tuned judge where the config asks for it (model None, finetuned true):
    llama.cpp gets the merged GGUF, transformers the adapter; both get the shipped calibrator."""
    if not cfg.finetuned or cfg.model is not None or cfg.backend not in ("llamacpp", "transformers"):
        return cfg
    import dataclasses

    from robo_prm.judge.weights import shipped_adapter, shipped_calibrator

    tf = cfg.transformers
    calibrator = tf.calibrator or (str(shipped_calibrator()) if shipped_calibrator() else None)
    if cfg.backend == "llamacpp":
        from robo_prm.judge.merge import merged_judge_gguf
        from robo_prm.judge.score_head import shipped_score_head_folder

        head = cfg.score_head
        if head is None and (shipped_score_head_folder() / "head.json").exists():
            head = str(shipped_score_head_folder())  # fitted to this merged model's hidden states
        return dataclasses.replace(cfg, model=merged_judge_gguf(), score_head=head,
                                   transformers=dataclasses.replace(tf, calibrator=calibrator))
    return dataclasses.replace(cfg, transformers=dataclasses.replace(tf, adapter=tf.adapter or str(shipped_adapter()), calibrator=calibrator))


def make_hazard_reader(cfg: JudgeConfig):
    """The hazard reader `cfg` asks for (hazard_answerer reader, hazards the LLM would be asked), else None.
    A missing folder or MiniLM package is a one-line error here, before training starts."""
    if cfg.hazard_answerer != "reader" or cfg.hazards_from == "rules":
        return None
    from robo_prm.judge.hazard_reader import HazardReader

    try:
        return HazardReader.load(cfg.hazard_reader)
    except (FileNotFoundError, ImportError, ValueError) as exc:
        raise ValueError(f"judge.hazard_reader: {exc} (or --judge.hazard_answerer backend)") from None


def make_progress_reader(cfg: JudgeConfig):
    """The progress reader the fallback policy asks for (reader, reader_blend), else None; a missing folder is a
    one-line error here, before training starts."""
    if cfg.fallback not in ("reader", "reader_blend"):
        return None
    from robo_prm.judge.progress_reader import ProgressReader

    try:
        return ProgressReader.load(cfg.progress_reader)
    except (FileNotFoundError, ImportError, ValueError) as exc:
        raise ValueError(f"judge.progress_reader: {exc} (or another --judge.fallback)") from None


def make_judge(cfg: JudgeConfig | None = None) -> ConfidentJudge:
    """The judge `cfg.backend` names, wrapped in the confidence fallback to rules."""
    import dataclasses

    cfg = resolve_finetuned(cfg or JudgeConfig())
    if cfg.score_head not in (None, "none") and cfg.backend != "llamacpp":
        raise ValueError(f"judge.score_head reads llama.cpp's logits; judge.backend is {cfg.backend} "
                         "(or --judge.score_head none)")
    calibrator = None
    if cfg.transformers.calibrator:
        from robo_prm.judge.scoring import Calibrator

        calibrator = Calibrator.load(cfg.transformers.calibrator)
        if cfg.backend == "llamacpp" and cfg.score_head not in (None, "none"):
            # the head is fitted to the labels' progress itself: the calibrator's map was fitted to the LLM's digits
            # (its per-kind hazard thresholds still apply)
            calibrator = dataclasses.replace(calibrator, x=(0.0, 1.0), y=(0.0, 1.0))
    if cfg.backend == "rules":
        return ConfidentJudge(None, cfg)
    reader, second = make_hazard_reader(cfg), make_progress_reader(cfg)
    if cfg.backend == "llamacpp":
        from robo_prm.judge.backends.llamacpp import LlamaCppBackend

        return ConfidentJudge(LlamaCppBackend(cfg), cfg, calibrator, reader, second)
    if cfg.backend == "transformers":
        from robo_prm.judge.backends.hf import TransformersBackend

        return ConfidentJudge(TransformersBackend(cfg), cfg, calibrator, reader, second)
    if cfg.backend == "openai":
        from robo_prm.judge.backends.openai import OpenAIBackend

        return ConfidentJudge(OpenAIBackend(cfg), cfg, calibrator, reader, second)
    if cfg.backend == "distilled":
        from robo_prm.judge.backends.distilled import DistilledBackend
        from robo_prm.judge.weights import shipped_distilled

        path = cfg.distilled or shipped_distilled()
        if path is None:
            raise ValueError("judge.distilled: no distilled head shipped; give its folder (robo-prm distill --out DIR)")
        return ConfidentJudge(DistilledBackend(path), cfg, calibrator)
    if cfg.backend == "clip":
        from robo_prm.judge.backends.clip import ClipBackend

        return ConfidentJudge(ClipBackend(), cfg)
    raise ValueError(f"judge.backend: unknown backend {cfg.backend!r} (llamacpp, transformers, openai, rules, distilled, clip)")


__all__ = ["Backend", "ConfidentJudge", "Judge", "JudgeConfig", "OpenAIConfig", "Scored",
           "TransformersConfig", "bundled_model_path", "make_hazard_reader", "make_judge", "make_progress_reader"]

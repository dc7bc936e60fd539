"""Model backends behind `robo_prm.judge.base.Backend`; imported lazily by `make_judge`
so that e.g. the rules judge never imports torch or llama.cpp."""

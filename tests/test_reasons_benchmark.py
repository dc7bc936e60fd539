"""benchmarks/judge_reasons.py over whole episodes: every K-th step judged, `stale` counts a reason kept while the
scene text changed, `distinct` the different reasons."""
from robo_prm.types import Judgement


class _Judge:
    def __init__(self, say):
        self.say, self.seen = say, []

    def judge(self, task, scenes, explain=False):
        assert explain
        self.seen += [s.text for s in scenes]
        return [Judgement(progress=0.5, confidence=1.0, reason=self.say(s.text)) for s in scenes]


def test_whole_episodes_counts_stale_and_distinct_reasons(load_benchmark):
    bench = load_benchmark("judge_reasons")
    same = _Judge(lambda text: "The task is not finished.")
    name, triples, fig = bench.whole_episodes(same, "reach_tool", episodes=1, seed=0, every=5)
    changed = sum(a != b for a, b in zip(same.seen, same.seen[1:]))
    assert name == "reach_tool" and len(triples) == len(same.seen) > 2 and changed > 0
    assert fig["distinct"] == 1 and fig["stale"] == 1.0  # the scene moved on, the reason did not
    assert all("Milestones reached" in t for t in same.seen)  # as training describes it
    echo = _Judge(lambda text: text.split(". ")[0] + ".")
    _, _, fig = bench.whole_episodes(echo, "reach_tool", episodes=1, seed=0, every=5)
    assert fig["stale"] < 1.0 and fig["distinct"] > 1

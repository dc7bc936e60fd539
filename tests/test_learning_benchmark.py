"""benchmarks/learning.py's bookkeeping: steps to 80 %, append-as-you-go, the plot (no training here)."""
import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("learning")


def _row(variant, seed, curve, budget=3000):
    return {"task": "push_tool_from_edge", "variant": variant, "seed": seed, "budget": budget, "curve": curve,
            "steps_to_80": None, "final_success": curve[-1][1], "wall_s": 1.0}


def test_steps_to_80_is_the_first_evaluation_that_reaches_it(bench):
    assert bench.steps_to([[1000, 0.1, 0.0], [2000, 0.8, 0.0], [3000, 0.7, 0.0]]) == 2000
    assert bench.steps_to([[1000, 0.1, 0.0], [2000, 0.79, 0.0]]) is None


def test_runs_are_appended_one_at_a_time_and_a_rerun_replaces_its_own(bench, tmp_path):
    out = tmp_path / "learning.json"
    bench.append_row(out, _row("sparse", 0, [[1000, 0.0, 1.0], [3000, 0.2, 0.5]]))
    bench.append_row(out, _row("her", 0, [[1000, 0.0, 0.0], [3000, 0.5, 0.1]]))
    bench.append_row(out, _row("sparse", 0, [[1000, 0.1, 1.0], [3000, 0.3, 0.5]]))
    rows = json.loads(out.read_text())
    assert isinstance(rows, list) and [(r["variant"], r["final_success"]) for r in rows] == [("her", 0.5), ("sparse", 0.3)]
    assert not list(tmp_path.glob("*.tmp"))
    out.write_text("{}")
    with pytest.raises(SystemExit, match="not a JSON list"):
        bench.load_rows(out)


def test_plot_draws_mean_and_band_per_task_and_the_table_summarises(bench, tmp_path):
    out = tmp_path / "learning.json"
    for seed, s in enumerate((0.6, 0.9, 1.0)):
        bench.append_row(out, _row("llm_demos", seed, [[1000, s / 2, 0.1], [3000, s, 0.0]]))
    bench.append_row(out, _row("sparse", 0, [[1000, 0.0, 1.0], [3000, 0.1, 0.3]]))
    [png] = bench.plot(out, tmp_path / "img")
    assert png.name == "learning_push_tool_from_edge.png" and png.stat().st_size > 5000
    text = bench.table(bench.load_rows(out))
    assert "| push_tool_from_edge | llm_demos | 3 | 3000 | 0.83 (0.60–1.00) |" in text


def test_every_variant_is_a_valid_train_command(bench):
    from robo_prm.cli import build_parser, train_config_from_args

    parser = build_parser()
    for name, flags in bench.VARIANTS.items():
        args, extra = parser.parse_known_args(["train", "--task", "push_tool_from_edge", *flags])
        train_config_from_args(args, extra).check_combination()
    assert set(bench.DEFAULT_VARIANTS) <= set(bench.VARIANTS)
    # a variant means the same on every task: each says whether it has demos, whatever a train config ships —
    # except `shipped`, which is the train config as it ships (the "defaults that work" runs), and says nothing,
    # and its `shipped_*` variations, which change one thing of it and leave the demos as shipped
    assert bench.VARIANTS["shipped"] == []
    assert all(len(flags) == 2 and flags[0] not in ("--demos", "--demo_bc.pretrain_steps")
               for name, flags in bench.VARIANTS.items() if name.startswith("shipped_"))
    assert all("--demos" in flags and "--demo_bc.pretrain_steps" in flags
               for name, flags in bench.VARIANTS.items() if not name.startswith("shipped"))

"""perception/budget.py: the learning-rate cycle over the planned steps or the time budget, and a Ctrl-C that keeps
what a trainer has trained."""
import numpy as np
import pytest
import torch

from robo_prm.perception.budget import BudgetedCycle, train_loop


def _rates(cycle, opt) -> list[float]:
    rates = []
    for _ in train_loop(cycle):
        rates.append(opt.param_groups[0]["lr"])
    return rates


def test_without_a_budget_the_rates_are_torchs_one_cycle():
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([w], lr=0.002)
    torch_opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.002)
    sched = torch.optim.lr_scheduler.OneCycleLR(torch_opt, max_lr=0.002, total_steps=50, pct_start=0.15)
    expected = []
    for _ in range(50):
        expected.append(torch_opt.param_groups[0]["lr"])
        torch_opt.step()
        sched.step()
    cycle = BudgetedCycle(opt, 0.002, 50, 0.15)
    got = _rates(cycle, opt)
    assert len(got) == 50 and cycle.taken == 50 and not cycle.by_budget
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_a_budget_shorter_than_the_plan_still_warms_up_peaks_and_anneals():
    clock = iter(range(0, 10_000))  # each reading one second later
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.002)
    cycle = BudgetedCycle(opt, 0.002, 1_000, 0.15, max_minutes=0.5, clock=lambda: float(next(clock)))
    rates = _rates(cycle, opt)
    assert cycle.by_budget and cycle.taken < 100  # 30 s of a 1,000-step plan
    assert max(rates) > 0.0019 and rates[0] < 0.0001 and rates[-1] < 0.0002  # the whole cycle, in fewer steps
    assert int(np.argmax(rates)) < len(rates) // 2


def test_an_interrupted_keypoint_training_returns_the_steps_it_took(monkeypatch, tiny_two_view_model):
    """A Ctrl-C during `train-keypoints` ends the loop like the budget does: the trainer goes on to save."""
    from dataclasses import replace

    from robo_prm.perception import train_keypoints as tk
    from robo_prm.perception.keypoints import POINTS, READOUT_SLOTS
    from robo_prm.perception.model import PerceptionNet
    from robo_prm.perception.train import _Prefix, precompute
    from robo_prm.perception.weights import load_perception

    base = load_perception(tiny_two_view_model).net
    net = PerceptionNet(replace(base.cfg, keypoint_blocks=3, keypoint_width=8, keypoint_readout=True), imagenet=False)
    size, views, n, p = base.cfg.size, len(base.cfg.views), 16, len(POINTS)
    maps = precompute(_Prefix(net, 3).eval(), np.zeros((n, size, size * views, 3), np.uint8), progress=False)
    lab = {"uv": torch.zeros(n, views, p, 2), "seen": torch.ones(n, views, p, dtype=torch.bool),
           "positions": torch.zeros(n, p, 3), "used": torch.ones(n, p, dtype=torch.bool),
           "slots": torch.full((n, len(READOUT_SLOTS)), -1, dtype=torch.long)}
    calls, loss = [], tk.keypoint_loss

    def interrupt_on_the_third(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return loss(*args)

    monkeypatch.setattr(tk, "keypoint_loss", interrupt_on_the_third)
    before = [q.detach().clone() for q in net.keypoints.parameters()]
    cfg = tk.KeypointTrainConfig(epochs=10, batch=4, lr=0.01, width=8)
    assert tk._fit(net, maps, lab, cfg, progress=False) == 2  # two finished steps of the planned 40
    assert not net.keypoints.training
    assert any(not torch.equal(a, b) for a, b in zip(before, net.keypoints.parameters()))
    with pytest.raises(ZeroDivisionError):  # anything but a Ctrl-C still propagates
        monkeypatch.setattr(tk, "keypoint_loss", lambda *a: 1 / 0)
        tk._fit(net, maps, lab, cfg, progress=False)


def test_shuffled_batches_cover_each_row_once_per_pass_and_zip_stops_with_the_cycle():
    from robo_prm.perception.budget import shuffled_batches

    batches = shuffled_batches(10, 4, np.random.default_rng(0))
    first = [next(batches) for _ in range(2)]  # 8 of 10 rows; the 2 left are fewer than a batch
    assert len(set(torch.cat(first).tolist())) == 8
    rng = np.random.default_rng(0)
    first_pass, second_pass = rng.permutation(10), rng.permutation(10)
    assert torch.equal(torch.cat(first), torch.as_tensor(first_pass[:8]))
    assert torch.equal(next(batches), torch.as_tensor(second_pass[:4]))  # a new permutation, not the 2 left over
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    steps = list(zip(train_loop(BudgetedCycle(opt, 0.01, 5, 0.2)), shuffled_batches(10, 4, np.random.default_rng(0))))
    assert [s for s, _ in steps] == [0, 1, 2, 3, 4]

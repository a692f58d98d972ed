"""A CPU run's ops that touched the batch are replayed at 2, 4 and 8 times its samples, and its fetches' Dataset and
collate are timed, so the batch and micro-batch projections measure how the work grows with the samples
(analyzer/record/sample_replay.py, record/patches.py, rules/measured.py)."""

import json

import pytest

torch = pytest.importorskip("torch")

import analyzer  # noqa: E402
from analyzer.record import replay_timing  # noqa: E402
from analyzer.record import sample_replay as R  # noqa: E402
from gpuanalyze.ingest import schema as S  # noqa: E402
from gpuanalyze.ingest.reader import load_trace  # noqa: E402
from tests.scenarios.loops import LoopConfig, make_loop, train  # noqa: E402


def _op(name, ts, dur, dims, types, concrete=None, tid=1):
    args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)}
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


def test_the_ops_that_touched_the_batch_are_read_with_their_own_time(tmp_path):
    params = frozenset({(16, 8), (16,)})
    events = [
        _op("aten::linear", 0, 20, [[4, 8], [16, 8], [16]], ["float"] * 3),
        _op(
            "aten::addmm",
            2,
            16,
            [[16], [4, 8], [8, 16], [], []],
            ["float"] * 3 + ["Scalar"] * 2,
            ["", "", "", "1", "1"],
        ),
        _op("aten::t", 30, 3, [[16, 8]], ["float"]),  # a weight only: per call, not read
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "ts": 40, "dur": 20, "tid": 1},
        _op("aten::add_", 45, 5, [[4, 8], [4, 8], []], ["float", "float", "Scalar"]),  # inside the optimizer
    ]
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"traceEvents": events}))
    events.append(_op("aten::cat", 70, 4, [[[4, 8], [4, 8]], [4, 8], []], ["TensorList", "float", "Scalar"]))
    path.write_text(json.dumps({"traceEvents": events}))
    window = R.window_ops(path, 4, params)
    assert [c.name for c in window.calls] == ["aten::linear", "aten::addmm", "aten::cat"]
    linear, addmm, cat = window.calls
    assert cat.dims[0] == ((4, 8), (4, 8))  # a list of tensors' dims, hashable
    assert linear.own_us == pytest.approx(4) and linear.own_share == pytest.approx(4 / 20)
    assert addmm.own_us == pytest.approx(16) and addmm.own_share == pytest.approx(1)
    assert window.own_us == pytest.approx(20 + 3 + 4)  # every op outside the optimizer's step


def test_a_gain_counts_the_ops_own_part_and_unreplayed_ops_are_said():
    a = R.OpCall("aten::addmm", ((4, 8),), ("float",), ("",), own_us=10.0, own_share=1.0)
    b = R.OpCall("aten::linear", ((4, 8),), ("float",), ("x",), own_us=2.0, own_share=0.2)
    c = R.OpCall("aten::cat", ((4, 8),), ("float",), ("y",), own_us=8.0, own_share=1.0)
    window = R.Window([a, b, c], own_us=40.0)
    gains = {R._key(a): (10.0, 30.0, 70.0), R._key(b): (10.0, 30.0, 70.0)}
    got = R.fields(window, gains)
    assert got["cpu_op_x2_ms"] == pytest.approx(1 + (10 + 2) / 40)  # linear's gain is its children's but 20%
    assert got["cpu_op_x8_ms"] == pytest.approx(1 + (70 + 14) / 40)
    assert got[R.UNREPLAYED] == pytest.approx(8 / 40)
    assert R.fields(R.Window([], 0.0), {}) == {}


def test_the_batch_dimension_is_scaled_and_the_weights_are_not(monkeypatch):
    """Each replayed variant scales the first dimension equal to the batch's samples of every input that is not
    shaped as a parameter (and a size argument naming it); the gain is the variant's time less the 1x time. The
    clock is replaced by the inputs' element count (1 ns each): the scaling is tested, not this host's speed."""
    monkeypatch.setattr(replay_timing, "calls_for", lambda f, timing_s: 1)
    monkeypatch.setattr(replay_timing, "timed", lambda f, n: f())
    monkeypatch.setattr(R, "timed", lambda f, n: f())
    monkeypatch.setattr(
        R, "_bound", lambda op, args, kwargs: lambda: 1e-9 * sum(a.numel() for a in args if torch.is_tensor(a))
    )
    params = frozenset({(512, 512)})
    mm = R.OpCall("aten::mm", ((64, 512), (512, 512)), ("float", "float"), ("", ""), 1e4, 1.0)
    view = R.OpCall("aten::view", ((64, 512), ()), ("float", "ScalarList"), ("", "[64, 8, 64]"), 5.0, 1.0)
    gains = R.replay([mm, view], 64, params, budget_s=5.0)
    rows = 64 * 512 / 1e3  # the activation's elements per batch, in us; the 512 x 512 weight stays
    assert gains[R._key(mm)] == pytest.approx((rows, 3 * rows, 7 * rows))
    assert gains[R._key(view)] == pytest.approx((rows, 3 * rows, 7 * rows))
    assert R._value("[64, 8, 64]", 64, 512) == [512, 8, 64]


def test_a_real_op_replays_at_every_multiplier():
    relu = R.OpCall("aten::relu", ((8, 16),), ("float",), ("",), 5.0, 1.0)
    got = R.replay([relu], 8, frozenset(), budget_s=5.0)[R._key(relu)]
    assert len(got) == 3 and all(g >= 0 for g in got)


def test_the_replay_leaves_the_runs_random_stream_as_it_was():
    drop = R.OpCall("aten::dropout", ((8, 16), (), ()), ("float", "Scalar", "Scalar"), ("", "0.5", "True"), 50.0, 1.0)
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    assert R.replay([drop], 8, frozenset(), budget_s=1.0)  # replayed: it draws from the global generator
    assert torch.equal(torch.rand(4), expected)


def test_ops_the_replay_cannot_rebuild_or_too_large_are_left_out():
    listed = R.OpCall("aten::cat", (((4, 8), (4, 8)), ()), ("TensorList", "Scalar"), ("", "0"), 5.0, 1.0)
    huge = R.OpCall("aten::relu", ((1 << 22, 4),), ("float",), ("",), 5.0, 1.0)
    assert R.replay([listed, huge], 1 << 22, frozenset(), budget_s=1.0) == {}


def test_the_collate_replays_on_the_samples_of_one_fetch():
    samples = [(torch.randn(256), torch.randn(1)) for _ in range(64)]
    got = R.collate_growth(samples)
    assert got is not None and len(got) == 3 and all(r > 0 for r in got)  # how much: this host's speed
    assert R.collate_growth([object()]) is None  # not what default_collate takes


def test_a_recorded_cpu_run_carries_its_op_time_at_larger_batches_and_its_fetch_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "REPLAY_BUDGET_S", 0.2)
    model, opt, loader = make_loop(LoopConfig(steps=20, batch=8, features=32))
    windows_at = {"kernel_windows": True, "window_first": 5, "window_every": 10, "window_steps": 2}
    torch.manual_seed(7)
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), **windows_at) as prof:
        losses = train(model, opt, loader)
    trace = load_trace(prof.path)
    stats = [S.decode_kernel_stats(t) for t in trace.frame.get_column(S.KERNEL_STATS).drop_nulls()]
    assert len(stats) == 4
    for s in stats:
        assert s.cpu_op_ms > 0 and s.cpu_op_x8_ms >= s.cpu_op_x4_ms >= s.cpu_op_x2_ms >= s.cpu_op_ms * 0.99
    end = trace.end
    assert end is not None and end.fetch_ms and end.fetch_ms > 0 and end.loader_epochs == 1
    assert 0 < end.fetch_dataset_ms + end.fetch_collate_ms <= end.fetch_ms
    assert end.fetch_collate_growth is not None and len(end.fetch_collate_growth) == 3
    # profiling changed nothing: the same loop unprofiled gives the same losses
    model2, opt2, loader2 = make_loop(LoopConfig(steps=20, batch=8, features=32))
    torch.manual_seed(7)
    assert train(model2, opt2, loader2) == losses
    from torch.utils.data._utils import fetch

    assert fetch._MapDatasetFetcher.fetch.__name__ == "fetch" and not hasattr(
        fetch._MapDatasetFetcher.fetch, "__wrapped__"
    )

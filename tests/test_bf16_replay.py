"""A CPU run's float32 matmul shapes are replayed in bf16 on the machine, and the profiled steps carry their matmul
time under bf16 autocast (analyzer/record/bf16_replay.py)."""

import json

import pytest

torch = pytest.importorskip("torch")

import analyzer  # noqa: E402
from analyzer.record import bf16_replay as R  # noqa: E402
from analyzer.record import windows  # noqa: E402
from gpuanalyze.ingest import schema as S  # noqa: E402
from gpuanalyze.ingest.reader import load_trace  # noqa: E402
from tests.scenarios.loops import LoopConfig, make_loop, train  # noqa: E402


def _window_stats(tmp_path, steps):
    """The KernelStats of a small CPU loop recorded with two-step profiler windows at steps 5 and 15."""
    model, opt, loader = make_loop(LoopConfig(steps=steps, batch=8, features=32))
    windows_at = {"kernel_windows": True, "window_first": 5, "window_every": 10, "window_steps": 2}
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), **windows_at) as prof:
        train(model, opt, loader)
    return [S.decode_kernel_stats(t) for t in load_trace(prof.path).frame.get_column(S.KERNEL_STATS).drop_nulls()]


def _op(name, ts, dur, dims=None, types=None, tid=1, **args):
    e = {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid, "args": dict(args)}
    if dims is not None:
        e["args"].update({"Input Dims": dims, "Input type": types, "Input Strides": [[] for _ in dims]})
    return e


def test_the_windows_float32_matmuls_are_read_with_their_shapes_and_direction(tmp_path):
    events = [
        _op("aten::addmm", 0, 10, [[128], [4, 64], [64, 128], [], []], ["float", "float", "float", "Scalar", "Scalar"]),
        _op("autograd::engine::evaluate_function: MmBackward0", 20, 30),
        _op("aten::mm", 22, 8, [[4, 128], [128, 64]], ["float", "float"]),  # inside backward
        _op("aten::mm", 40, 5, [[4, 128], [128, 64]], ["c10::BFloat16", "c10::BFloat16"]),  # already bf16
        _op("aten::_convolution", 50, 6),  # a matmul op not replayed
        _op("aten::relu", 60, 3, [[4, 128]], ["float"]),  # not a matmul
    ]
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"traceEvents": events}))
    calls, union_us, reduced = R.window_calls(path)
    assert reduced  # one aten::mm ran in bf16
    assert [(c.name, c.backward) for c in calls] == [("aten::addmm", False), ("aten::mm", True)]
    assert calls[0].dims[1:3] == ((4, 64), (64, 128))
    assert union_us == pytest.approx(10 + 8 + 5 + 6)  # every matmul op's time: what cpu_matmul_ms sums


def test_forward_matmuls_pay_their_casts_and_backward_ones_do_not():
    fwd = R.MatmulCall("aten::mm", ((4, 8), (8, 8)), (), 40.0, backward=False)
    bwd = R.MatmulCall("aten::mm", ((8, 4), (4, 8)), (), 40.0, backward=True)
    speed = {R._shape(fwd): R.Speedup(fp32=4.0, bf16=1.0, cast=2.0), R._shape(bwd): R.Speedup(4.0, 1.0, 2.0)}
    got = R.ratios([fwd, bwd], 100.0, speed)  # 20 us of the 100 us union are other matmul ops, kept
    assert got["cpu_matmul_bf16_fast_ms"] == pytest.approx(1 - (30 + 30) / 100)  # both from bf16 inputs: 4x
    assert got["cpu_matmul_bf16_slow_ms"] == pytest.approx(1 - (20 + 20) / 100)  # both cast: 2x
    assert got["cpu_matmul_bf16_ms"] == pytest.approx(1 - (20 + 30) / 100)  # forward cast, backward not
    assert R.ratios([fwd], 100.0, {}) == {}  # nothing replayed: not measured
    assert R.ratios([fwd], 100.0, {}, reduced=True) == {}  # float32 matmuls not replayed: still not measured
    assert R.ratios([], 100.0, {}, reduced=True) == dict.fromkeys(R.FIELDS, 1.0)  # autocast already on: no gain


def test_a_shape_replays_in_float32_bf16_and_bf16_with_casts():
    got = R._time_shape("aten::addmm", ((16,), (8, 32), (32, 16)), ((1,), (32, 1), (1, 32)))
    assert got is not None and got.fp32 > 0 and got.bf16 > 0 and got.cast > 0
    assert R._time_shape("aten::mm", ((8, 3), (5, 4)), ()) is None  # dims the op rejects: not replayed
    transposed = R._tensor(torch, (8, 32), (1, 8), torch.Generator())
    assert transposed.shape == (8, 32) and transposed.stride() == (1, 8)


def test_a_cpu_run_on_a_bf16_cpu_stores_its_matmul_time_under_bf16(tmp_path, monkeypatch):
    monkeypatch.setattr(windows, "cpu_bf16", lambda: "avx512_bf16")  # as on a CPU with native bf16
    monkeypatch.setattr(R, "REPLAY_BUDGET_S", 0.05)
    stats = _window_stats(tmp_path, steps=20)
    assert len(stats) == 4  # two windows: the second takes the first's replay
    for s in stats:
        assert s.cpu_matmul_ms > 0 and s.cpu_matmul_bf16_ms > 0
        assert s.cpu_matmul_bf16_fast_ms / s.cpu_matmul_ms == pytest.approx(
            stats[0].cpu_matmul_bf16_fast_ms / stats[0].cpu_matmul_ms
        )


def test_no_replay_without_native_bf16(tmp_path, monkeypatch):
    monkeypatch.setattr(windows, "cpu_bf16", lambda: "")
    stats = _window_stats(tmp_path, steps=12)
    assert stats and all(s.cpu_matmul_ms > 0 and s.cpu_matmul_bf16_ms == 0 for s in stats)


def test_the_replay_leaves_the_runs_random_stream_as_it_was_and_skips_huge_shapes():
    """Profiling never changes training: the replay draws its inputs from its own generator (the next dropout mask
    or shuffle of the run is the one it would have been), and a shape too large to allocate again is not replayed."""
    calls = [R.MatmulCall("aten::mm", ((16, 32), (32, 8)), (), 50.0, backward=False)]
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    assert R.replay(calls, budget_s=1.0)  # replayed
    assert torch.equal(torch.rand(4), expected)
    huge = [R.MatmulCall("aten::mm", ((1 << 13, 1 << 12), (1 << 12, 1 << 12)), (), 50.0, backward=False)]
    assert R.replay(huge, budget_s=1.0) == {}


def test_a_loop_already_under_bf16_autocast_is_measured_to_gain_nothing(tmp_path, monkeypatch):
    """fp32 parameters under torch.autocast('cpu', bfloat16): the profiled matmuls run in bf16 already, so the
    replay stores no gain (matmul time under bf16 = matmul time) and no CPU-precision advice follows."""
    monkeypatch.setattr(windows, "cpu_bf16", lambda: "avx512_bf16")
    monkeypatch.setattr(R, "REPLAY_BUDGET_S", 0.05)
    model, opt, loader = make_loop(LoopConfig(steps=20, batch=8, features=32))
    windows_at = {"kernel_windows": True, "window_first": 5, "window_every": 10, "window_steps": 2}
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), **windows_at) as prof:
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    stats = [S.decode_kernel_stats(t) for t in load_trace(prof.path).frame.get_column(S.KERNEL_STATS).drop_nulls()]
    assert stats and all(s.cpu_matmul_ms > 0 and s.cpu_matmul_bf16_ms == s.cpu_matmul_ms for s in stats)
    report = analyzer.analyze(prof.path)
    assert not any(f.cause == "cpu_fp32_math" for f in report.findings), [f.cause for f in report.findings]

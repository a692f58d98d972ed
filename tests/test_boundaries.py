"""The step-boundary state machine alone, fed events as the profiler's hooks would (no torch)."""

from __future__ import annotations

import importlib
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.record.boundaries import MAX_HELD_PARTS, StepBoundaries
from analyzer.record.steps import StepTimes


class Loop:
    """A fake training loop on a fake clock: each event advances time by 10 ns."""

    def __init__(self, **kwargs: bool) -> None:
        self.now = 0
        self.closed: list[tuple[StepTimes, int]] = []
        self.stop_after: int | None = None
        self.m = StepBoundaries(self._close, clock=lambda: self.now, start_ns=0, **kwargs)

    def _close(self, step: StepTimes, end: int) -> bool:
        self.closed.append((step, end))
        return self.stop_after is None or len(self.closed) < self.stop_after

    def tick(self) -> int:
        self.now += 10
        return self.now

    def fetch(self) -> None:
        self.m.data_begin(self.tick())
        self.tick()
        self.m.data(10, 4)

    def forward(self, *, grad: bool = True) -> None:
        self.m.forward_begin(self.tick(), lambda: grad)
        self.m.forward_end(self.tick())

    def backward(self) -> None:
        self.tick()
        self.m.backward(10)

    def optimizer(self, *, main: bool = True) -> None:
        self.m.optimizer_begin(self.tick())
        self.m.optimizer_end(self.tick(), ends_step=main)

    def train_step(self, micro: int = 1) -> None:
        for _ in range(micro):
            self.fetch()
            self.forward()
            self.backward()
        self.optimizer()

    @property
    def forwards(self) -> list[int]:
        return [s.forwards for s, _ in self.closed]


def test_torch_is_not_imported(monkeypatch):
    """Importing the state machine afresh with torch made unimportable succeeds."""
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    import analyzer.record

    for name in ("boundaries", "steps"):  # put back afterwards: the package attribute and the module
        monkeypatch.setattr(analyzer.record, name, sys.modules[f"analyzer.record.{name}"])
        monkeypatch.delitem(sys.modules, f"analyzer.record.{name}")
    module = importlib.import_module("analyzer.record.boundaries")
    assert module.StepBoundaries is not StepBoundaries


def test_each_optimizer_step_closes_one_step_with_its_phases():
    loop = Loop()
    for _ in range(3):
        loop.train_step()
    assert len(loop.closed) == 3 and loop.m.by_optimizer
    for index, (step, end) in enumerate(loop.closed):
        assert step.index == index and step.forwards == step.backwards == 1
        assert step.data_ns == step.forward_ns == step.backward_ns == step.optimizer_ns == 10
        assert step.data_cpu_ns == 4 and end > step.start_ns
    starts = [s.start_ns for s, _ in loop.closed[1:]]
    assert starts == [end for _, end in loop.closed[:-1]]  # each step starts where the last ended


@pytest.mark.parametrize("micro", [1, 2, 4])
def test_gradient_accumulation_before_the_first_optimizer_step_is_one_step(micro):
    loop = Loop()
    loop.train_step(micro)
    assert loop.forwards == [micro]
    assert loop.closed[0][0].start_ns == 0 and loop.closed[0][0].data_ns == 10 * micro
    loop.train_step(micro)  # by then the optimizer delimits: forwards no longer hold parts
    assert loop.forwards == [micro, micro] and loop.m.held == 0


def test_another_optimizer_does_not_end_the_step():
    loop = Loop(by_optimizer=True)
    loop.fetch()
    loop.forward()
    loop.optimizer(main=False)
    assert loop.closed == [] and loop.m.step.optimizer_ns == 10
    loop.optimizer()
    assert loop.forwards == [1] and loop.closed[0][0].optimizer_ns == 20


def test_without_an_optimizer_each_forward_is_a_step_released_at_the_end():
    loop = Loop()
    for _ in range(3):
        loop.fetch()
        loop.forward()
        loop.backward()
    assert loop.closed == [] and loop.m.held == 2  # the third part is the current step
    loop.m.finish(loop.tick())
    assert loop.forwards == [1, 1, 1] and [s.index for s, _ in loop.closed] == [0, 1, 2]
    ends = [end for _, end in loop.closed]
    assert ends[:2] == [s.start_ns for s, _ in loop.closed[1:]]


def test_no_grad_forwards_end_steps_at_once():
    loop = Loop()
    for _ in range(3):
        loop.forward(grad=False)
    assert loop.forwards == [1, 1] and loop.m.held == 0  # the third closes at the next boundary
    loop.m.finish(loop.tick())
    assert loop.forwards == [1, 1, 1]


def test_a_fetch_after_a_forward_is_a_boundary_when_forwards_delimit():
    loop = Loop()
    loop.forward(grad=False)
    loop.fetch()
    assert len(loop.closed) == 1 and loop.m.step.data_ns == 10 and loop.closed[0][0].data_ns == 0


def test_held_parts_are_released_after_max_held_parts():
    loop = Loop()
    for _ in range(MAX_HELD_PARTS + 1):
        loop.forward()
    assert len(loop.closed) == MAX_HELD_PARTS and loop.m.no_optimizer and loop.m.held == 0
    loop.forward()  # from now on every forward ends the step before it at once
    assert len(loop.closed) == MAX_HELD_PARTS + 1 and loop.m.held == 0


def test_manual_steps_end_only_at_mark_and_merge_what_was_held():
    loop = Loop()
    loop.forward()
    loop.forward()  # held: one part so far
    loop.m.manual = True
    loop.forward()
    loop.optimizer()
    assert loop.closed == []
    loop.m.mark(loop.tick())
    assert loop.forwards == [3] and loop.closed[0][0].optimizer_ns == 10


def test_several_models_hold_even_no_grad_forwards():
    loop = Loop()
    loop.m.per_model = True
    loop.forward(grad=False)
    loop.forward(grad=False)
    loop.optimizer()
    assert loop.forwards == [2]


def test_a_closure_inside_the_optimizer_step_is_not_counted_twice():
    loop = Loop(by_optimizer=True)
    loop.m.optimizer_begin(loop.tick())
    loop.forward()  # the closure's forward (10 ns) and backward (10 ns) inside optimizer.step
    loop.backward()
    loop.m.optimizer_end(loop.tick(), ends_step=True)
    ((step, _),) = loop.closed
    assert step.forward_ns == step.backward_ns == 10 and step.optimizer_ns == (50 - 10) - 20


def test_lead_is_the_time_before_the_first_phase():
    loop = Loop(by_optimizer=True)
    loop.train_step()
    loop.now += 1000  # logging after optimizer.step()
    loop.train_step()
    first, second = (s for s, _ in loop.closed)
    assert first.first_ns - first.start_ns == 10
    assert second.first_ns - second.start_ns == 1010


def test_a_step_that_stopped_recording_ends_the_release():
    loop = Loop()
    for _ in range(4):
        loop.forward()
    loop.stop_after = 2
    loop.m.finish(loop.tick())
    assert len(loop.closed) == 2


def test_restart_keeps_the_index_and_drops_what_ran():
    loop = Loop(by_optimizer=True)
    loop.train_step()
    loop.fetch()
    loop.m.restart(loop.tick())
    assert loop.m.step.index == 1 and loop.m.step.data_ns == 0 and loop.m.step.start_ns == loop.now


EVENTS = ("fetch", "forward", "no_grad_forward", "backward", "optimizer", "other_optimizer", "mark")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(st.sampled_from(EVENTS), max_size=60), given_optimizer=st.booleans())
def test_any_event_sequence_closes_consecutive_steps_and_loses_no_forward(events, given_optimizer):
    """Whatever the loop does, closed steps are numbered 0, 1, 2, ... in time order, each ends where
    the next starts or later, and every forward is in exactly one step (closed, held or current)."""
    loop = Loop(by_optimizer=given_optimizer)
    forwards = 0
    for event in events:
        if event == "fetch":
            loop.fetch()
        elif event in ("forward", "no_grad_forward"):
            loop.forward(grad=event == "forward")
            forwards += 1
        elif event == "backward":
            loop.backward()
        elif event in ("optimizer", "other_optimizer"):
            loop.optimizer(main=event == "optimizer")
        else:
            loop.m.manual = True
            loop.m.mark(loop.tick())
    loop.m.finish(loop.tick())
    closed = [s for s, _ in loop.closed]
    assert [s.index for s in closed] == list(range(len(closed)))
    for (step, end), (later, _) in zip(loop.closed, loop.closed[1:], strict=False):
        assert step.start_ns <= end <= later.start_ns
    assert loop.m.held == 0  # finish released every held part
    assert sum(s.forwards for s in closed) + loop.m.step.forwards == forwards

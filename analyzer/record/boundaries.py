"""Where one step ends and the next begins: a state machine fed the training loop's events.

Torch-free on purpose (the profiler's hooks translate torch's callbacks into these events), so
every boundary rule is tested by feeding events alone (tests/test_boundaries.py).

Steps are optimizer steps. With gradient accumulation several forwards run per
``optimizer.step()``; until the first one, a forward that follows a forward run with autograd on
(or a backward; with several models, any forward) only *tentatively* ends a step: the part is held
and the held parts are merged when the optimizer steps. Forwards under ``no_grad`` end steps at
once. A loop that never steps an optimizer gets one step per forward: the held parts are released
at the end, or after ``MAX_HELD_PARTS`` of them. Explicit ``prof.step()`` calls (manual steps)
override both.
"""

from __future__ import annotations

from collections.abc import Callable

from analyzer.record.steps import StepTimes

#: Forward-delimited parts held back while no optimizer has stepped yet (gradient accumulation)
#: before concluding that the loop steps without an optimizer.
MAX_HELD_PARTS = 256

CloseStep = Callable[[StepTimes, int], bool]
"""close(step, end_ns) records a closed step; it returns False once recording has stopped."""


class StepBoundaries:
    """The step being recorded, the parts held back, and which events end a step."""

    __slots__ = ("_clock", "_close_step", "_held", "by_optimizer", "manual", "no_optimizer", "per_model", "step")

    def __init__(
        self,
        close: CloseStep,
        *,
        clock: Callable[[], int],
        start_ns: int,
        by_optimizer: bool = False,
        manual: bool = False,
    ) -> None:
        self._close_step = close
        self._clock = clock
        self.step = StepTimes(index=0, start_ns=start_ns)
        self.by_optimizer = by_optimizer
        """An optimizer step ends each step (once the watched optimizer has stepped, or when given)."""
        self.manual = manual
        """Only ``prof.step()`` ends steps."""
        self.no_optimizer = False
        """Concluded after MAX_HELD_PARTS held parts: forwards end steps at once."""
        self.per_model = False
        """Several models are timed: any forward may be one of several in a step."""
        self._held: list[StepTimes] = []

    @property
    def held(self) -> int:
        """How many parts are held back waiting for an optimizer step."""
        return len(self._held)

    @property
    def forward_ends_step(self) -> bool:
        """Without optimizer steps or prof.step(), the next forward (or fetch) after a forward starts a new step."""
        step = self.step
        return not self.manual and not self.by_optimizer and step.forwards > 0 and step.optimizer_start is None

    # -- events ----------------------------------------------------------------------------------
    def forward_begin(self, now: int, grad_enabled: Callable[[], bool]) -> StepTimes:
        """The outermost forward begins; returns the step it belongs to."""
        if not self.by_optimizer and self.forward_ends_step:  # by_optimizer: the common case, one read
            self.boundary(now)
        step = self.step
        step.forward_start = now
        if step.first_ns is None:
            step.first_ns = now
        if not self.by_optimizer and grad_enabled():
            step.grad_forwards += 1
        return step

    def forward_end(self, now: int) -> None:
        """The outermost forward has returned."""
        step = self.step
        if step.forward_start is not None:
            step.forward_ns += now - step.forward_start
            step.forward_start = None
        step.forwards += 1

    def data_begin(self, now: int) -> None:
        """A data fetch (or a ``prof.data()`` block) is about to start."""
        if not self.by_optimizer and self.forward_ends_step:
            self.boundary(now)

    def data(self, elapsed_ns: int, cpu_ns: int) -> None:
        """A data fetch just ended after ``elapsed_ns`` (``cpu_ns`` of it the thread's CPU time)."""
        step = self.step
        step.data_ns += elapsed_ns
        step.data_cpu_ns += cpu_ns
        if step.first_ns is None:
            step.first_ns = self._clock() - elapsed_ns

    def backward(self, elapsed_ns: int) -> None:
        """A backward just ended; after the watched gradient arrived, the rest was gradient-sync wait."""
        step = self.step
        waited = 0
        last = step.last_grad_ns
        if last is not None:  # distributed runs only
            end_ns = self._clock()
            if end_ns - elapsed_ns <= last <= end_ns:
                waited = end_ns - last
                step.last_grad_ns = None
        step.backward_ns += elapsed_ns - waited
        step.sync_ns += waited
        step.backwards += 1

    def optimizer_begin(self, now: int) -> None:
        step = self.step
        # a forward still open (a framework timing its training step) counts as nested only from here on
        phase_ns = step.data_ns + step.forward_ns + step.backward_ns + step.sync_ns  # step.phase_ns, inline
        step.optimizer_nested_ns = phase_ns + (now - step.forward_start if step.forward_start is not None else 0)
        step.optimizer_start = now

    def optimizer_end(self, now: int, ends_step: bool) -> None:
        """An optimizer step returned; ``ends_step`` when it is the optimizer that delimits steps."""
        step = self.step
        if step.optimizer_start is not None:
            phase_ns = step.data_ns + step.forward_ns + step.backward_ns + step.sync_ns  # step.phase_ns, inline
            nested = phase_ns - step.optimizer_nested_ns  # a closure's forward/backward, already counted
            step.optimizer_ns += max(0, now - step.optimizer_start - nested)
            step.optimizer_start = None
        if ends_step and not self.manual:
            self.by_optimizer = True
            if self._held:
                self.merge_held()
            self.close(now)

    def mark(self, now: int) -> None:
        """``prof.step()``: the step ends here (the caller has switched to manual steps)."""
        self.merge_held()
        self.close(now)

    def finish(self, now: int) -> None:
        """The loop ended: held parts become steps, and an open forward-delimited step is closed."""
        if self._held and not self.release_held():
            return
        if self.forward_ends_step:
            self.close(now)

    def restart(self, now: int) -> None:
        """Start the current step afresh (what ran since the last boundary is not a step)."""
        self.step = StepTimes(index=self.step.index, start_ns=now)

    # -- boundaries ------------------------------------------------------------------------------
    def boundary(self, now: int) -> None:
        """A forward-delimited boundary. Before any optimizer step, a part that ran a forward with
        autograd on or a backward may be one micro-batch of gradient accumulation (or one of several
        forwards of a step, as with several models): hold such parts until the optimizer steps, or
        until it is clear none will. Forwards under no_grad (evaluation, inference) end steps at once."""
        step = self.step
        holds = step.backwards > 0 or step.grad_forwards > 0 or self.per_model or self._held
        if self.no_optimizer or not holds:
            self.close(now)
            return
        self._held.append(step)
        self.step = StepTimes(index=step.index + 1, start_ns=now)
        if len(self._held) >= MAX_HELD_PARTS:
            self.no_optimizer = True
            self.release_held()

    def merge_held(self) -> None:
        """The optimizer stepped: the held parts and the current one are one step."""
        if not self._held:
            return
        merged, *rest = self._held
        self._held = []
        for part in (*rest, self.step):
            merged.absorb(part)
        self.step = merged

    def release_held(self) -> bool:
        """No optimizer steps: each held part becomes a step, ending where the next began.
        False when recording stopped meanwhile."""
        current = self.step
        parts, self._held = self._held, []
        ends = [p.start_ns for p in parts[1:]] + [current.start_ns]
        for part, end in zip(parts, ends, strict=True):
            self.step = part
            if not self.close(end):
                return False
        current.index = self.step.index
        self.step = current
        return True

    def close(self, end_ns: int) -> bool:
        """End the current step at ``end_ns``; the next one starts there."""
        closed = self.step
        self.step = StepTimes(closed.index + 1, end_ns)
        return self._close_step(closed, end_ns)

    def drop_held(self) -> None:
        """Forget held parts (a forked child starting its own trace)."""
        self._held = []

"""Which DataLoader calls are the training loop's data wait, and what their batches hold."""

from __future__ import annotations

import weakref
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import msgspec

from analyzer.record.batch import batch_bytes_of, batch_size_of
from analyzer.record.patch_fetcher import DatasetCall
from analyzer.record.steps import StepTimes
from gpuanalyze.ingest.trace.runinfo import EndInfo


@dataclass(slots=True, eq=False)
class LoaderWatch:
    """The profile's DataLoader (None: every one), the iterators it made, and its batches' facts."""

    loader: Any
    _: KW_ONLY
    samples_from_loader: bool
    """Count the batches' samples (a framework that counts them itself says no)."""
    workers: int | None = None
    """The most worker processes of any loader iterated."""
    batch_bytes: int | None = None
    """Bytes of the first batch seen."""
    fetches: int = 0
    """Training batches fetched (one per micro-batch under gradient accumulation)."""
    epochs: int = 0
    """``iter()`` calls on the training loader: epochs started."""
    fetch_samples: int | None = None
    """Samples of the first batch seen."""
    dataset_call: DatasetCall = field(default_factory=DatasetCall)
    """The last call of torch's dataset fetcher (record.patch_fetcher writes it)."""
    fetch_ns: int = 0
    """Wall time of the training fetches whose Dataset ran in this process."""
    dataset_ns: int = 0
    """Of fetch_ns, the time in the dataset fetcher outside the collate (the ``__getitem__`` calls)."""
    collate_ns: int = 0
    """Of fetch_ns, the time in the collate."""
    _iters: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)

    def saw_iter(self, owner: Any, result: Any) -> None:
        """``iter(owner)`` made ``result``: where a DataLoader is seen, record its workers (the most of
        any loader iterated) and, for the profile's own loader, the iterator its fetches come from."""
        if hasattr(owner, "num_workers"):
            self.workers = max(self.workers or 0, int(owner.num_workers))
        if self.loader is not None and owner is self.loader and result is not None:
            self._iters.add(result)

    def saw(self, kind: str, owner: Any, result: Any, *, in_block: bool) -> bool:
        """A DataLoader call (``iter`` or ``fetch``): the iterator recorded where it is made, then whether
        its time is data wait."""
        if kind == "iter":
            self.saw_iter(owner, result)
        training = self.is_training_data(owner, in_block=in_block)
        if training and kind == "iter":
            self.epochs += 1
        return training

    def is_training_data(self, owner: Any, *, in_block: bool) -> bool:
        """A DataLoader call whose time is data wait: not inside ``prof.data()`` (``in_block``: the
        block counts), and from the profile's own loader (or an iterator it made) when one was given.
        A predicate: it records nothing (``saw_iter`` does)."""
        if in_block:
            return False
        loader = self.loader
        return loader is None or owner is loader or owner in self._iters

    def saw_batch(self, batch: Any, step: StepTimes, elapsed_ns: int = 0, owner: Any = None) -> None:
        """A fetched batch: counted, its bytes and samples (the first one), and its samples counted in ``step``;
        a fetch whose iterator (``owner``) ran its Dataset here adds ``elapsed_ns`` and its dataset fetcher's
        time to fetch_ns and dataset_ns."""
        call = self.dataset_call
        if call.fetcher is not None and call.fetcher is getattr(owner, "_dataset_fetcher", None):
            self.fetch_ns += elapsed_ns
            self.collate_ns += min(call.collate_ns, call.ns, elapsed_ns)
            self.dataset_ns += max(0, min(call.ns, elapsed_ns) - call.collate_ns)
            call.fetcher = None
        self.fetches += 1
        first = self.fetches == 1
        if first:
            self.batch_bytes = batch_bytes_of(batch)
        if self.samples_from_loader or first:
            n = batch_size_of(batch)
            if first:
                self.fetch_samples = n
            if n is not None and self.samples_from_loader:  # step.add_samples(n, from_loader=True), inline
                step.loader_samples = n if step.loader_samples is None else step.loader_samples + n

    def ended(self, end: EndInfo) -> EndInfo:
        """The end marker with what it records of the loader."""
        timed = self.fetch_ns > 0
        return msgspec.structs.replace(
            end,
            loader_workers=self.workers,
            batch_bytes=self.batch_bytes,
            fetches=self.fetches or None,
            loader_epochs=self.epochs or None,
            fetch_samples=self.fetch_samples,
            fetch_ms=self.fetch_ns / 1e6 if timed else None,
            fetch_dataset_ms=self.dataset_ns / 1e6 if timed else None,
            fetch_collate_ms=self.collate_ns / 1e6 if timed else None,
        )

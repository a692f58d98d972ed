"""One set of notes for the ranks of one capture: a note every rank has is said once; one only some ranks have
says which ("... (on rank 1)"). A note is split at ``"; "`` into a head and clauses, so notes that differ only
in a clause ("17 iterations found ..." and "17 iterations found ...; 9.5 ms before the first is not analysed")
are one note whose extra clause names its ranks."""

from __future__ import annotations

_SEP = "; "


def _ranks(ranks: list[int], world: int) -> str:
    if len(ranks) == world:
        return ""
    shown = ", ".join(str(r) for r in ranks[:8]) + (" ..." if len(ranks) > 8 else "")
    return f" (on rank{'s' if len(ranks) > 1 else ''} {shown})"


def merge_rank_notes(per_rank: list[list[str]]) -> list[str]:
    """The notes of every rank (in rank order) as one list, in first-seen order."""
    world = len(per_rank)
    if world <= 1:
        return list(dict.fromkeys(per_rank[0])) if per_rank else []
    heads: dict[str, list[int]] = {}
    clauses: dict[str, dict[str, list[int]]] = {}
    for rank, notes in enumerate(per_rank):
        for note in dict.fromkeys(notes):
            head, *rest = note.split(_SEP)
            heads.setdefault(head, []).append(rank)
            for clause in rest:
                got = clauses.setdefault(head, {}).setdefault(clause, [])
                if not got or got[-1] != rank:
                    got.append(rank)
    out = []
    for head, ranks in heads.items():
        text = head + _ranks(ranks, world)
        for clause, where in clauses.get(head, {}).items():
            text += _SEP + clause + ("" if where == ranks else _ranks(where, world))
        out.append(text)
    return out

"""A triaged fleet as data: the JSON object (`gpuanalyze fleet --json`)."""

from __future__ import annotations

from analyzer.fleet.triage import RANKINGS, Fleet
from analyzer.render.output import built
from analyzer.render.output import commands as C


def fleet_struct(fleet: Fleet) -> C.Fleet:
    """The fleet's JSON: its runs ranked, those skipped and why (render.output.commands.Fleet)."""
    return built(
        C.Fleet,
        fleet,
        ranking=RANKINGS[fleet.ranked_by],
        runs=[built(C.FleetRun, r, rank=i) for i, r in enumerate(fleet.rows, 1)],
        skipped=[built(C.Skipped, s) for s in fleet.skipped],
    )

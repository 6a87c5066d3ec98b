"""The run's answer when another writer committed first on buckets it rewrites: its batch
is merged again into those buckets as the other writer left them (its changes come first,
in commit order), and that is committed instead, up to target.commit_retries times.

The transaction (runner/delta/transaction.py) runs the loop and calls `resolve` on each
clash; this object holds the run's latest write between calls, the one thing of a run
that changes after it is made.
"""

from __future__ import annotations

from dataclasses import replace

import structlog
from pyspark.sql import Row

from runner.delta.transaction import BucketClash, Commit, Resolver
from runner.pipeline.bucket_plan import BucketPlan
from runner.pipeline.commit_stage import Written, prepare_commit, refuse_new_columns
from runner.pipeline.context import RunContext
from runner.pipeline.figures import BatchFigures, write_figures
from runner.pipeline.inputs import Inputs
from runner.pipeline.write_stage import MergeInput, rewrite_buckets

log = structlog.get_logger(__name__)


class Remerge:
    def __init__(
        self,
        ctx: RunContext,
        inputs: Inputs,
        merge: MergeInput,
        plan: BucketPlan,
        results: list[Row],
    ):
        self._ctx, self._inputs, self._merge = ctx, inputs, merge
        self.plan = plan
        self.results = results
        self.rounds = 0
        self.columns_added: tuple[str, ...] = ()

    @property
    def written(self) -> Written:
        return Written(tuple(self.results), self.plan.stored)

    def figures(self, batch: BatchFigures) -> BatchFigures:
        """The run's figures for its latest write (`batch`: the verdicts and the schema
        rewrite, unchanged)."""
        write = write_figures(self.results, self.plan.stored, self._ctx.target)
        return replace(batch, write=write, merged_on=self.plan.merged_on)

    def resolver(self, verdicts: BatchFigures) -> Resolver:
        return Resolver(
            resolve=lambda clash: self.resolve(clash, verdicts),
            attempts=self._ctx.target.commit_retries,
            gave_up=lambda clash, n: (
                f"{clash}; re-merged {n} time(s), as target.commit_retries allows; nothing of "
                "this run was committed: run it again"
            ),
        )

    def resolve(self, clash: BucketClash, verdicts: BatchFigures) -> Commit | None:
        """Merge the clashing buckets again on `clash.latest`; what to commit instead."""
        ctx, latest = self._ctx, clash.latest
        refuse_new_columns(latest, self._merge.schema)
        with ctx.stage("remerge"):
            again = self.plan.again(clash.buckets, latest, ctx.target)
            log.info("remerge", buckets=len(again.groups), on_version=latest.version)
            self.rounds += 1
            self.results = rewrite_buckets(ctx, self._merge, again, self.results, self.rounds)
            self.plan = self.plan.updated_by(again)
        prepared = prepare_commit(
            ctx, latest, self._merge.schema, self._inputs, self.written, self.figures(verdicts)
        )
        if prepared is None:
            return None
        self.columns_added = prepared.columns_added or self.columns_added
        return prepared.changes

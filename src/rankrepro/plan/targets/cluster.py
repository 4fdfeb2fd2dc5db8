"""The cluster resources of the training and evaluation jobs of :class:`~rankrepro.plan.targets.WorkflowTargets`
(:mod:`rankrepro.plan.resources`), and the shell text that keeps one log per attempt of a retried job."""

from __future__ import annotations

from rankrepro.plan.resources import Work


class ClusterTargets:
    """The cluster resources' part of :class:`~rankrepro.plan.targets.WorkflowTargets` (its ``cluster``)."""

    def _train_work(self, wildcards) -> list[Work]:
        return [Work(wildcards.run_id, train=True, evaluate=self.runtime["evaluate_in_train_job"])]

    def train_runtime(self, wildcards) -> int:
        """The train job's runtime (minutes): its run's estimate (:mod:`rankrepro.plan.resources`)."""
        return self.cluster.runtime_minutes(self._train_work(wildcards))

    def train_mem_mb(self, wildcards) -> int:
        """The train job's memory (MB): from its run's dataset and batch."""
        return self.cluster.mem_mb(self._train_work(wildcards))

    def evaluate_runtime(self, wildcards) -> int:
        """The evaluate job's runtime (minutes): one evaluation of its run, estimated."""
        return self.cluster.runtime_minutes([Work(wildcards.run_id, train=False, evaluate=True)])

    def evaluate_mem_mb(self, wildcards) -> int:
        return self.cluster.mem_mb([Work(wildcards.run_id, train=False, evaluate=True)])

    def _batch_work(self, wildcards) -> list[Work]:
        return [Work(rid, train=True, evaluate=True) for rid in self.batch_runs(wildcards)]

    def batch_runtime(self, wildcards) -> int:
        """The batch job's runtime (minutes): the sum of its runs' estimates."""
        return self.cluster.runtime_minutes(self._batch_work(wildcards))

    def batch_mem_mb(self, wildcards) -> int:
        """The batch job's memory (MB): its largest run's (they run one after the other)."""
        return self.cluster.mem_mb(self._batch_work(wildcards))

    def all_cores(self, cores: int | None) -> int:
        """The threads of a rule that takes every core it is given (timing results): ``--cores`` when given
        (``workflow.resource_settings.cores``), else 8 (a cluster executor gives none), at most cluster.max_threads."""
        return self.cluster.cap_threads(cores or 8)

    @staticmethod
    def attempt_number(wildcards, attempt: int) -> int:
        """The job's attempt (1, then 2, ... when Snakemake retries it), as the ``attempt`` resource the shell reads."""
        return attempt

    @staticmethod
    def attempt_logged(command: str) -> str:
        """The shell text of a rule running ``command`` (a shell template) with one log per attempt (its
        ``attempt`` resource: :meth:`attempt_number`). Snakemake deletes a job's ``log:`` file when an attempt
        starts, so a retried job would lose the stopped attempt's lines. This writes a header to ``{log}`` (the
        attempt, the UTC time, the host, the SLURM job id), hard-links ``{log}`` to
        ``<log minus .log>.attempt<N>-<UTC time>.log`` (one file under two names: Snakemake deletes only the
        first), then appends the command's output. Where hard links fail the log says so and keeps the last
        attempt only."""
        return ('l={log:q}; a="${{l%.log}}.attempt{resources.attempt}-$(date -u +%Y%m%dT%H%M%SZ).log"; '
                'printf "== attempt %s: started %s on %s, SLURM job %s ==\\n" {resources.attempt} '
                '"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -n)" "${{SLURM_JOB_ID:-none}}" > "$l"; '
                'ln -f "$l" "$a" 2>/dev/null || echo "(no hard link here: only the last attempt is kept)" >> "$l"; '
                '{{ ' + command + '; }} >> "$l" 2>&1')

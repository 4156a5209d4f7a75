"""Training rows from the store: rewarded Conductor rounds, filtered and grouped for GRPO.

A row is one Conductor call with everything the trainer needs and nothing re-tokenised: the
prompt ids the model saw, the sampled completion ids, their behaviour logprobs, the sampling
settings (temperature, top-p) and the policy version. Its reward is the round's own reward when
it has one (an unparseable plan: 0), else its chain's final reward (a recursive chain's rounds
share it, as in the paper). The G samples of a job form a group.

Excluded and counted: rounds of tenants whose traces may not train the Conductor (their own choice,
else the deployment's `train_on_tenant_data`; `conductor.domain.consent`), whatever else the filter
asks for, rounds of evaluation and gate jobs, rounds without ids or logprobs,
ids/logprobs of different lengths, sampling that cannot be reproduced (no temperature recorded,
top-p below 1, top-k set), chains that ended on an infrastructure failure, rows staler than the
allowed number of promotions, rounds with no reward yet, and rewards from sources the filter
leaves out.

Reward sources: `verifier` (a reference answer, tests or a rubric), `judge` (the group judge, for
jobs without a reference), `parse` (the paper's 0 for an unparseable plan) and `feedback` (a
user's rating). Feedback is on the chain whose answer the user saw and **replaces** that chain's
verifier or judge reward (a person who read the answer outranks a model that guessed); the other
samples of the group keep theirs. Leaving `feedback` out of `reward_sources` ignores it. A group
is one job's samples together with its exploration samples (`Job.explore_of`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from conductor.domain.consent import may_train
from conductor.domain.errors import InputError
from conductor.store.lineage import TENANTS_KEY
from conductor.store.models import Chain, Checkpoint, Job, Reward, Round, Tenant

BASE_VERSION = "base"
REWARD_SOURCES = ("verifier", "judge", "feedback", "parse")


def parse_sources(text: str | None) -> frozenset[str] | None:
    """`verifier,judge` -> the set; None for None or empty; InputError naming an unknown source."""
    if not text or not text.strip():
        return None
    sources = frozenset(x.strip() for x in text.split(",") if x.strip())
    unknown = sorted(sources - set(REWARD_SOURCES))
    if unknown:
        raise InputError(f"unknown reward sources {unknown}; choose from {', '.join(REWARD_SOURCES)}")
    return sources


@dataclass(frozen=True)
class TraceFilter:
    since: datetime | None = None
    until: datetime | None = None
    #: Most promotions between a row's policy and the active one (0: on-policy rows only).
    max_staleness: int | None = None
    tenant_id: str | None = None
    job_ids: frozenset[str] | None = None
    #: Rewards from users' feedback replace the verifier's or judge's on their chain when present.
    use_feedback: bool = True
    #: Keep only rows whose reward came from these sources (None: all of them).
    reward_sources: frozenset[str] | None = None
    #: The deployment's `train_on_tenant_data`: whether a tenant that never said lets its traces train.
    train_on_tenant_data: bool = True


@dataclass(frozen=True)
class Row:
    round_id: int
    job_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    temperature: float
    policy_version: str
    staleness: int
    reward: float
    source: str = "verifier"  #: where the reward came from: verifier | judge | feedback | parse
    #: The regex the completion was sampled under (None: unconstrained); the trainer masks with it too.
    grammar: str | None = None
    #: Whose traffic it was (None: the system's own jobs); a checkpoint records these as its lineage.
    tenant_id: str | None = None


@dataclass
class Dataset:
    groups: list[list[Row]]
    excluded: Counter[str] = field(default_factory=Counter)

    @property
    def rows(self) -> list[Row]:
        return [r for g in self.groups for r in g]

    @property
    def tenant_ids(self) -> list[str]:
        """The tenants whose data this dataset trains on (the system's own jobs have none)."""
        return sorted({r.tenant_id for r in self.rows if r.tenant_id is not None})

    def stats(self) -> dict[str, Any]:
        rows = self.rows
        zero_var = sum(1 for g in self.groups if len({r.reward for r in g}) <= 1)
        return {
            "rows": len(rows),
            "groups": len(self.groups),
            "groups_zero_variance": zero_var,
            "reward_histogram": dict(sorted(Counter(r.reward for r in rows).items())),
            "reward_mean": (sum(r.reward for r in rows) / len(rows)) if rows else None,
            "staleness_histogram": dict(sorted(Counter(r.staleness for r in rows).items())),
            "completion_tokens": sum(len(r.completion_ids) for r in rows),
            "reward_by_source": reward_by_source(rows),
            "excluded": dict(self.excluded),
            TENANTS_KEY: self.tenant_ids,
        }


def reward_by_source(rows: Iterable[Row]) -> dict[str, dict[str, float]]:
    """Per reward source: how many rows and their mean reward."""
    by: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by[r.source].append(r.reward)
    return {src: {"rows": len(v), "mean": sum(v) / len(v)} for src, v in sorted(by.items())}


def policy_ages(session: Session) -> dict[str, int]:
    """Each promoted policy version's age: 0 for the active one, 1 for the one before, ..."""
    promoted = session.execute(
        select(Checkpoint.id).where(Checkpoint.promoted_at.is_not(None)).order_by(Checkpoint.promoted_at.desc())
    ).scalars()
    ages = {cid: i for i, cid in enumerate(promoted)}
    ages.setdefault(BASE_VERSION, len(ages))
    return ages


def build_dataset(sessions: sessionmaker[Session], flt: TraceFilter = TraceFilter()) -> Dataset:
    with sessions() as s:
        ages = policy_ages(s)
        query = (
            select(Round, Chain, Job, Tenant.train_on_data)
            .join(Chain, Round.chain_id == Chain.id)
            .join(Job, Round.job_id == Job.id)
            .outerjoin(Tenant, Job.tenant_id == Tenant.id)
            .where(Round.kind.in_(("plan", "replan")), Chain.parent_step_id.is_(None))
            .order_by(Round.job_id, Round.id)
        )
        if flt.since:
            query = query.where(Round.created_at >= flt.since)
        if flt.until:
            query = query.where(Round.created_at < flt.until)
        if flt.tenant_id:
            query = query.where(Job.tenant_id == flt.tenant_id)
        if flt.job_ids is not None:
            query = query.where(Job.id.in_(flt.job_ids))
        found = list(s.execute(query))
        dataset = Dataset(groups=[])
        triples = []
        for rnd, chain, job, choice in found:
            if job.tenant_id is not None and not may_train(choice, flt.train_on_tenant_data):
                dataset.excluded["no_training_consent"] += 1
            else:
                triples.append((rnd, chain, job))
        rewards = _rewards(s, {j.id for _, _, j in triples}, flt.use_feedback)
    by_job: dict[str, list[Row]] = defaultdict(list)
    for rnd, chain, job in triples:
        row = _row(rnd, chain, job, rewards, ages, flt, dataset.excluded)
        if row is not None:
            by_job[job.explore_of or job.id].append(row)  # exploration samples join the user's group
    dataset.groups = [rows for rows in by_job.values() if rows]
    return dataset


@dataclass
class _Rewards:
    by_round: dict[int, tuple[float, str]] = field(default_factory=dict)  # value, source
    by_chain: dict[int, tuple[float, bool, str]] = field(default_factory=dict)  # value, infra failure, source
    feedback: dict[int, float] = field(default_factory=dict)  # by chain


def _rewards(s: Session, job_ids: Iterable[str], use_feedback: bool) -> _Rewards:
    out = _Rewards()
    ids = list(job_ids)
    for i in range(0, len(ids), 500):
        for r in s.scalars(select(Reward).where(Reward.job_id.in_(ids[i : i + 500])).order_by(Reward.id)):
            if r.source == "feedback":
                if use_feedback and r.chain_id is not None:
                    out.feedback[r.chain_id] = r.value
            elif r.chain_id is not None:
                out.by_chain[r.chain_id] = (r.value, bool((r.details or {}).get("failed")), r.source)
            elif r.round_id is not None:
                out.by_round[r.round_id] = (r.value, r.source)
    return out


def _row(
    rnd: Round,
    chain: Chain,
    job: Job,
    rewards: _Rewards,
    ages: dict[str, int],
    flt: TraceFilter,
    excluded: Counter[str],
) -> Row | None:
    options = job.options or {}
    if "eval" in options or "gate" in options:
        excluded["evaluation_job"] += 1
        return None
    reason = _unusable(rnd)
    if reason:
        excluded[reason] += 1
        return None
    staleness = ages.get(rnd.policy_version or BASE_VERSION)
    if staleness is None:  # a version never promoted (e.g. a gate candidate): treat as maximally stale
        staleness = len(ages)
    if flt.max_staleness is not None and staleness > flt.max_staleness:
        excluded["too_stale"] += 1
        return None
    reward: float | None = None
    source = ""
    if rnd.id in rewards.by_round:
        reward, source = rewards.by_round[rnd.id]
    elif chain.id in rewards.by_chain:
        reward, failed, source = rewards.by_chain[chain.id]
        if failed:
            excluded["infrastructure_failure"] += 1
            return None
        if chain.id in rewards.feedback:
            reward, source = rewards.feedback[chain.id], "feedback"
    elif chain.id in rewards.feedback:  # rated, never verified nor judged
        reward, source = rewards.feedback[chain.id], "feedback"
    if reward is None:
        excluded["no_reward"] += 1
        return None
    if flt.reward_sources is not None and source not in flt.reward_sources:
        excluded[f"source_{source}"] += 1
        return None
    sampling = rnd.sampling or {}
    return Row(
        round_id=rnd.id,
        job_id=job.id,
        prompt_ids=[int(x) for x in rnd.prompt_token_ids or []],
        completion_ids=[int(x) for x in rnd.completion_token_ids or []],
        logprobs=[float(x) for x in rnd.completion_logprobs or []],
        temperature=float(sampling["temperature"]),
        policy_version=rnd.policy_version or BASE_VERSION,
        staleness=staleness,
        reward=float(reward),
        source=source,
        grammar=_grammar(sampling),
        tenant_id=job.tenant_id,
    )


def _unusable(rnd: Round) -> str | None:
    if not rnd.prompt_token_ids or not rnd.completion_token_ids or rnd.completion_logprobs is None:
        return "missing_ids_or_logprobs"
    if len(rnd.completion_token_ids) != len(rnd.completion_logprobs):
        return "ids_logprobs_length_mismatch"
    sampling = rnd.sampling or {}
    temperature = sampling.get("temperature")
    if not isinstance(temperature, int | float) or temperature <= 0:
        return "sampling_not_reproducible"
    if float(sampling.get("top_p", 1.0)) < 1.0 or sampling.get("top_k") not in (None, 0, -1):
        return "sampling_not_reproducible"
    if sampling.get("logprobs") not in (None, "processed") or (sampling.get("logprobs") is None and temperature != 1.0):
        # Raw logprobs equal the sampled distribution's only at temperature 1.
        return "sampling_not_reproducible"
    grammar = sampling.get("grammar")
    if grammar is not None and (
        not isinstance(grammar, dict) or grammar.get("kind") != "regex" or not _grammar(sampling)
    ):
        return "grammar_not_reproducible"  # a mask the trainer cannot rebuild would bias every ratio
    return None


def _grammar(sampling: dict) -> str | None:
    grammar = sampling.get("grammar")
    regex = grammar.get("regex") if isinstance(grammar, dict) else None
    return regex if isinstance(regex, str) and regex else None

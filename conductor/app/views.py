"""Nested views: a chain with its rounds and steps, and a reward, as a job's detail shows them
(`conductor.app.read_models.JobDetail`); one Conductor round as a line of the trace export."""

from __future__ import annotations

from typing import Any

from conductor.store.models import Chain, Reward, Round


def chain_view(c: Chain) -> dict[str, Any]:
    return {
        "chain_id": c.id,
        "sample": c.sample_index,
        "parent_step_id": c.parent_step_id,
        "depth": c.depth,
        "status": c.status,
        "answer": c.answer,
        "error": c.error,
        "rounds": [
            {
                "round_id": r.id,
                "index": r.round_index,
                "kind": r.kind,
                "status": r.status,
                "parse_status": r.parse_status,
                "parse_error": r.parse_error,
                "workflow": r.workflow,
                "answer": r.answer,
                "error": r.error,
                "tokens": r.prompt_tokens + r.completion_tokens,
                "cost_usd": r.cost_usd,
                "latency_s": r.latency_s,
                "plan_text": r.completion_text,
                "policy_version": r.policy_version,
                "sampling": r.sampling,
                "steps": [
                    {
                        "step_id": st.id,
                        "index": st.step_index,
                        "worker": st.worker_name,
                        "access": st.access,
                        "dependencies": st.dependencies,
                        "status": st.status,
                        "subtask": st.subtask,
                        "output": st.output,
                        "error": st.error,
                        "model": st.model,
                        "tokens": st.prompt_tokens + st.completion_tokens,
                        "cost_usd": st.cost_usd,
                        "latency_s": st.latency_s,
                        "attempts": st.attempts,
                    }
                    for st in r.steps
                ],
            }
            for r in c.rounds
        ],
    }


def reward_view(r: Reward) -> dict[str, Any]:
    return {
        "value": r.value,
        "correct": r.correct,
        "verifier": r.verifier,
        "source": r.source,
        **({"judge_model": r.judge_model, "rubric_version": r.rubric_version} if r.judge_model else {}),
        "chain_id": r.chain_id,
        "round_id": r.round_id,
        "details": r.details,
    }


def _pick_reward(rewards: list[Reward], round_id: int) -> Reward | None:
    """The reward that applies to one round: its own (an unparseable plan), else the user's
    feedback, else its chain's verifier reward; the newest of each kind wins."""
    own = [r for r in rewards if r.round_id == round_id and r.chain_id is None]
    feedback = [r for r in rewards if r.source == "feedback"]
    rest = [r for r in rewards if r not in own and r not in feedback]
    for group in (own, feedback, rest):
        if group:
            return group[-1]
    return None


def trace_line(rnd: Round, job_rewards: list[Reward]) -> dict[str, Any]:
    """One round as a training record; `job_rewards` are its job's rewards, oldest first."""
    chain = rnd.chain
    job = chain.job
    rewards = [
        r
        for r in job_rewards
        if r.round_id == rnd.id or r.chain_id == chain.id or (r.chain_id is None and r.round_id is None)
    ]
    reward = _pick_reward(rewards, rnd.id)
    return {
        "job_id": job.id,
        "problem_id": job.external_id,
        "problem": job.problem,
        "job_options": job.options,
        "chain_id": chain.id,
        "sample_index": chain.sample_index,
        "depth": chain.depth,
        "round_id": rnd.id,
        "round_index": rnd.round_index,
        "kind": rnd.kind,
        "prompt_messages": rnd.prompt_messages,
        "prompt_token_ids": rnd.prompt_token_ids,
        "completion_text": rnd.completion_text,
        "completion_token_ids": rnd.completion_token_ids,
        "completion_logprobs": rnd.completion_logprobs,
        "policy_version": rnd.policy_version,
        "conductor_model": rnd.conductor_model,
        "sampling": rnd.sampling,
        "parse_status": rnd.parse_status,
        "parse_error": rnd.parse_error,
        "workflow": rnd.workflow,
        "steps": [
            {
                "index": st.step_index,
                "worker": st.worker_name,
                "subtask": st.subtask,
                "access": st.access,
                "status": st.status,
                "output": st.output,
                "error": st.error,
            }
            for st in rnd.steps
        ],
        "round_answer": rnd.answer,
        "final_answer": chain.answer,
        "job_answer": job.answer,
        "job_status": job.status,
        "reward": None
        if reward is None
        else {"value": reward.value, "verifier": reward.verifier, "correct": reward.correct, "details": reward.details},
    }

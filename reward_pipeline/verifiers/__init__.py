"""Verifiers: each checks a model's answer to a `Problem` and returns a `Verdict` with evidence.

Rewards for GRPO come from these. Pick one with `verifier_for(problem, judge=...)`.
"""

from reward_pipeline.verifiers.base import (
    Verdict,
    Verifier,
    extract_boxed,
    extract_final_answer,
    last_number,
    parse_number,
)
from reward_pipeline.verifiers.code_exec import CodeVerifier, build_program, extract_code
from reward_pipeline.verifiers.feedback import FeedbackVerifier, feedback_score, verdict_from_feedback
from reward_pipeline.verifiers.judge import JudgeVerifier, parse_judge_score
from reward_pipeline.verifiers.math_equiv import MathVerifier, MathWorkerPool
from reward_pipeline.verifiers.mc import MultipleChoiceVerifier, extract_choice
from reward_pipeline.verifiers.number import NumberVerifier, extract_final_number
from reward_pipeline.verifiers.routing import verifier_for
from reward_pipeline.verifiers.text import TextVerifier, normalize_answer

__all__ = [
    "CodeVerifier",
    "FeedbackVerifier",
    "JudgeVerifier",
    "MathVerifier",
    "MathWorkerPool",
    "MultipleChoiceVerifier",
    "NumberVerifier",
    "TextVerifier",
    "Verdict",
    "Verifier",
    "build_program",
    "extract_boxed",
    "extract_choice",
    "extract_code",
    "extract_final_answer",
    "extract_final_number",
    "feedback_score",
    "last_number",
    "normalize_answer",
    "parse_judge_score",
    "parse_number",
    "verdict_from_feedback",
    "verifier_for",
]

"""Format warm-up: supervised fine-tuning on workflows the system itself validated.

An untrained 135M Conductor writes no parseable plan, so every GRPO group is all zeros and
carries no signal. This stage writes synthetic plans for training questions over the given pool
(one step, solve-then-check, two parallel attempts and a combiner), keeps only those the
production parser accepts, and fine-tunes a LoRA adapter on them with TRL's `SFTTrainer`
(completion-only loss on the chat-templated prompt the Conductor will really see). Worker
choices are drawn uniformly so GRPO, not this stage, decides which worker to prefer.

One plan is verified, not just well-formed: where a training problem carries the arithmetic
expression of its answer (``metadata["expression"]``, from GSM8K's annotated solutions, see
:mod:`reward_pipeline.training.expressions`) and the pool has a calculator, a share of its examples
(``WarmupConfig.verified_share``) is the one-step plan that hands the calculator that expression,
kept only if the calculator then returns the reference. The Conductor thereby learns to translate a
word problem into the calculator's input, which no worker of the local pool does reliably: rejection
sampling over plans with the reference as the filter (as in expert iteration), done before GRPO
because a 135M policy samples that plan too rarely for GRPO to find it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor.domain.errors import TrainingError
from conductor.domain.parser import parse_workflow
from conductor.domain.problem import Problem
from conductor.domain.prompts import QUESTION_REF, WorkerCard, build_plan_messages, expression_route_subtasks
from conductor.domain.workflow import PlanOrder, Workflow
from reward_pipeline.training.expressions import verified
from reward_pipeline.training.policy import LoraSpec

_ANSWER_HINT = "Give the final answer."


@dataclass(frozen=True)
class WarmupConfig:
    examples: int = 160
    epochs: float = 2.0
    learning_rate: float = 1e-3
    batch_size: int = 8
    max_length: int = 512
    seed: int = 0
    #: Of the examples whose problem has a verified expression, the share that is the calculator plan.
    verified_share: float = 0.0
    lora: LoraSpec = field(default_factory=LoraSpec)


def synthetic_plan(workers: Sequence[WorkerCard], rng: random.Random) -> Workflow:
    """One workflow, worker ids drawn from the pool; the question is written as a reference, so the
    plan fits any question (the prompt it is paired with carries the question itself)."""
    # The question is referenced, never copied: copies were what broke and bloated plans (prompts.QUESTION_REF).
    q = QUESTION_REF
    pick = lambda: rng.randrange(len(workers))  # noqa: E731
    # Only a model can write an expression: a type constraint, not a preference between models.
    # (Steps that read `{question}` may still go to the calculator, which answers nothing there: the shipped
    # adapter was trained so. Sending them to models only, with code questions added, was tried (run v4 in
    # docs/retraining_cpu/expression_run/) and did not route code to models, so it is not the default.)
    models = [i for i, w in enumerate(workers) if not w.is_tool] or list(range(len(workers)))
    shape = rng.choice((1, 2, 3, 4, 4)) if len(models) < len(workers) else rng.choice((1, 1, 2, 3))
    if shape == 1:
        wf = Workflow.from_lists([pick()], [f"{q} {_ANSWER_HINT}"], [[]])
    elif shape == 2:
        wf = Workflow.from_lists(
            [pick(), pick()],
            [f"Solve step by step: {q}", f"Check the solution above and state the final answer to: {q}"],
            [[], "all"],
        )
    elif shape == 3:
        wf = Workflow.from_lists(
            [pick(), pick(), pick()],
            [f"Solve: {q}", f"Solve: {q}", "Compare the two solutions above and give the correct final answer."],
            [[], [], [0, 1]],
        )
    else:  # a model writes the expression, a second step computes it (the question is written once)
        wf = Workflow.from_lists(
            [rng.choice(models), pick()],
            expression_route_subtasks(q),
            [[], "all"],
        )
    return wf


def calculator_plan(problem: Problem, workers: Sequence[WorkerCard]) -> Workflow | None:
    """The one-step plan that gives the pool's calculator the problem's expression, if the calculator
    then answers the reference; None when there is no calculator, no expression or no match."""
    expression = problem.metadata.get("expression")
    # The first tool is taken for the calculator (the bundled pools list it before the python tool); the
    # check below runs the calculator on the expression anyway.
    tool = next((i for i, w in enumerate(workers) if w.is_tool), None)
    if tool is None or not isinstance(expression, str) or problem.answer is None:
        return None
    if not verified(expression, problem.answer):
        return None
    return Workflow.from_lists([tool], [expression], [[]])


def build_examples(
    problems: Sequence[Problem],
    workers: Sequence[WorkerCard],
    *,
    n: int,
    max_steps: int,
    seed: int,
    verified_share: float = 0.0,
    order: PlanOrder = "workers-first",
) -> list[dict[str, Any]]:
    """Prompt/completion pairs in TRL's conversational format, each checked by the production parser;
    plans written in ``order`` (the order the Conductor will be served in)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        problem = problems[i % len(problems)]
        checked = calculator_plan(problem, workers) if rng.random() < verified_share else None
        expected = checked or synthetic_plan(workers, rng)
        # No thought before the block: a 135M model gains nothing from it and it costs tokens to learn.
        text = expected.to_python(order)
        if parse_workflow(text, pool_size=len(workers), max_steps=max_steps) != expected:
            raise TrainingError(f"a synthetic plan does not round-trip through the parser: {text[:200]}")
        prompt = build_plan_messages(problem.question, workers, max_steps=max_steps, style="compact", order=order)
        out.append({"prompt": prompt, "completion": [{"role": "assistant", "content": text}]})
    return out


def sft_args(config: WarmupConfig, out_dir: Path) -> Any:
    """TRL's `SFTConfig` for the warm-up: CPU, fp32, no checkpoints of the trainer's own."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out_dir / "_trainer"),
        num_train_epochs=config.epochs,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        max_length=config.max_length,
        completion_only_loss=True,
        gradient_checkpointing=False,  # memory is plentiful; recomputation would cost a third more CPU
        # TRL turns bf16 on by default. On a CPU without bf16 instructions (this AMD EPYC: AVX2 only)
        # autocast falls back to torch's reference GEMM: a step took 305 s instead of ~15 s in fp32.
        # fp32 is also what the GRPO trainer computes its ratios in.
        bf16=False,
        fp16=False,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=config.seed,
        dataloader_num_workers=0,
    )


def run_warmup(
    examples: list[dict[str, Any]], *, base_model: Path, out_dir: Path, config: WarmupConfig
) -> dict[str, Any]:
    """Fine-tune a fresh LoRA adapter on `examples`; save it to `out_dir`; return the training metrics."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    args = sft_args(config, out_dir)
    # TRL's own TensorBoard logging (what `report_to="tensorboard"` installs), written beside the adapter
    # rather than under the trainer's scratch folder (transformers 5 dropped `logging_dir`).
    board = SummaryWriter(log_dir=str(out_dir / "tensorboard"))
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        peft_config=config.lora.peft_config(),
        callbacks=[TensorBoardCallback(tb_writer=board)],
    )
    try:
        result = trainer.train()
    finally:
        board.close()
    trained: Any = trainer.model
    trained.save_pretrained(str(out_dir))
    history = [h for h in trainer.state.log_history if "loss" in h]
    return {
        "train_loss": float(result.training_loss),
        "first_loss": history[0]["loss"] if history else None,
        "last_loss": history[-1]["loss"] if history else None,
        "steps": int(result.global_step),
        "examples": len(examples),
    }

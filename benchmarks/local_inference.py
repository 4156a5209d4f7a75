"""Throughput of the two local inference paths: in-process transformers vs a vLLM CPU server.

Both are called the way the system calls them, through `litellm.completion`: the
in-process backend as `local/<model dir>` (conductor/local_backend.py) and vLLM as
`hosted_vllm/<served name>`. The same greedy chat prompts are sent at concurrency 1 and
16; tokens/s is completion tokens summed over all requests divided by wall time.

    .venv/bin/python benchmarks/local_inference.py [--prompts 16] [--max-tokens 64]

Needs .venv-vllm (scripts/setup_vllm_venv.sh). The in-process backend serialises
generation (CPU torch already uses every core), so its concurrency-16 figure shows what
a busy worker gets from it, not batched decoding.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

from conductor.inference import local_backend
from conductor.inference.local_model import pull_default_model
from conductor.inference.vllm_server import VllmServer

REPO_ROOT = Path(__file__).resolve().parents[1]
TOPICS = [
    "a lighthouse keeper", "prime numbers", "a lost umbrella", "photosynthesis", "a chess endgame",
    "the Roman roads", "a robot learning to paint", "ocean tides", "a bakery at dawn", "binary search",
    "volcanoes", "a letter to the future", "honeybees", "the speed of light", "a mountain village",
    "compound interest",
]  # fmt: skip


def prompts(n: int) -> list[list[dict]]:
    return [
        [{"role": "user", "content": f"Write a short paragraph about {TOPICS[i % len(TOPICS)]}."}] for i in range(n)
    ]


def run_batch(model: str, api_base: str | None, batch: list[list[dict]], concurrency: int, max_tokens: int) -> float:
    """Send every prompt with `concurrency` in flight; return completion tokens per second."""

    def one(messages: list[dict]) -> int:
        response = litellm.completion(
            model=model, api_base=api_base, messages=messages, max_tokens=max_tokens, temperature=0.0
        )
        return int(response.usage.completion_tokens)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, batch))
    return tokens / (time.perf_counter() - started)


def measure(label: str, call: Callable[[list[list[dict]], int], float], batch, levels) -> dict[int, float]:
    call(batch[:1], 1)  # warm-up: model load, first-call allocations
    results = {}
    for concurrency in levels:
        results[concurrency] = call(batch, concurrency)
        print(f"{label:<12} concurrency {concurrency:>2}: {results[concurrency]:8.1f} tok/s", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-home", type=Path, default=REPO_ROOT / ".conductor")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument(
        "--vllm-dtype", default=None, help="auto (bfloat16 on CPU) or float32 (default: bfloat16 where the CPU has it)"
    )
    parser.add_argument(
        "--vllm-lora",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start vLLM with --enable-lora as the Conductor server runs; without it vLLM also "
        "torch.compiles the model (slower first start, cached in ~/.cache/vllm)",
    )
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args()

    model_path = pull_default_model(args.model_home).resolve()
    batch = prompts(args.prompts)
    print(f"model {model_path.name}; {args.prompts} prompts, max_tokens {args.max_tokens}, greedy", flush=True)

    local: dict[int, float] = {}
    if not args.skip_local:
        local_backend.register()
        local = measure(
            "in-process",
            lambda b, c: run_batch(f"local/{model_path}", None, b, c, args.max_tokens),
            batch,
            args.concurrency,
        )

    started = time.perf_counter()
    with VllmServer(model_path, served_name="bench", enable_lora=args.vllm_lora, dtype=args.vllm_dtype) as server:
        elapsed = time.perf_counter() - started
        print(f"vLLM ready in {elapsed:.1f}s (dtype {server.dtype}, lora {args.vllm_lora})", flush=True)
        served = measure(
            "vllm",
            lambda b, c: run_batch("hosted_vllm/bench", server.base_url, b, c, args.max_tokens),
            batch,
            args.concurrency,
        )

    for concurrency in args.concurrency:
        if concurrency in local:
            ratio = served[concurrency] / local[concurrency]
            print(f"concurrency {concurrency:>2}: vLLM / in-process = {ratio:.1f}x")


if __name__ == "__main__":
    main()

"""Token-level masks for a plan grammar: xgrammar, the backend vLLM uses for the same regex.

Three users, one matcher, so the masks agree:
- the in-process backend masks logits while it samples (:class:`MaskingProcessor`);
- vLLM receives the regex itself as ``structured_outputs`` and builds the same masks server side
  (xgrammar 0.2.8 on both sides, same tokenizer, same stop token);
- the trainer replays the grammar along a stored completion (:func:`allowed_masks`) so current and
  proximal logprobs are taken under the mask the behaviour policy was sampled under.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

from conductor.config.pool import ModelSpec
from conductor.domain.plan_grammar import PlanGrammar
from conductor.inference.local_backend import PROVIDER

#: A plan grammar is a regex; an answer format's grammar is EBNF (`conductor.inference.structured`).
GrammarKind = Literal["regex", "ebnf"]

__all__ = [
    "GrammarKind",
    "GrammarMasks",
    "MaskingProcessor",
    "allowed_masks",
    "behaviour_sampling",
    "masks_for",
    "takes_grammar",
]


class GrammarMasks:
    """Compiled grammars for one tokenizer, cached by regex text (compiling costs seconds, a mask microseconds)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import xgrammar as xgr

        self.vocab_size = vocab_size
        eos = tokenizer.eos_token_id
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=[eos])
        self._compiler = xgr.GrammarCompiler(info, max_threads=2)
        self._compiled: dict[tuple[GrammarKind, str], Any] = {}
        self._lock = threading.Lock()

    def compiled(self, regex: str, kind: GrammarKind = "regex") -> Any:
        """`regex` compiled; with kind "ebnf" it is an EBNF grammar's text (an answer format's)."""
        with self._lock:
            key = (kind, regex)
            if key not in self._compiled:
                compile_ = self._compiler.compile_grammar if kind == "ebnf" else self._compiler.compile_regex
                self._compiled[key] = compile_(regex)
            return self._compiled[key]

    def matcher(self, regex: str, kind: GrammarKind = "regex") -> Any:
        import xgrammar as xgr

        return xgr.GrammarMatcher(self.compiled(regex, kind))


_per_tokenizer: dict[tuple[str, int, int], GrammarMasks] = {}
_per_tokenizer_lock = threading.Lock()


def masks_for(tokenizer: Any, vocab_size: int) -> GrammarMasks:
    """The process's compile cache for ``tokenizer`` (one per tokenizer directory and vocabulary)."""
    with _per_tokenizer_lock:
        key = (str(getattr(tokenizer, "name_or_path", "")), len(tokenizer), vocab_size)
        if key not in _per_tokenizer:
            _per_tokenizer[key] = GrammarMasks(tokenizer, vocab_size)
        return _per_tokenizer[key]


class MaskingProcessor:
    """A transformers logits processor: tokens the grammar forbids get -inf before sampling.

    Used for one generate() call of batch size 1: it accepts the token sampled at the previous
    step before computing the next mask, so its state is the grammar's state after the prefix.
    """

    def __init__(self, masks: GrammarMasks, regex: str, prompt_len: int, kind: GrammarKind = "regex") -> None:
        import xgrammar as xgr

        self._matcher = masks.matcher(regex, kind)
        self._bitmask = xgr.allocate_token_bitmask(1, masks.vocab_size)
        self._prompt_len = prompt_len
        self._xgr = xgr

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if input_ids.shape[1] > self._prompt_len:
            token = int(input_ids[0, -1])
            if not self._matcher.accept_token(token):  # pragma: no cover - only a masked token can be sampled
                raise RuntimeError(f"the grammar rejected token {token} that its own mask allowed")
        self._matcher.fill_next_token_bitmask(self._bitmask)
        self._xgr.apply_token_bitmask_inplace(scores, self._bitmask)
        return scores


def allowed_masks(masks: GrammarMasks, regex: str, completion_ids: Sequence[int]) -> Any:
    """Bool tensor [len(completion_ids), vocab]: what the grammar allowed before each completion token.

    Raises ValueError when a stored token is outside the grammar (the row was not sampled under it).
    """
    import torch
    import xgrammar as xgr

    matcher = masks.matcher(regex)
    bitmask = xgr.allocate_token_bitmask(1, masks.vocab_size)
    out = torch.zeros((len(completion_ids), masks.vocab_size), dtype=torch.bool)
    probe = torch.zeros((1, masks.vocab_size), dtype=torch.float32)
    for t, token in enumerate(completion_ids):
        matcher.fill_next_token_bitmask(bitmask)
        probe.zero_()
        xgr.apply_token_bitmask_inplace(probe, bitmask)
        out[t] = probe[0] == 0
        if matcher.is_terminated() or not matcher.accept_token(int(token)):
            raise ValueError(f"completion token {t} ({token}) is outside the grammar")
    return out


def takes_grammar(spec: ModelSpec) -> bool:
    """Whether a Conductor served as `spec` decodes under a plan grammar: the in-process backend and
    vLLM (`hosted_vllm/` with its URL) do; a hosted API or an unknown OpenAI-protocol server may
    ignore the field, and a grammar recorded but not applied would make the logprobs dishonest."""
    return spec.provider == PROVIDER or (spec.provider == "hosted_vllm" and bool(spec.api_base))


def behaviour_sampling(temperature: float, max_tokens: int, grammar: PlanGrammar | None) -> dict[str, Any]:
    """What a Conductor round records of its sampling. Top-p 1 and no top-k: the behaviour distribution is
    exactly softmax(logits / temperature), masked by the grammar when one was used (its regex, hash,
    version and backend are kept), which is what the trainer's importance ratio recomputes."""
    regex = grammar.regex() if grammar is not None else None
    return {
        "temperature": temperature,
        "max_tokens": max_tokens,
        "top_p": 1.0,
        "top_k": 0,
        "logprobs": "processed",
        "grammar": {**grammar.describe(), "regex": regex, "backend": "xgrammar"} if grammar is not None else None,
    }

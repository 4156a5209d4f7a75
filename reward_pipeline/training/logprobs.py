"""Per-token logprobs of stored completions under the current policy, at the temperature they were
sampled with. The ids come from the trace: nothing is re-tokenised."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pad_batch(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int
) -> tuple[Any, Any, Any, list[int]]:
    """Right-padded input ids, attention mask and completion mask, plus each row's prompt length."""
    import torch

    seqs = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    comp = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, (s, p) in enumerate(zip(seqs, prompts, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        comp[i, len(p) : len(s)] = 1.0
    return ids, attn, comp, [len(p) for p in prompts]


def token_logprobs(model: Any, ids: Any, attn: Any, temperatures: Any, allowed: Any | None = None) -> Any:
    """logprob of token t given tokens < t, for every position (the first is 0), under logits / T.

    `temperatures` has one value per row: the temperature that row was sampled at, so the result
    is comparable with the behaviour logprobs the server reported (processed logprobs). `allowed`
    (bool [rows, width, vocab], from :func:`grammar_masks`) restricts each position's softmax to the
    tokens the grammar allowed there: the distribution a grammar-constrained row was sampled from.
    """
    import torch

    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1, :].float()
    logits = logits / temperatures.view(-1, 1, 1)
    if allowed is not None:
        vocab = logits.shape[-1]
        logits = logits.masked_fill(~allowed[:, 1:, :vocab], float("-inf"))
    picked = torch.gather(logits, 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    lp = picked - torch.logsumexp(logits, dim=-1)
    # Shift back so position t holds the logprob of token t (position 0 has no prediction).
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)


def scatter_behaviour(behaviour: Sequence[Sequence[float]], prompt_lens: Sequence[int], width: int) -> Any:
    """Stored behaviour logprobs placed at their completion positions in a padded batch."""
    import torch

    out = torch.zeros((len(behaviour), width), dtype=torch.float32)
    for i, (b, p) in enumerate(zip(behaviour, prompt_lens, strict=True)):
        out[i, p : p + len(b)] = torch.tensor(b, dtype=torch.float32)
    return out


def grammar_masks(
    masks: Any,
    grammars: Sequence[str | None],
    completions: Sequence[Sequence[int]],
    prompt_lens: Sequence[int],
    width: int,
) -> Any | None:
    """Bool [rows, width, vocab]: per position, the tokens the row's grammar allowed there (all where
    a row or a position is unconstrained); None when no row of the batch had a grammar.

    `masks` is a :class:`conductor.inference.grammar.GrammarMasks` for the trainer's tokenizer.
    """
    if not any(grammars):
        return None
    import torch

    from conductor.inference.grammar import allowed_masks

    out = torch.ones((len(grammars), width, masks.vocab_size), dtype=torch.bool)
    for i, (regex, completion, p) in enumerate(zip(grammars, completions, prompt_lens, strict=True)):
        if regex:
            out[i, p : p + len(completion)] = allowed_masks(masks, regex, completion)
    return out

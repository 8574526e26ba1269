"""Turns the last-position logits of a step into next tokens, one row per sequence.

Greedy rows take the argmax. Other rows are scaled by temperature, cut by top-k and top-p on one
sort, and sampled by the exponential-race trick (argmax of p / E with E ~ Exp(1)), which needs
no cumulative search. A request with a seed draws its noise from its own generator, so its
output does not depend on what else shares the batch.
"""

import torch

from ragserve.engine.sampling_params import SamplingParams


class Sampler:
    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> list[int]:
        tokens = logits.argmax(dim=-1)
        random_rows = [i for i, p in enumerate(params) if not p.greedy]
        if random_rows:
            rows = torch.tensor(random_rows)
            chosen = self._sample(
                logits[rows],
                [params[i] for i in random_rows],
                [generators[i] for i in random_rows],
            )
            tokens[rows] = chosen
        return tokens.tolist()

    def top_logprobs(
        self, logits: torch.Tensor, params: list[SamplingParams]
    ) -> list[dict[int, float] | None]:
        """For rows that ask for logprobs: the top-n tokens' log-probabilities."""
        result: list[dict[int, float] | None] = [None] * len(params)
        rows = [i for i, p in enumerate(params) if p.logprobs]
        if rows:
            logprobs = torch.log_softmax(logits[torch.tensor(rows)], dim=-1)
            width = max(params[i].logprobs or 0 for i in rows)
            values, ids = logprobs.topk(width, dim=-1)
            for row, top_values, top_ids in zip(rows, values.tolist(), ids.tolist(), strict=True):
                n = params[row].logprobs or 0
                result[row] = dict(zip(top_ids[:n], top_values[:n], strict=True))
        return result

    def _sample(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> torch.Tensor:
        temperature = torch.tensor([p.temperature for p in params]).unsqueeze(1)
        logits = logits / temperature
        vocab = logits.shape[1]
        top_k = torch.tensor([min(p.top_k, vocab) if p.top_k > 0 else vocab for p in params])
        top_p = torch.tensor([p.top_p for p in params])
        order = None
        if (top_k < logits.shape[1]).any() or (top_p < 1).any():
            logits, order = logits.sort(dim=-1, descending=True)
            ranks = torch.arange(logits.shape[1]).unsqueeze(0)
            probs = torch.softmax(logits, dim=-1)
            # Keep a token while the mass before it is below top_p; the first always stays.
            mass_before = probs.cumsum(dim=-1) - probs
            cut = (ranks >= top_k.unsqueeze(1)) | (mass_before >= top_p.unsqueeze(1))
            logits = logits.masked_fill(cut, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        noise = torch.empty_like(probs)
        for row, generator in enumerate(generators):
            noise[row].exponential_(generator=generator or self.generator)
        picked = (probs / noise).argmax(dim=-1)
        if order is not None:
            picked = order.gather(1, picked.unsqueeze(1)).squeeze(1)
        return picked

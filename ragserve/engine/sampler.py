"""Turns the last-position logits of a step into next tokens, one row per sequence.

Greedy rows take the argmax. Other rows are scaled by temperature, cut by top-k and top-p on one
sort, and sampled by the exponential-race trick (argmax of p / E with E ~ Exp(1)), which needs
no cumulative search. A request with a seed draws its noise from its own generator, so its
output does not depend on what else shares the batch.

Draft tokens (speculative decoding, ngram.py) are verified here too: a greedy row accepts a
draft token while it is the argmax; a sampled row by speculative sampling, so that its tokens are
distributed exactly as if drawn one step at a time.
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

    def verify(
        self, logits: torch.Tensor, params: list[SamplingParams], drafts: list[list[int]]
    ) -> list[list[int]]:
        """Each drafted sequence's new tokens: its accepted draft tokens and one more. logits
        holds, per sequence in order, a row for each draft token and one after the last.

        A greedy sequence accepts a draft token while it is the argmax. A sampled one accepts
        draft token t with probability p(t) under its sampling distribution p; at the first
        rejection its token is drawn from p without t (renormalised), and after a fully
        accepted draft from the last row. Prompt lookup's draft puts all of its own probability
        on t, so this is speculative sampling's min(1, p/q) test, and the tokens are
        distributed exactly as plain sampling's (Leviathan et al., 2023)."""
        chosen = logits.argmax(dim=-1).tolist()
        result = []
        offset = 0
        for sequence_params, draft in zip(params, drafts, strict=True):
            rows = slice(offset, offset + len(draft) + 1)
            offset += len(draft) + 1
            if sequence_params.greedy:
                argmaxes = chosen[rows]
                accepted = 0
                while accepted < len(draft) and draft[accepted] == argmaxes[accepted]:
                    accepted += 1
                result.append(argmaxes[: accepted + 1])
            else:
                result.append(self._speculative_sample(logits[rows], sequence_params, draft))
        return result

    def _speculative_sample(
        self, logits: torch.Tensor, params: SamplingParams, draft: list[int]
    ) -> list[int]:
        # Only unseeded requests get drafts (SamplingParams.speculatable), so the noise comes
        # from the engine's generator.
        probs, order = self._filtered(logits, [params] * logits.shape[0])
        if order is not None:
            probs = torch.zeros_like(probs).scatter_(1, order, probs)
        chances = torch.rand(len(draft), generator=self.generator).tolist()
        tokens = []
        for row, (token, chance) in enumerate(zip(draft, chances, strict=True)):
            if chance < probs[row, token].item():
                tokens.append(token)
                continue
            rest = probs[row].clone()
            rest[token] = 0
            return [*tokens, self._race(rest)]
        return [*tokens, self._race(probs[-1])]

    def _race(self, probs: torch.Tensor) -> int:
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        return int((probs / noise).argmax())

    def _filtered(
        self, logits: torch.Tensor, params: list[SamplingParams]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each row's probabilities after temperature, top-k and top-p. Where a filter needed
        sorting, they are in descending order and the second value holds their token ids;
        otherwise they are in vocabulary order and it is None."""
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
        return torch.softmax(logits, dim=-1), order

    def _sample(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> torch.Tensor:
        probs, order = self._filtered(logits, params)
        noise = torch.empty_like(probs)
        for row, generator in enumerate(generators):
            noise[row].exponential_(generator=generator or self.generator)
        picked = (probs / noise).argmax(dim=-1)
        if order is not None:
            picked = order.gather(1, picked.unsqueeze(1)).squeeze(1)
        return picked

"""Turns the last-position logits of a step into next tokens, one row per sequence.

Greedy rows take the argmax. Other rows are scaled by temperature, cut by top-k and top-p on one
sort, and sampled by inverse CDF: one uniform number per row, located in the row's cumulative
probabilities (Sampler._draw). An exponential race over the vocabulary (argmax of p / E,
E ~ Exp(1)) needs a random number per token: at 32 rows of a 49,152-token vocabulary it cost
30-40 ms a step. A request with a seed draws from its
own generator, so its output does not depend on what else shares the batch.

Draft tokens (speculative decoding, ngram.py) are verified here too: a greedy row accepts a
draft token while it is the argmax; a sampled row by speculative sampling, so that its tokens are
distributed exactly as if drawn one step at a time.
"""

import torch
import torch.nn.functional as F

from ragserve.engine.outputs import Logprob, PositionLogprobs
from ragserve.engine.sampling_params import SamplingParams

# Tokens per block of the two-level draw (Sampler._draw).
DRAW_BLOCK = 256


def position_logprobs(
    logprobs: torch.Tensor, tokens: list[int], counts: list[int]
) -> list[PositionLogprobs]:
    """Per row of log-probabilities: the given token's, with its rank, and the row's top
    counts[row] tokens' (tokens masked to -inf left out)."""
    chosen_ids = torch.tensor(tokens).unsqueeze(1)
    chosen = logprobs.gather(1, chosen_ids)
    ranks = ((logprobs > chosen).sum(dim=-1) + 1).tolist()
    values, ids = logprobs.topk(max(counts, default=0), dim=-1)
    result = []
    for row, token in enumerate(tokens):
        entry = {token: Logprob(chosen[row, 0].item(), ranks[row])}
        top_ids = ids[row, : counts[row]].tolist()
        top_values = values[row, : counts[row]].tolist()
        for rank, (top_id, value) in enumerate(zip(top_ids, top_values, strict=True), start=1):
            if value > float("-inf"):
                entry.setdefault(top_id, Logprob(value, rank))
        result.append(entry)
    return result


class Sampler:
    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> list[int]:
        random_rows = [i for i, p in enumerate(params) if not p.greedy]
        if len(random_rows) == len(params):  # no copy of the rows when all are sampled
            return self._sample(logits, params, generators).tolist()
        tokens = logits.argmax(dim=-1)
        if random_rows:
            rows = torch.tensor(random_rows)
            chosen = self._sample(
                logits[rows],
                [params[i] for i in random_rows],
                [generators[i] for i in random_rows],
            )
            tokens[rows] = chosen
        return tokens.tolist()

    def logprobs(
        self, logits: torch.Tensor, params: list[SamplingParams], tokens: list[int]
    ) -> list[PositionLogprobs | None]:
        """For rows that ask for logprobs: the chosen token's and the top-n, under the
        distribution it was drawn from (logits already adjusted; temperature 1 for greedy)."""
        result: list[PositionLogprobs | None] = [None] * len(params)
        rows = [i for i, p in enumerate(params) if p.logprobs is not None]
        if rows:
            temperature = torch.tensor([params[i].temperature or 1.0 for i in rows]).unsqueeze(1)
            scaled = logits[torch.tensor(rows)].float() / temperature
            found = position_logprobs(
                torch.log_softmax(scaled, dim=-1),
                [tokens[i] for i in rows],
                [params[i].logprobs or 0 for i in rows],
            )
            for row, entry in zip(rows, found, strict=True):
                result[row] = entry
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
        result: list[list[int]] = []
        sampled: list[tuple[int, int, list[int], SamplingParams]] = []
        offset = 0
        for sequence_params, draft in zip(params, drafts, strict=True):
            if sequence_params.greedy:
                argmaxes = chosen[offset : offset + len(draft) + 1]
                accepted = 0
                while accepted < len(draft) and draft[accepted] == argmaxes[accepted]:
                    accepted += 1
                result.append(argmaxes[: accepted + 1])
            else:
                sampled.append((len(result), offset, draft, sequence_params))
                result.append([])
            offset += len(draft) + 1
        if sampled:
            for index, tokens in self._speculative_sample(logits, sampled):
                result[index] = tokens
        return result

    def _speculative_sample(
        self, logits: torch.Tensor, sampled: list[tuple[int, int, list[int], SamplingParams]]
    ) -> list[tuple[int, list[int]]]:
        """verify's sampled sequences, (result index, first row, draft, params) each, all
        filtered, tested and drawn together: one at a time, their full-vocabulary work cost
        more than the forward pass at 32 sequences."""
        rows = torch.cat([torch.arange(first, first + len(d) + 1) for _, first, d, _ in sampled])
        row_params = [p for _, _, d, p in sampled for _ in range(len(d) + 1)]
        # Only unseeded requests get drafts (SamplingParams.speculatable), so the randomness
        # comes from the engine's generator.
        probs, order = self._filtered(logits[rows], row_params)
        if order is not None:
            probs = torch.zeros_like(probs).scatter_(1, order, probs)
        starts, draft_rows, draft_tokens = [], [], []
        for _, _, draft, _ in sampled:
            starts.append(len(draft_rows) + len(starts))
            draft_rows += [starts[-1] + i for i in range(len(draft))]
            draft_tokens += draft
        accept_probs = probs[draft_rows, draft_tokens].tolist() if draft_rows else []
        chances = torch.rand(len(draft_rows), generator=self.generator).tolist()
        final_rows, excluded, kept = [], [], []
        position = 0
        for start, (_, _, draft, _) in zip(starts, sampled, strict=True):
            accepted = 0
            while (
                accepted < len(draft)
                and chances[position + accepted] < accept_probs[position + accepted]
            ):
                accepted += 1
            position += len(draft)
            kept.append(draft[:accepted])
            final_rows.append(start + accepted)
            # At the first rejection the token comes from p without the rejected one.
            excluded.append(draft[accepted] if accepted < len(draft) else -1)
        final = probs[final_rows].clone()
        for row, token in enumerate(excluded):
            if token >= 0:
                final[row, token] = 0
        drawn = self._draw(final, [None] * len(final_rows)).tolist()
        return [
            (index, [*tokens, token])
            for (index, _, _, _), tokens, token in zip(sampled, kept, drawn, strict=True)
        ]

    def _draw(self, probs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
        """One index per row of probs (rows need not sum to 1), each row drawing its uniform
        number from its generator or the engine's. Found in two levels, so that only sums run
        over the whole vocabulary: the block of DRAW_BLOCK tokens where the row's cumulative
        sum passes the draw (block sums in float32, accumulated in float64), then the token
        within it (float64)."""
        rows, vocab = probs.shape
        if vocab % DRAW_BLOCK:
            probs = F.pad(probs, (0, DRAW_BLOCK - vocab % DRAW_BLOCK))
        blocks = probs.view(rows, -1, DRAW_BLOCK)
        block_sums = blocks.sum(dim=-1).double()
        cumulative = block_sums.cumsum(dim=-1)
        draws = torch.cat(
            [torch.rand(1, dtype=torch.float64, generator=g or self.generator) for g in generators]
        )
        targets = (draws * cumulative[:, -1]).unsqueeze(1)
        block = torch.searchsorted(cumulative, targets, right=True).clamp(max=blocks.shape[1] - 1)
        before = (cumulative.gather(1, block) - block_sums.gather(1, block)).squeeze(1)
        inside = blocks[torch.arange(rows), block.squeeze(1)]
        within = inside.cumsum(dim=-1, dtype=torch.float64) + before.unsqueeze(1)
        index = torch.searchsorted(within, targets, right=True).clamp(max=DRAW_BLOCK - 1)
        # The block's own sum and its running sum round apart: a draw past the running sum's
        # end falls back to the block's last token of non-zero probability, never a zero one.
        last_nonzero = torch.where(inside > 0, torch.arange(DRAW_BLOCK), -1).cummax(dim=-1).values
        index = last_nonzero.gather(1, index).clamp(min=0).squeeze(1)
        return block.squeeze(1) * DRAW_BLOCK + index

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
        picked = self._draw(probs, generators)
        if order is not None:
            picked = order.gather(1, picked.unsqueeze(1)).squeeze(1)
        return picked

"""Adjusts a step's logits before sampling, for the sequences whose parameters ask for it:
logit bias, min_tokens, the repetition, presence and frequency penalties, and last the masks of
constrained sequences (structured output).

Definitions follow vLLM (and OpenAI for the penalties): the repetition penalty covers prompt
and output tokens, the presence and frequency penalties only the output. Rows are adjusted one
by one because few sequences use these and each needs its own token counts.

Rows are adjusted in place: the runner's logits are its own, fresh each step, and log-probs are
read from them before (they describe the model's own distribution); a copy of a [batch,
vocabulary] matrix per constrained step was a measurable share of its cost.
"""

import torch

from ragserve.engine.sequence import Sequence
from ragserve.engine.structured import Masks, apply_masks


class LogitsProcessor:
    def __init__(self, eos_token_ids: set[int]) -> None:
        self.eos_token_ids = eos_token_ids

    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence], masks: Masks | None = None
    ) -> torch.Tensor:
        """Adjust every row as its sequence asks, in place, then apply the constrained rows'
        masks; return the same tensor."""
        # The logits come from the forward pass's inference mode, and only there may they
        # change in place.
        with torch.inference_mode():
            for row, seq in enumerate(seqs):
                if seq.params.adjusts_logits:
                    logits[row] = self._adjust(logits[row], seq)
            if masks is not None:
                apply_masks(logits, masks)
        return logits

    def _adjust(self, row: torch.Tensor, seq: Sequence) -> torch.Tensor:
        params = seq.params
        vocab = row.shape[0]
        if params.logit_bias:
            ids = torch.tensor(list(params.logit_bias), dtype=torch.long)
            row[ids] += torch.tensor(list(params.logit_bias.values()), dtype=row.dtype)
        if params.repetition_penalty != 1:
            seen = torch.zeros(vocab, dtype=torch.bool)
            seen[torch.tensor(seq.token_ids, dtype=torch.long)] = True
            penalised = torch.where(
                row > 0, row / params.repetition_penalty, row * params.repetition_penalty
            )
            row = torch.where(seen, penalised, row)
        output = seq.output_token_ids
        if output and (params.presence_penalty or params.frequency_penalty):
            counts = torch.bincount(torch.tensor(output, dtype=torch.long), minlength=vocab)
            row = row - params.frequency_penalty * counts.to(row.dtype)
            row = row - params.presence_penalty * (counts > 0).to(row.dtype)
        if seq.num_output_tokens < params.min_tokens:
            banned = set(params.stop_token_ids or [])
            if not params.ignore_eos:
                banned |= self.eos_token_ids
            row[torch.tensor(sorted(banned), dtype=torch.long)] = float("-inf")
        return row

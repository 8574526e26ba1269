"""Adjusts a step's logits before sampling, for the sequences whose parameters ask for it:
logit bias, min_tokens, the repetition, presence and frequency penalties, and last the masks of
constrained sequences (structured output).

Definitions follow vLLM (and OpenAI for the penalties): the repetition penalty covers prompt
and output tokens, the presence and frequency penalties only the output. Rows are adjusted one
by one because few sequences use these and each needs its own token counts.
"""

import torch

from ragserve.engine.sequence import Sequence
from ragserve.engine.structured import mask_logits


class LogitsProcessor:
    def __init__(self, eos_token_ids: set[int]) -> None:
        self.eos_token_ids = eos_token_ids

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """Return logits with every row adjusted as its sequence asks (a copy when any is)."""
        rows = [i for i, seq in enumerate(seqs) if seq.params.adjusts_logits]
        constrained = any(seq.matcher is not None for seq in seqs)
        if not rows and not constrained:
            return logits
        logits = logits.clone()
        for row in rows:
            logits[row] = self._adjust(logits[row], seqs[row])
        if constrained:
            mask_logits(logits, [seq.matcher for seq in seqs])
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

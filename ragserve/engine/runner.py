"""Runs one scheduled batch: flattens its tokens, builds attention metadata, samples.

Metadata is built once per step with numpy and shared by all layers; only sequences whose chunk
reaches their last token get logits, so a prefill chunk costs no vocabulary projection.
"""

import time

import numpy as np
import torch

from ragserve.engine.attention import AttentionMetadata
from ragserve.engine.kv_cache import KVCache
from ragserve.engine.logits_processor import LogitsProcessor
from ragserve.engine.models.spec import DecoderModel
from ragserve.engine.sampler import Sampler, position_logprobs
from ragserve.engine.scheduler import ScheduledBatch
from ragserve.engine.sequence import Sequence
from ragserve.engine.structured import Masks, fill_masks_soon

# Hidden rows turned into logits at a time for prompt logprobs (49,152 floats each).
PROMPT_LOGPROB_ROWS = 256


class ModelRunner:
    def __init__(
        self,
        model: DecoderModel,
        kv_cache: KVCache,
        sampler: Sampler,
        logits_processor: LogitsProcessor,
    ) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.sampler = sampler
        self.logits_processor = logits_processor
        self.kv_layers = [kv_cache.layer(i) for i in range(model.spec.num_layers)]

    def build_metadata(self, batch: ScheduledBatch) -> AttentionMetadata:
        block_size = self.kv_cache.block_size
        starts = np.array([seq.num_computed_tokens for seq in batch.seqs], dtype=np.int64)
        counts = np.array(batch.num_new_tokens, dtype=np.int64)
        max_blocks = -(-int((starts + counts).max(initial=0)) // block_size)
        tables = np.zeros((len(batch.seqs), max_blocks), dtype=np.int64)
        for row, seq in enumerate(batch.seqs):
            table = seq.block_table[:max_blocks]
            tables[row, : len(table)] = table
        token_seqs = np.repeat(np.arange(len(batch.seqs)), counts)
        # Each token's position: its sequence's start plus its index within the sequence.
        first_token = np.cumsum(counts) - counts
        positions = starts[token_seqs] + np.arange(len(token_seqs)) - first_token[token_seqs]
        return AttentionMetadata(
            slot_blocks=torch.from_numpy(tables[token_seqs, positions // block_size]),
            slot_offsets=torch.from_numpy(positions % block_size),
            block_tables=torch.from_numpy(tables),
            token_seqs=torch.from_numpy(token_seqs),
            token_lens=torch.from_numpy(positions + 1),
        )

    def run(self, batch: ScheduledBatch) -> tuple[dict[Sequence, list[int]], float]:
        """Compute the batch; return the new tokens of each sequence that finished computing
        all its tokens this step (one sampled token, or a verified draft's accepted tokens and
        the one after them), and the seconds the forward pass took. Sequences that asked for
        logprobs get this step's appended to seq.logprobs, and those that asked for prompt
        logprobs the chunk's to seq.prompt_logprobs."""
        started = time.perf_counter()
        token_ids: list[int] = []
        sample_rows: list[int] = []
        sample_seqs: list[Sequence] = []
        verify_rows: list[int] = []
        prompt_rows: list[tuple[Sequence, range]] = []
        for seq, num in zip(batch.seqs, batch.num_new_tokens, strict=True):
            start = seq.num_computed_tokens
            draft = batch.drafts.get(seq, [])
            if seq.params.prompt_logprobs is not None:
                # Position p predicts token p + 1; positions already recorded (before a
                # preemption) and the one predicting the first output token are left out.
                end = min(start + num, seq.num_prompt_tokens - 1)
                first = max(start, len(seq.prompt_logprobs) - 1)
                if first < end:
                    offset = len(token_ids) - start
                    prompt_rows.append((seq, range(first + offset, end + offset)))
            token_ids.extend(seq.token_ids[start : start + num - len(draft)])
            token_ids.extend(draft)
            if draft:
                verify_rows.extend(range(len(token_ids) - num, len(token_ids)))
            elif start + num == seq.num_tokens:
                sample_rows.append(len(token_ids) - 1)
                sample_seqs.append(seq)
        meta = self.build_metadata(batch)
        # One batch-invariant sequence makes the whole step invariant: its rows share the
        # step's matmuls with everyone else's.
        invariant = any(seq.params.batch_invariant for seq in batch.seqs)
        vocab_size = self.model.spec.vocab_size
        masks = fill_masks_soon(
            [seq.matcher for seq in sample_seqs],
            vocab_size,
            [seq.ending.forced_token if seq.ending else None for seq in sample_seqs],
        )
        hidden = self.model.forward(
            torch.tensor(token_ids), meta.token_lens - 1, meta, self.kv_layers, invariant
        )
        forward_s = time.perf_counter() - started
        for seq, rows in prompt_rows:
            self._prompt_logprobs(seq, hidden[rows.start : rows.stop], invariant)
        if not sample_rows and not verify_rows:
            return {}, forward_s
        # One vocabulary projection for all rows: it streams the whole embedding matrix.
        logits = self.model.logits(hidden[torch.tensor(sample_rows + verify_rows)], invariant)
        new_tokens = self._sample(
            logits[: len(sample_rows)], sample_seqs, masks.result() if masks else None
        )
        drafted = list(batch.drafts)
        verified = self.sampler.verify(
            logits[len(sample_rows) :],
            [seq.params for seq in drafted],
            [batch.drafts[seq] for seq in drafted],
        )
        new_tokens.update(zip(drafted, verified, strict=True))
        return new_tokens, forward_s

    def _sample(
        self, logits: torch.Tensor, seqs: list[Sequence], masks: Masks | None
    ) -> dict[Sequence, list[int]]:
        if not seqs:
            return {}
        params = [s.params for s in seqs]
        adjusted = self.logits_processor(logits, seqs, masks)
        tokens = self.sampler(adjusted, params, [s.generator for s in seqs])
        found = self.sampler.logprobs(adjusted, params, tokens)
        for seq, logprobs in zip(seqs, found, strict=True):
            if logprobs is not None:
                seq.logprobs.append(logprobs)
        return {seq: [token] for seq, token in zip(seqs, tokens, strict=True)}

    def _prompt_logprobs(self, seq: Sequence, hidden: torch.Tensor, invariant: bool) -> None:
        """The model's log-probabilities of the prompt tokens these hidden rows predict, in
        pieces so that a long chunk's logits never all exist at once."""
        for start in range(0, len(hidden), PROMPT_LOGPROB_ROWS):
            rows = hidden[start : start + PROMPT_LOGPROB_ROWS]
            position = len(seq.prompt_logprobs)
            tokens = seq.prompt_token_ids[position : position + len(rows)]
            logprobs = torch.log_softmax(self.model.logits(rows, invariant).float(), dim=-1)
            counts = [seq.params.prompt_logprobs or 0] * len(rows)
            seq.prompt_logprobs.extend(position_logprobs(logprobs, tokens, counts))

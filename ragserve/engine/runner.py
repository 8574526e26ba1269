"""Runs one scheduled batch: flattens its tokens, builds attention metadata, samples.

Metadata is built once per step with numpy and shared by all layers; only sequences whose chunk
reaches their last token get logits, so a prefill chunk costs no vocabulary projection.
"""

import time

import numpy as np
import torch

from ragserve.engine.attention import AttentionMetadata, PrefillSpan
from ragserve.engine.kv_cache import KVCache
from ragserve.engine.logits_processor import LogitsProcessor
from ragserve.engine.model import LlamaModel
from ragserve.engine.sampler import Sampler
from ragserve.engine.scheduler import ScheduledBatch
from ragserve.engine.sequence import Sequence


class ModelRunner:
    def __init__(
        self,
        model: LlamaModel,
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
        decodes = batch.seqs[: batch.num_decodes]
        context_lens = np.array([s.num_computed_tokens + 1 for s in decodes], dtype=np.int64)
        max_blocks = -(-int(context_lens.max(initial=0)) // block_size)
        tables = np.zeros((len(decodes), max_blocks), dtype=np.int64)
        for row, seq in enumerate(decodes):
            table = seq.block_table[:max_blocks]
            tables[row, : len(table)] = table
        # Flat slot of every new token: decodes write at their last position.
        slots = [
            tables[np.arange(len(decodes)), (context_lens - 1) // block_size] * block_size
            + (context_lens - 1) % block_size
        ]
        prefills = []
        offset = len(decodes)
        for seq, num in zip(
            batch.seqs[len(decodes) :], batch.num_new_tokens[len(decodes) :], strict=True
        ):
            start = seq.num_computed_tokens
            table = np.asarray(seq.block_table, dtype=np.int64)
            positions = np.arange(start, start + num)
            slots.append(table[positions // block_size] * block_size + positions % block_size)
            mask = None
            if start:
                keys = torch.arange(start + num).unsqueeze(0)
                mask = keys <= torch.arange(start, start + num).unsqueeze(1)
            num_blocks = -(-(start + num) // block_size)
            block_ids = torch.from_numpy(table[:num_blocks])
            prefills.append(PrefillSpan(offset, offset + num, block_ids, start + num, mask))
            offset += num
        slot_mapping = torch.from_numpy(np.concatenate(slots))
        return AttentionMetadata(
            slot_blocks=slot_mapping // block_size,
            slot_offsets=slot_mapping % block_size,
            num_decodes=len(decodes),
            decode_block_tables=torch.from_numpy(tables),
            decode_context_lens=torch.from_numpy(context_lens),
            prefills=prefills,
        )

    def run(self, batch: ScheduledBatch) -> tuple[dict[Sequence, list[int]], float]:
        """Compute the batch; return the new tokens of each sequence that finished computing
        all its tokens this step (one sampled token, or a verified draft's accepted tokens and
        the one after them), and the seconds the forward pass took. Sequences that asked for
        logprobs get this step's appended to seq.logprobs."""
        started = time.perf_counter()
        token_ids: list[int] = []
        positions: list[int] = []
        sample_rows: list[int] = []
        sample_seqs: list[Sequence] = []
        verify_rows: list[int] = []
        for seq, num in zip(batch.seqs, batch.num_new_tokens, strict=True):
            start = seq.num_computed_tokens
            draft = batch.drafts.get(seq, [])
            token_ids.extend(seq.token_ids[start : start + num - len(draft)])
            token_ids.extend(draft)
            positions.extend(range(start, start + num))
            if draft:
                verify_rows.extend(range(len(token_ids) - num, len(token_ids)))
            elif start + num == seq.num_tokens:
                sample_rows.append(len(token_ids) - 1)
                sample_seqs.append(seq)
        meta = self.build_metadata(batch)
        hidden = self.model.forward(
            torch.tensor(token_ids), torch.tensor(positions), meta, self.kv_layers
        )
        forward_s = time.perf_counter() - started
        if not sample_rows and not verify_rows:
            return {}, forward_s
        # One vocabulary projection for all rows: it streams the whole embedding matrix.
        logits = self.model.logits(hidden[torch.tensor(sample_rows + verify_rows)])
        new_tokens = self._sample(logits[: len(sample_rows)], sample_seqs)
        new_tokens.update(self._verify(logits[len(sample_rows) :], batch.drafts))
        return new_tokens, forward_s

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> dict[Sequence, list[int]]:
        if not seqs:
            return {}
        params = [s.params for s in seqs]
        # Logprobs describe the model's own distribution, so they are read before adjustment.
        for seq, logprobs in zip(seqs, self.sampler.top_logprobs(logits, params), strict=True):
            if logprobs is not None:
                seq.logprobs.append(logprobs)
        adjusted = self.logits_processor(logits, seqs)
        tokens = self.sampler(adjusted, params, [s.generator for s in seqs])
        return {seq: [token] for seq, token in zip(seqs, tokens, strict=True)}

    @staticmethod
    def _verify(
        logits: torch.Tensor, drafts: dict[Sequence, list[int]]
    ) -> dict[Sequence, list[int]]:
        """Greedy verification: a draft token is accepted while it is the argmax after the
        tokens before it; the argmax after the last accepted one comes free."""
        chosen = logits.argmax(dim=-1).tolist()
        result = {}
        offset = 0
        for seq, draft in drafts.items():
            argmaxes = chosen[offset : offset + len(draft) + 1]
            offset += len(draft) + 1
            accepted = 0
            while accepted < len(draft) and draft[accepted] == argmaxes[accepted]:
                accepted += 1
            result[seq] = argmaxes[: accepted + 1]
        return result

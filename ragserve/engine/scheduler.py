"""Decides, each step, which tokens of which sequences run. Admission happens here.

One token budget per step: running decodes first, then unfinished prefills, then new requests from
the fair queue, each prefill cut to what is left of the budget (chunked prefill), so a long prompt
delays the running decodes by at most one step. Greedy and unseeded sampled decodes get draft tokens
to verify in the same step (speculative decoding, ngram.py): all of them while few decode, past that
only those whose drafts have mostly been accepted. A waiting request is admitted only when the KV
blocks for its uncached tokens plus an output reserve are free. A running sequence that cannot grow
preempts the most recently admitted one (recompute: its blocks are freed and it goes back to the
queue, where its cached prefix usually survives).
"""

import time
from dataclasses import dataclass, field

from ragserve.engine.block_manager import BlockManager
from ragserve.engine.config import EngineConfig
from ragserve.engine.fairness import FairQueue
from ragserve.engine.ngram import propose
from ragserve.engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledBatch:
    """Sequences to run this step, single-token decodes first, with how many new tokens each
    computes. A decode with draft tokens computes its last token and the draft, and follows
    the single-token decodes (it attends with several queries, like a prefill chunk)."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    num_decodes: int = 0
    drafts: dict[Sequence, list[int]] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    def add(self, seq: Sequence, num_new_tokens: int) -> None:
        self.seqs.append(seq)
        self.num_new_tokens.append(num_new_tokens)


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.block_manager = block_manager
        self.waiting = FairQueue()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    @property
    def num_queued_tokens(self) -> int:
        return self.waiting.num_tokens

    def has_unfinished(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def add(self, seq: Sequence) -> None:
        self.waiting.push(seq)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.config.max_num_batched_tokens
        self._schedule_decodes(batch, budget)
        budget -= batch.num_tokens
        for seq in self.running:
            if budget == 0:
                break
            # Decodes have exactly one uncomputed token, so this picks the unfinished prefills.
            if seq.num_uncomputed_tokens > 1:
                num = min(seq.num_uncomputed_tokens, budget)
                batch.add(seq, num)
                budget -= num
        while budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting.peek()
            if seq is None or not self.block_manager.can_allocate(seq, self._reserve(seq)):
                break
            self.waiting.remove(seq)
            self.block_manager.allocate(seq)
            seq.status = SequenceStatus.RUNNING
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
            self.running.append(seq)
            num = min(seq.num_uncomputed_tokens, budget)
            batch.add(seq, num)
            budget -= num
        for seq, num in zip(batch.seqs, batch.num_new_tokens, strict=True):
            prompt_part = max(0, min(num, seq.num_prompt_tokens - seq.num_computed_tokens))
            self.waiting.charge(seq.user, prompt_part, 0)
        return batch

    def _reserve(self, seq: Sequence) -> int:
        return min(self.config.output_reserve_tokens, seq.max_tokens - seq.num_output_tokens)

    def _schedule_decodes(self, batch: ScheduledBatch, budget: int) -> None:
        index = 0
        while index < len(self.running) and batch.num_tokens < budget:
            seq = self.running[index]
            if seq.num_uncomputed_tokens != 1:
                index += 1
                continue
            while not self.block_manager.can_append(seq, 0):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                break
            self.block_manager.append_slots(seq, 0)
            batch.add(seq, 1)
            index += 1
        batch.num_decodes = len(batch.seqs)
        if self.config.speculative_tokens and batch.num_decodes:
            self._add_drafts(batch, budget - batch.num_tokens)

    def _drafts_pay(self, seq: Sequence, num_decodes: int) -> bool:
        if not seq.params.speculatable:
            return False
        if num_decodes <= self.config.speculative_max_batch or seq.draft_acceptance is None:
            return True
        return seq.draft_acceptance >= self.config.speculative_min_acceptance

    def _add_drafts(self, batch: ScheduledBatch, spare: int) -> None:
        single, drafted = [], []
        num_decodes = batch.num_decodes
        for seq in batch.seqs:
            # The draft plus the token after it must fit in max_tokens and the step's budget.
            room = min(
                self.config.speculative_tokens,
                seq.max_tokens - seq.num_output_tokens - 1,
                spare,
            )
            draft = propose(seq.token_ids, room) if self._drafts_pay(seq, num_decodes) else []
            if draft and self.block_manager.can_append(seq, len(draft)):
                self.block_manager.append_slots(seq, len(draft))
                batch.drafts[seq] = draft
                spare -= len(draft)
                drafted.append(seq)
            else:
                single.append(seq)
        batch.seqs = single + drafted
        batch.num_new_tokens = [1] * len(single) + [1 + len(batch.drafts[s]) for s in drafted]
        batch.num_decodes = len(single)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.push(seq)

    def postprocess(self, batch: ScheduledBatch, sampled: dict[Sequence, list[int]]) -> None:
        """Record the computed tokens and the sampled ones; publish newly full blocks."""
        for seq, num in zip(batch.seqs, batch.num_new_tokens, strict=True):
            tokens = sampled.get(seq, [])
            draft = batch.drafts.get(seq)
            if draft is None:
                seq.num_computed_tokens += num
            else:
                # The sampled tokens are the accepted draft plus one; the keys and values of the
                # rejected draft tokens are overwritten when those positions are computed.
                seq.num_computed_tokens += len(tokens)
                self.num_draft_tokens += len(draft)
                self.num_accepted_tokens += len(tokens) - 1
                share = (len(tokens) - 1) / len(draft)
                previous = seq.draft_acceptance
                seq.draft_acceptance = share if previous is None else (previous + share) / 2
            seq.token_ids.extend(tokens)
            self.waiting.charge(seq.user, 0, len(tokens))
            self.block_manager.publish_computed_blocks(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.block_manager.free(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.finished_time = time.monotonic()

"""One engine request while it runs: its choices (a sequence and a detokenizer each), the
choices still held back, and how its progress becomes a RequestOutput."""

from dataclasses import dataclass

from ragserve.engine.detokenizer import IncrementalDetokenizer
from ragserve.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from ragserve.engine.sequence import Sequence


@dataclass
class Choice:
    seq: Sequence
    detokenizer: IncrementalDetokenizer

    def output(self, eos_token_ids: set[int], request_finished: bool) -> CompletionOutput:
        seq = self.seq
        stop_reason: str | int | None = self.detokenizer.stopped_by
        if stop_reason is None and seq.finish_reason == "stop" and seq.output_token_ids:
            last = seq.output_token_ids[-1]
            stop_reason = None if last in eos_token_ids else last
        return CompletionOutput(
            index=seq.index,
            text=self.detokenizer.visible_text(seq.is_finished or request_finished),
            token_ids=list(seq.output_token_ids),
            finish_reason=seq.finish_reason,
            stop_reason=stop_reason,
            logprobs=list(seq.logprobs) if seq.params.logprobs is not None else None,
            closed_early=seq.ending is not None and seq.ending.closed_early,
        )


@dataclass
class RequestState:
    prompt: str | None
    choices: list[Choice]
    # Choices 1..n-1 wait here until choice 0 has computed the prompt, so that they find its
    # full blocks in the prefix cache instead of computing the same prompt n times.
    held: list[Sequence]

    @property
    def finished(self) -> bool:
        return all(choice.seq.is_finished for choice in self.choices)

    def output(self, eos_token_ids: set[int]) -> RequestOutput:
        first = self.choices[0].seq
        finished = self.finished
        finished_times = [c.seq.finished_time for c in self.choices if c.seq.finished_time]
        return RequestOutput(
            request_id=first.request_id,
            prompt=self.prompt,
            prompt_token_ids=first.prompt_token_ids,
            outputs=[choice.output(eos_token_ids, finished) for choice in self.choices],
            finished=finished,
            num_cached_tokens=first.num_cached_tokens,
            metrics=RequestMetrics(
                arrival_time=first.arrival_time,
                first_scheduled_time=first.first_scheduled_time,
                first_token_time=first.first_token_time,
                finished_time=max(finished_times) if finished else None,
                num_preemptions=sum(c.seq.num_preemptions for c in self.choices),
            ),
            prompt_logprobs=(
                list(first.prompt_logprobs) if first.params.prompt_logprobs is not None else None
            ),
        )

"""Answers from evidence: a generated answer whose citations check out, an exact quote of the
best evidence, or a refusal.

retrieve permitted chunks -> (rerank) -> select the best sentences of those chunks (evidence.py,
so only permitted text is a candidate) -> answerability (answerability.py): refuse at once when
the evidence is unlikely to hold an answer -> a short prompt of the numbered sentences ->
generate -> check every sentence of the answer against the sentence it cites -> if any is
unsupported (or the model declined) and the evidence is confident, quote the best sentence
exactly with its citation and span (mode "extractive"); else the refusal. citations.py says
when a source supports a sentence. With a client's JSON schema the model's output is held to
it and checked value by value instead (structured_answer.py), without the quote fallback.

The refusal is worded the same whether the evidence is missing or not permitted.
"""

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.structured import OutputConstraint
from ragserve.rag.answerability import Answerability, signals
from ragserve.rag.citations import Citation, CitationChecker
from ragserve.rag.documents import AccessFilter
from ragserve.rag.evidence import EvidenceSelector, Sentence
from ragserve.rag.prompt import DATAMARK, REFUSAL, BuiltPrompt, PromptBuilder
from ragserve.rag.rerank import Generate, Reranker
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from ragserve.rag.structured_answer import (
    answer_schema,
    check_value,
    evidence_numbers,
    parse_json,
)

logger = logging.getLogger(__name__)

Mode = Literal["generated", "extractive", "refused"]


@dataclass
class AnswerSettings:
    top_k: int = RetrievalSettings.top_k
    # A citation must reach this support score (0-1) to be kept.
    support_threshold: float = 0.6
    max_tokens: int = 48
    # Output tokens of an answer held to a client's JSON schema.
    structured_max_tokens: int = 128
    # Quote the best evidence when a generated answer fails the check (or the model declines)
    # and answerability is confident; off, such answers are refused.
    extractive_fallback: bool = True
    # Numbers and multi-word names must occur in the cited source as written; off, content
    # words alone decide (measured in the evaluation's ablation).
    strict_support: bool = True
    # A quote also takes the second-best sentence when its score is within this of the best.
    quote_margin: float = 0.05
    # "quote": the best evidence quoted, no model call; "generate": the model answers from the
    # evidence, checked, with the quote as fallback (Settings.answer_style says why).
    style: Literal["generate", "quote"] = "quote"


@dataclass
class AnswerResult:
    answer: str
    mode: Mode
    citations: list[Citation] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # The calibrated probability that the evidence answers the question.
    answerability: float | None = None
    # A schema answer: the parsed JSON (answer is its JSON text), and the sources of each
    # supported value by JSON pointer.
    value: Any = None
    field_citations: dict[str, list[int]] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return self.mode == "refused"


def refusal(answerability: float | None = None) -> AnswerResult:
    return AnswerResult(REFUSAL, "refused", answerability=answerability)


@dataclass
class AnswerEvent:
    """A piece of streamed text, or (when result is set) the final answer."""

    text: str = ""
    result: AnswerResult | None = None


class AnswerService:
    def __init__(
        self,
        retriever: Retriever,
        selector: EvidenceSelector,
        answerability: Answerability,
        builder: PromptBuilder,
        settings: AnswerSettings,
        reranker: Reranker | None = None,
    ) -> None:
        self.retriever = retriever
        self.selector = selector
        self.answerability = answerability
        self.builder = builder
        self.settings = settings
        self.reranker = reranker
        self.checker = CitationChecker(settings.support_threshold, settings.strict_support)

    async def answer(
        self,
        access: AccessFilter,
        question: str,
        generate: Generate,
        top_k: int | None = None,
        schema: str | None = None,
    ) -> AsyncIterator[AnswerEvent]:
        """The answer's text as generated, then the checked result. schema: a JSON schema (as
        JSON text) the answer must be, checked value by value (structured_answer.py)."""
        started = time.perf_counter()
        k = top_k or self.settings.top_k
        retrieval = await asyncio.to_thread(self.retriever.retrieve, access, question, k)
        retrieved = time.perf_counter()
        chunks = retrieval.chunks
        if self.reranker is not None and chunks:
            chunks = await self.reranker.rerank(question, chunks, generate)
        reranked = time.perf_counter()
        ranked = await asyncio.to_thread(self.selector.rank, question, chunks)
        evidence = ranked[: self.selector.settings.sentences]
        probability = self.answerability.probability(
            signals(question, ranked, retrieval.best_similarity)
        )
        selected = time.perf_counter()
        timings = {
            "retrieval_ms": _ms(started, retrieved),
            "rerank_ms": _ms(retrieved, reranked),
            "evidence_ms": _ms(reranked, selected),
        }
        if not evidence or probability < self.answerability.refuse_below:
            timings["total_ms"] = _ms(started, time.perf_counter())
            result = refusal(probability)
            result.timings = timings
            yield AnswerEvent(REFUSAL, result)
            return
        prompt = await asyncio.to_thread(
            self.builder.build, question, [s.as_source() for s in evidence], schema
        )
        if self.settings.style == "quote" and schema is None:
            result = self._quote(prompt, evidence, probability)
            result.timings = timings | {"total_ms": _ms(started, time.perf_counter())}
            yield AnswerEvent(result.answer, result)
            return
        text, token_ids, first_token, cached_tokens = "", [], None, 0
        # Batch-invariant, so that a question gets the same answer cold or cached, alone or in
        # a busy batch.
        params = SamplingParams(
            max_tokens=self.settings.max_tokens
            if schema is None
            else self.settings.structured_max_tokens,
            temperature=0,
            batch_invariant=True,
            constraint=None if schema is None else self._constraint(schema, question, prompt),
        )
        async for output in generate(prompt.token_ids, params, prompt.narrowing):
            completion = output.outputs[0]
            if first_token is None and completion.token_ids:
                first_token = time.perf_counter()
            if len(completion.text) > len(text):
                yield AnswerEvent(completion.text[len(text) :])
            text, token_ids = completion.text, completion.token_ids
            cached_tokens = output.num_cached_tokens
        generated = time.perf_counter()
        if schema is None:
            result = self._finish(text, question, prompt, evidence, probability)
        else:
            result = self._finish_structured(text, question, prompt, probability)
        checked = time.perf_counter()
        result.usage = {
            "prompt_tokens": len(prompt.token_ids),
            "completion_tokens": len(token_ids),
            "total_tokens": len(prompt.token_ids) + len(token_ids),
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        }
        result.timings = timings | {
            "prompt_tokens": len(prompt.token_ids),
            "ttft_ms": _ms(started, first_token or generated),
            "check_ms": _ms(generated, checked),
            "total_ms": _ms(started, checked),
        }
        yield AnswerEvent(result=result)

    def _finish(
        self,
        text: str,
        question: str,
        prompt: BuiltPrompt,
        evidence: list[Sentence],
        probability: float,
    ) -> AnswerResult:
        logger.debug("model answer to %r: %r", question, text)
        # A small model sometimes copies the spotlighting marks from the evidence.
        text = text.replace(DATAMARK, " ")
        declined = not text.strip() or REFUSAL.lower().rstrip(".") in text.lower()
        if not declined:
            answer, citations, supported = self.checker.check(text, question, prompt.sources)
            best = (evidence[0].chunk.doc_id, evidence[0].start)
            # Measured on the development set: a supported answer that does not rest on the best
            # evidence sentence is rarely right; the quote of that sentence more often is.
            if supported and best in {(c.doc_id, c.start) for c in citations}:
                return AnswerResult(answer, "generated", citations, answerability=probability)
        if self.settings.extractive_fallback:
            return self._quote(prompt, evidence, probability)
        return refusal(probability)

    @staticmethod
    def _constraint(schema: str, question: str, prompt: BuiltPrompt) -> OutputConstraint:
        allowed = evidence_numbers(question, prompt.sources)
        return OutputConstraint("json", answer_schema(schema, allowed))

    def _finish_structured(
        self, text: str, question: str, prompt: BuiltPrompt, probability: float
    ) -> AnswerResult:
        value = parse_json(text)
        if value is None:
            return refusal(probability)
        checked = check_value(value, question, prompt.sources, self.checker)
        if not checked.supported:
            logger.debug("unsupported schema answer to %r: %r", question, text)
            return refusal(probability)
        return AnswerResult(
            json.dumps(checked.value, ensure_ascii=False),
            "generated",
            checked.citations,
            answerability=probability,
            value=checked.value,
            field_citations=checked.field_citations,
        )

    def _quote(
        self, prompt: BuiltPrompt, evidence: list[Sentence], probability: float
    ) -> AnswerResult:
        """The best sentence quoted, with the next when it scores within quote_margin, if
        answerability is confident enough to quote; else the refusal."""
        if probability < self.answerability.quote_above:
            return refusal(probability)
        margin = self.settings.quote_margin
        close = [s for s in evidence[1:2] if evidence[0].score - s.score <= margin]
        return quote(prompt, [evidence[0], *close], probability)


def quote(prompt: BuiltPrompt, chosen: list[Sentence], probability: float) -> AnswerResult:
    """The chosen evidence sentences, quoted exactly, each citing its number and span."""
    numbered = {(s.chunk.doc_id, s.chunk.start): s.n for s in prompt.sources}
    pieces, citations = [], []
    for sentence in chosen:
        n = numbered.get((sentence.chunk.doc_id, sentence.start))
        if n is None:  # left out of the prompt by its token budget
            continue
        chunk = sentence.chunk
        citations.append(
            Citation(
                n,
                chunk.doc_id,
                chunk.chunk_id,
                chunk.title,
                sentence.start,
                sentence.end,
                sentence.text,
                1.0,
            )
        )
        pieces.append(f"{sentence.text} [{n}]")
    if not citations:
        return refusal(probability)
    return AnswerResult(" ".join(pieces), "extractive", citations, answerability=probability)


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 1)

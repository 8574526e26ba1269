"""Answers from evidence: an exact quote of the evidence that states the answer, a generated
answer whose citations check out, or a refusal that says why.

question (+ the user's earlier questions: conversation.py rewrites a follow-up into a
standalone query) -> retrieve permitted chunks -> (rerank) -> rank the sentences of those
chunks (evidence.py, so only permitted text is a candidate) -> answerability
(answerability.py): refuse at once when the evidence is unlikely to hold an answer -> choose
the answer's sentences (answer_choice.py): the best for each part of a two-part question, or
the best one, a close second, and those that cover parts of the question the chosen ones leave
open; for a follow-up, more than the earlier turn's answer -> by style: "quote" quotes them
exactly with their citations and spans, no model call; "generate" asks the model to state the
answer from them as numbered sources and checks every sentence of its reply against the
sentence it cites (citations.py: numbers with their units, names and negations must be the
source's), quoting the chosen sentences instead when the reply fails (or the model declines);
"auto" quotes when one sentence (or one list) states the answer and generates when the chosen
sentences must be combined. With a client's JSON schema the model's output is held to it and
checked value by value instead (structured_answer.py), without the quote fallback.

A refusal says which of two things happened: no permitted passage shares a word with the
question ("no_match"), or passages matched but answerability judged that none states the
answer ("not_stated", with the closest passages cited as related). Only permitted text is ever
searched, so neither says anything of documents the reader may not read. A malformed request
is the third kind, answered by the API layer with an error.
"""

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from ragserve.engine.client import Generate
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.structured import OutputConstraint
from ragserve.rag.answer_choice import choose, with_antecedents
from ragserve.rag.answer_result import (
    AnswerEvent,
    AnswerResult,
    AnswerStyle,
    quoted,
    refusal,
)
from ragserve.rag.answerability import Answerability, signals
from ragserve.rag.citations import CitationChecker
from ragserve.rag.conversation import Reading, read_turn
from ragserve.rag.documents import AccessFilter, ScoredChunk
from ragserve.rag.evidence import EvidenceSelector, Sentence
from ragserve.rag.list_answer import is_list
from ragserve.rag.prompt import REFUSAL, BuiltPrompt, PromptBuilder, as_answer
from ragserve.rag.rerank import Reranker, rerank
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from ragserve.rag.structured_answer import (
    answer_schema,
    check_value,
    evidence_numbers,
    parse_json,
)
from ragserve.rag.table_answer import asks_for_extreme, superlative_row
from ragserve.rag.text import CITATION

logger = logging.getLogger(__name__)
# A value alone, with its currency or unit ("20", "30 days", "EUR 450", "4.1%").
BARE_VALUE = re.compile(r"(?:[A-Z]{3}\s?|[$€£]\s?)?\d[\d,.]*(?:\s?(?:%|[A-Za-z]+))?\W*")


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
    # An answer also takes the second-best sentence when its score is within this of the best
    # (swept with the reader model: 0.15 is where the workplace set's one-fact answers stop
    # gaining, 0.773 at 0.05 to 0.818, for 2.6 more words an answer; none changes on Wikipedia).
    quote_margin: float = 0.15
    # ... and a sentence within this of the best that covers words of the question the chosen
    # sentences leave open, at most answer_sentences in all.
    cover_margin: float = 0.3
    answer_sentences: int = 3
    # The default answer style when a request names none (module docstring; Settings.answer_style).
    style: AnswerStyle = "quote"


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
        style: AnswerStyle | None = None,
        history: Sequence[str] = (),
    ) -> AsyncIterator[AnswerEvent]:
        """The checked answer, as one text event with the result (a generated draft is never
        shown before its check). schema: a JSON schema (as JSON text) the answer must be,
        checked value by value (structured_answer.py). history: the user's earlier questions
        in this conversation, oldest first (never the assistant's turns)."""
        started = time.perf_counter()
        style = style or self.settings.style
        k = top_k or self.settings.top_k
        reading = read_turn(question, history)
        query = reading.query
        retrieval = await asyncio.to_thread(self.retriever.retrieve_turn, access, reading, k)
        retrieved = time.perf_counter()
        chunks = retrieval.chunks
        if self.reranker is not None and chunks:
            chunks = await rerank(self.reranker, query, chunks, generate)
        reranked = time.perf_counter()
        rankings = await asyncio.to_thread(self._rank, access, reading, chunks)
        ranked = rankings[0]
        row = None
        if schema is None and asks_for_extreme(query):
            doc_ids = [chunk.doc_id for chunk in chunks]
            documents = await asyncio.to_thread(self.retriever.documents, access, doc_ids)
            row = superlative_row(query, documents)
        # A follow-up's own words: the earlier question's are the answer's context, not asked.
        asked = reading.follow_up or query
        unmatched = await asyncio.to_thread(self.selector.unmatched_similarity, asked, ranked)
        probability = self.answerability.probability(
            signals(query, ranked, retrieval.best_similarity, unmatched)
        )
        selected = time.perf_counter()
        timings = {
            "retrieval_ms": _ms(started, retrieved),
            "rerank_ms": _ms(retrieved, reranked),
            "evidence_ms": _ms(reranked, selected),
        }
        if row is not None:
            answer, citations = quoted(query, [row])
            result = AnswerResult(answer, "extractive", citations, answerability=probability)
        else:
            result = self._refused(query, ranked, probability)
        if result is None:
            chosen = choose(reading, rankings, self.settings)
            needs_model = schema is not None or style == "generate"
            combine = len(chosen) > 1 and not is_list(chosen)
            needs_model = needs_model or (style == "auto" and combine)
            if not needs_model:
                result = self._quote(query, chosen, ranked, probability)
            else:
                result = await self._generated(
                    question, query, ranked, chosen, probability, generate, schema, started
                )
        result.query = query
        result.timings = timings | result.timings | {"total_ms": _ms(started, time.perf_counter())}
        steps = [("retrieve", started, retrieved), ("evidence", reranked, selected)]
        if reranked > retrieved and self.reranker is not None:
            steps.insert(1, ("rerank", retrieved, reranked))
        result.steps = steps + result.steps
        yield AnswerEvent(result.answer, result)

    def _rank(
        self, access: AccessFilter, reading: Reading, chunks: list[ScoredChunk]
    ) -> list[list[Sentence]]:
        """The evidence sentences, whole even where a chunk's edge cut them, ranked for each of
        reading.questions."""
        whole = self.retriever.whole_sentences(access, chunks)
        return self.selector.rank_each(reading.questions, whole)

    def _refused(
        self, query: str, ranked: list[Sentence], probability: float
    ) -> AnswerResult | None:
        """The refusal, when nothing permitted shares a word with the query or answerability
        is under its threshold; else None."""
        if not ranked or not any(s.overlap > 0 for s in ranked):
            return refusal("no_match", probability)
        if probability < self.answerability.refuse_below:
            return refusal("not_stated", probability, ranked)
        return None

    async def _generated(
        self,
        question: str,
        query: str,
        ranked: list[Sentence],
        chosen: list[Sentence],
        probability: float,
        generate: Generate,
        schema: str | None,
        started: float,
    ) -> AnswerResult:
        """The model's answer from the evidence, checked; the quote of the chosen sentences
        when it fails the check."""
        evidence = list({(s.chunk.doc_id, s.start): s for s in [*chosen, *ranked]}.values())
        evidence = evidence[: max(len(chosen), self.selector.settings.sentences)]
        prompt = await asyncio.to_thread(
            self.builder.build, question, [s.as_source() for s in evidence], schema
        )
        text, token_ids, first_token, cached_tokens = "", [], None, 0
        generating = time.perf_counter()
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
            text, token_ids = completion.text, completion.token_ids
            cached_tokens = output.num_cached_tokens
        generated = time.perf_counter()
        if schema is None:
            result = self._finish(text, query, prompt, chosen, ranked, probability)
        else:
            result = self._finish_structured(text, query, prompt, probability)
        checked = time.perf_counter()
        result.usage = {
            "prompt_tokens": len(prompt.token_ids),
            "completion_tokens": len(token_ids),
            "total_tokens": len(prompt.token_ids) + len(token_ids),
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        }
        result.steps = [("generate", generating, generated), ("check", generated, checked)]
        result.timings = {
            "prompt_tokens": len(prompt.token_ids),
            "ttft_ms": _ms(started, first_token or generated),
            "check_ms": _ms(generated, checked),
        }
        return result

    def _finish(
        self,
        text: str,
        query: str,
        prompt: BuiltPrompt,
        chosen: list[Sentence],
        ranked: list[Sentence],
        probability: float,
    ) -> AnswerResult:
        logger.debug("model answer to %r: %r", query, text)
        text = as_answer(text)
        declined = not text.strip() or REFUSAL.lower().rstrip(".") in text.lower()
        if not declined:
            answer, citations, supported = self.checker.check(text, query, prompt.sources)
            best = (chosen[0].chunk.doc_id, chosen[0].start)
            # Measured on the development set: a supported answer that does not rest on the best
            # evidence sentence is rarely right; the quote of that sentence more often is. A
            # bare value ("20 [1].") claims nothing a reader can hold to its source without
            # the question; the quote states what it is the value of.
            bare = BARE_VALUE.fullmatch(CITATION.sub("", answer).strip()) is not None
            if supported and not bare and best in {(c.doc_id, c.start) for c in citations}:
                return AnswerResult(answer, "generated", citations, answerability=probability)
        if self.settings.extractive_fallback:
            return self._quote(query, chosen, ranked, probability)
        return refusal("not_stated", probability, chosen)

    @staticmethod
    def _constraint(schema: str, question: str, prompt: BuiltPrompt) -> OutputConstraint:
        allowed = evidence_numbers(question, prompt.sources)
        return OutputConstraint("json", answer_schema(schema, allowed))

    def _finish_structured(
        self, text: str, question: str, prompt: BuiltPrompt, probability: float
    ) -> AnswerResult:
        value = parse_json(text)
        if value is None:
            return refusal("not_stated", probability)
        checked = check_value(value, question, prompt.sources, self.checker)
        if not checked.supported:
            logger.debug("unsupported schema answer to %r: %r", question, text)
            return refusal("not_stated", probability)
        return AnswerResult(
            json.dumps(checked.value, ensure_ascii=False),
            "generated",
            checked.citations,
            answerability=probability,
            value=checked.value,
            field_citations=checked.field_citations,
        )

    def _quote(
        self, query: str, chosen: list[Sentence], ranked: list[Sentence], probability: float
    ) -> AnswerResult:
        """The chosen sentences quoted, if answerability is confident enough to quote; else
        the refusal with the closest passages as related."""
        if probability < self.answerability.quote_above:
            return refusal("not_stated", probability, ranked)
        answer, citations = quoted(query, with_antecedents(chosen, ranked))
        return AnswerResult(answer, "extractive", citations, answerability=probability)


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 1)

"""Structured output: a request's output held to a JSON schema, a regular expression, a choice
of strings or a Lark grammar, by masking the tokens that cannot continue a match before each
sample. llguidance compiles the constraints and computes the masks (docs/benchmarks.md has
why llguidance rather than xgrammar). A JSON schema gets strict defaults first
(strict_schema.py).

A constraint is compiled once per distinct constraint (an LRU cache) and checked when the
request is added, so a bad schema or regex is refused with its reason before anything runs.
Each constrained sequence has its own matcher, which consumes the sequence's tokens as they are
accepted. A step's masks depend only on tokens already accepted, so they are filled (by one
llguidance executor, in parallel threads) while the forward pass runs, and applied to the
logits by a C++ kernel (csrc/token_mask.cpp) before sampling.

The constraint types import nothing heavy: llguidance, torch and transformers are imported by
the functions that use them, so that the request types (SamplingParams, the server's
protocol) load without the engine.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ragserve.engine.ending import Endings
from ragserve.engine.errors import InvalidRequestError
from ragserve.engine.strict_schema import strict_schema_text

if TYPE_CHECKING:
    import llguidance
    import torch
    from transformers import PreTrainedTokenizerBase

CACHED_GRAMMARS = 256


@dataclass(frozen=True)
class OutputConstraint:
    """What a request's output must match. spec: the JSON schema as JSON text (json), the
    regular expression (regex), the JSON list of strings (choice), or a Lark grammar."""

    kind: Literal["json", "regex", "choice", "grammar"]
    spec: str


def grammar_of(constraint: OutputConstraint) -> str:
    """llguidance's grammar for the constraint (not yet checked)."""
    import llguidance

    if constraint.kind == "json":
        return llguidance.LLMatcher.grammar_from_json_schema(
            strict_schema_text(constraint.spec), defaults={"whitespace_flexible": False}
        )
    if constraint.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(constraint.spec)
    if constraint.kind == "choice":
        # Each choice as a quoted Lark string literal: an exact alternative.
        choices = " | ".join(json.dumps(c) for c in json.loads(constraint.spec))
        return llguidance.LLMatcher.grammar_from_lark(f"start: {choices}")
    return llguidance.LLMatcher.grammar_from_lark(constraint.spec)


def checked_grammar(
    constraint: OutputConstraint, tokenizer: llguidance.LLTokenizer | None = None
) -> str:
    """The constraint's grammar; InvalidRequestError with the reason when it does not compile
    (without a tokenizer: checked as far as it can be away from the engine)."""
    import llguidance

    try:
        grammar = grammar_of(constraint)
        problem = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
    except ValueError as error:
        problem = str(error)
    if problem:
        raise InvalidRequestError(f"invalid {constraint.kind} constraint: {problem}")
    return grammar


class Grammars:
    """The model's tokenizer as llguidance sees it, compiled constraints, masks, and the
    endings that close constrained outputs in time (ending.py)."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, vocab_size: int, eos_token_ids: set[int]
    ) -> None:
        import llguidance.hf

        self.vocab_size = vocab_size
        self.tokenizer = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=vocab_size, eos_token=sorted(eos_token_ids)
        )
        self._compiled: OrderedDict[OutputConstraint, str] = OrderedDict()
        self.endings = Endings(self.tokenizer)

    def compile(self, constraint: OutputConstraint) -> str:
        """The checked grammar; InvalidRequestError with the reason when it does not compile."""
        grammar = self._compiled.get(constraint)
        if grammar is None:
            grammar = checked_grammar(constraint, self.tokenizer)
            self._compiled[constraint] = grammar
            while len(self._compiled) > CACHED_GRAMMARS:
                self._compiled.popitem(last=False)
        self._compiled.move_to_end(constraint)
        return grammar

    def matcher(self, constraint: OutputConstraint) -> llguidance.LLMatcher:
        import llguidance

        return llguidance.LLMatcher(self.tokenizer, self.compile(constraint), log_level=0)


@functools.cache
def executor() -> llguidance.LLExecutor:
    import llguidance

    return llguidance.LLExecutor()


@dataclass
class Masks:
    """The token masks of a step's constrained rows: bitmask[i] (int32 words, bit j of word w
    for token 32 w + j, set when the token may come next) belongs to logits row rows[i]."""

    rows: torch.Tensor
    bitmask: torch.Tensor


def fill_masks(
    matchers: list[llguidance.LLMatcher | None],
    vocab_size: int,
    forced: list[int | None] | None = None,
) -> Masks | None:
    """The masks of the rows that have a matcher (None when no row has one); a row with a
    forced token (ending.py) may take only that token."""
    rows = [i for i, m in enumerate(matchers) if m is not None]
    if not rows:
        return None
    import torch

    words = (vocab_size + 31) // 32
    bitmask = torch.zeros((len(rows), words), dtype=torch.int32)
    forced = forced or [None] * len(matchers)
    # A forced row's mask is its one token: llguidance computes only the others.
    work = [(matchers[row], k) for k, row in enumerate(rows) if forced[row] is None]
    if work:
        executor().unsafe_compute_mask_ptr(work, bitmask.data_ptr(), words * 4, len(rows))
    for k, row in enumerate(rows):
        if (token := forced[row]) is not None:
            # Bit 31 of an int32 word is its sign.
            bitmask[k, token // 32] = ((1 << (token % 32)) + 2**31) % 2**32 - 2**31
    return Masks(torch.tensor(rows, dtype=torch.long), bitmask)


@functools.cache
def _filler() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="token-masks")


def fill_masks_soon(
    matchers: list[llguidance.LLMatcher | None],
    vocab_size: int,
    forced: list[int | None] | None = None,
) -> Future[Masks | None] | None:
    """fill_masks on a background thread, so that the masks are computed while the forward
    pass runs (llguidance computes them without the GIL: a Python loop beside 300 fills of 32
    masks kept 98% of its speed); None at once when no row has a matcher."""
    if all(m is None for m in matchers):
        return None
    return _filler().submit(fill_masks, matchers, vocab_size, forced)


def apply_masks(logits: torch.Tensor, masks: Masks) -> None:
    """Set to -inf, in place, the logits of the tokens each masked row may not take."""
    from ragserve.engine.kernels import apply_token_bitmask

    apply_token_bitmask(logits, masks.rows, masks.bitmask)

"""Constrained replies that end inside max_tokens.

A grammar keeps every token valid but cannot make the model finish: sampled at temperature 1,
the default model sometimes writes a JSON string it never closes, and max_tokens then cuts
the reply off as text no parser accepts (about 1 reply in 60 for a three-field object in 80
tokens). So each constrained sequence keeps an eye on the shortest ending its grammar still
allows. While that ending fits in the tokens left, with SLACK to spare, the model samples as
usual; from the step where it no longer would, the ending's tokens are forced one by one (a
string value is cut short, the required fields left get their shortest values), and the
reply is a complete match that parses (guidance's `gen(max_tokens=...)` ends a lexeme the
same way). Such a reply finishes with reason "stop" and counts as closed early.

The shortest ending is found by walking a copy of the matcher: tokens the grammar forces
are taken as they are, and where it forces none the first probe token it accepts, probes
being single characters that close ('"', '}', ']') before those that separate or start the
shortest values ('0', 'n' of null), and characters the walk has already written last. For
JSON that is the shortest ending or close to it (an open array of strings gets an empty one
before it closes); for a regular expression or a Lark grammar it is an ending, and where the
walk finds none within MAX_ENDING_TOKENS the reply runs on as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import llguidance

# Closers first, then separators, then the shortest values, then anything printable, then
# the bytes that complete a character whose first bytes a token left open.
CLOSERS = b'"}])>'
PROBE_BYTES = (
    CLOSERS
    + b",:0;.!?@-/_ntf"
    + b"abcdeghijklmopqrsuvwxyz"
    + b"ABCDEFGHIJKLMNOPQRSTUVWXYZ123456789 \n#$%&'*+<=[\\^`{|~("
    + bytes(range(0x80, 0xC0))
)
MAX_ENDING_TOKENS = 64
# Tokens kept in hand: a sampled token can lengthen the ending (an escape, an opened value).
SLACK = 2
# How far ahead of need the ending is looked at, and how often at most while far from it.
REVIEW_MARGIN = 16


@dataclass
class EndingWatch:
    """A constrained sequence's view of its ending: when to look at it again (as a number of
    tokens left), the token it must take next once it is being closed, and whether it was."""

    review_at: int
    forced_token: int | None = None
    closed_early: bool = False


class Endings:
    """Finds the shortest ending of a matcher's grammar and decides when to force it."""

    def __init__(self, tokenizer: llguidance.LLTokenizer) -> None:
        self.probes: list[int] = []
        self.closers: set[int] = set()
        for byte in PROBE_BYTES:
            ids = tokenizer.tokenize_bytes(bytes([byte]))
            if len(ids) == 1 and ids[0] not in self.probes:
                self.probes.append(ids[0])
                if byte in CLOSERS:
                    self.closers.add(ids[0])
        self.eos_token_id = tokenizer.eos_token

    def shortest(self, matcher: llguidance.LLMatcher) -> list[int] | None:
        """The tokens that complete the matcher's grammar from where it is; None when the
        walk finds no ending within MAX_ENDING_TOKENS."""
        walker = matcher.deep_copy()
        ending: list[int] = []
        taken: list[int] = []
        while len(ending) <= MAX_ENDING_TOKENS:
            if walker.is_stopped():
                return ending
            if walker.is_accepting():
                return [*ending, self.eos_token_id]
            forced = walker.compute_ff_tokens()
            if forced:
                walker.consume_tokens(forced)
                ending.extend(forced)
                continue
            # A probe the walk has taken is tried after the others (closers excepted), so
            # that it moves on: "0" for r"\d+\.\d+" would otherwise be taken until it gives up.
            order = [t for t in self.probes if t not in taken] + [t for t in taken]
            probe = next((t for t in order if walker.try_consume_tokens([t]) == 1), None)
            if probe is None:
                return None
            ending.append(probe)
            if probe not in self.closers:
                taken.append(probe)
        return None

    def review(self, watch: EndingWatch, matcher: llguidance.LLMatcher, tokens_left: int) -> bool:
        """Set the token the sequence must take next (None: free to sample), looking at the
        ending only when the sequence has come within reach of needing it; True when this
        review begins to close it."""
        closed_before = watch.closed_early
        self._review(watch, matcher, tokens_left)
        return watch.closed_early and not closed_before

    def _review(self, watch: EndingWatch, matcher: llguidance.LLMatcher, tokens_left: int) -> None:
        if tokens_left > watch.review_at:
            watch.forced_token = None
            return
        ending = self.shortest(matcher)
        if not ending:
            # Mostly a character a token left half-written: looked at again the next step.
            watch.forced_token = None
            watch.review_at = tokens_left - 1
        elif len(ending) > tokens_left:
            # Past saving: the model's own tokens are worth more than half an ending.
            watch.forced_token = None
        elif len(ending) + SLACK >= tokens_left:
            watch.forced_token = ending[0]
            watch.closed_early = True
        else:
            watch.forced_token = None
            watch.review_at = max(len(ending) + SLACK + REVIEW_MARGIN, tokens_left - REVIEW_MARGIN)

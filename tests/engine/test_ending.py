"""Constrained outputs that end inside max_tokens: the shortest ending of a grammar from
anywhere in a match, and the engine closing a sampled reply that would run past its budget."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from transformers import AutoTokenizer

from ragserve.engine.config import DEFAULT_MODEL
from ragserve.engine.ending import SLACK, Endings, EndingWatch
from ragserve.engine.loader import resolve_model
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.structured import Grammars, OutputConstraint


class Order(BaseModel):
    customer: str
    items: list[str]
    paid: bool
    total: int
    note: str | None


ORDER = json.dumps(Order.model_json_schema())


@pytest.fixture(scope="module")
def grammars() -> Grammars:
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    return Grammars(tokenizer, len(tokenizer), {tokenizer.eos_token_id})


@pytest.fixture(scope="module")
def endings(grammars) -> Endings:
    return Endings(grammars.tokenizer)


def ended(grammars: Grammars, endings: Endings, kind: str, spec: str, prefix: bytes) -> str:
    """The prefix completed by its shortest ending, checked against the grammar."""
    matcher = grammars.matcher(OutputConstraint(kind, spec))
    tokens = grammars.tokenizer.tokenize_bytes(prefix)
    assert matcher.consume_tokens(tokens), prefix
    ending = endings.shortest(matcher)
    assert ending is not None, prefix
    assert matcher.consume_tokens(ending)
    assert matcher.is_stopped() or matcher.is_accepting()
    text = prefix + grammars.tokenizer.decode_bytes(ending)
    return text.decode().removesuffix("<|im_end|>")


def test_a_json_string_is_closed_and_the_required_fields_get_short_values(grammars, endings):
    text = ended(grammars, endings, "json", ORDER, b'{"customer":"Acme, a firm that')
    order = Order.model_validate_json(text)
    assert order.customer == "Acme, a firm that"
    assert order.items in ([], [""]) and order.total == 0 and order.note in ("", None)
    assert len(endings.shortest(grammars.matcher(OutputConstraint("json", ORDER)))) < 32


def test_a_character_cut_between_its_bytes_is_completed_first(grammars, endings):
    # "ש" is two bytes in UTF-8; the quote cannot come after the first alone.
    text = ended(grammars, endings, "json", ORDER, b'{"customer":"' + "ש".encode()[:1])
    # Completed by a continuation byte into some one character, then closed.
    assert len(Order.model_validate_json(text).customer) == 1


@pytest.mark.parametrize(
    ("kind", "spec", "prefix", "pattern"),
    [
        ("regex", r"\d+\.\d+", b"12", r"12\d*\.\d+"),
        ("regex", r"[a-z]+@[a-z]+\.com", b"bob", r"bob[a-z]*@[a-z]+\.com"),
        ("regex", r"(ab)+c", b"a", r"(ab)+c"),
        ("choice", '["yes", "no", "unsure"]', b"un", r"unsure"),
        ("grammar", 'start: "say " WORD "!"\nWORD: /[a-z]+/', b"say h", r"say h[a-z]*!"),
    ],
)
def test_other_constraints_get_an_ending_that_matches(
    grammars, endings, kind, spec, prefix, pattern
):
    assert re.fullmatch(pattern, ended(grammars, endings, kind, spec, prefix))


# Assigned characters: the prefix itself must be one the grammar accepts.
WORDS = st.characters(categories=("L", "M", "N", "P", "S", "Zs"))


@settings(max_examples=60, deadline=None)
@given(
    order=st.builds(
        Order,
        customer=st.text(WORDS, max_size=12),
        items=st.lists(st.text(WORDS, max_size=6), max_size=3),
        total=st.integers(-(10**6), 10**6),
        note=st.none() | st.text(WORDS, max_size=8),
    ),
    cut=st.floats(0, 1, exclude_max=True),
)
def test_any_prefix_of_a_valid_object_ends_as_a_valid_object(grammars, endings, order, cut):
    full = order.model_dump_json().encode()
    prefix = full[: int(cut * len(full))]
    Order.model_validate_json(ended(grammars, endings, "json", ORDER, prefix))


def test_the_ending_is_forced_only_once_it_no_longer_fits_otherwise(grammars, endings):
    matcher = grammars.matcher(OutputConstraint("json", ORDER))
    assert matcher.consume_tokens(grammars.tokenizer.tokenize_bytes(b'{"customer":"A'))
    needed = len(endings.shortest(matcher))
    watch = EndingWatch(review_at=100)
    endings.review(watch, matcher, needed + SLACK + 1)
    assert watch.forced_token is None and not watch.closed_early
    endings.review(watch, matcher, needed + SLACK)
    assert watch.forced_token == grammars.tokenizer.tokenize_bytes(b'"')[0]
    assert watch.closed_early


def chat(llm, text: str) -> str:
    return llm.apply_chat_template([{"role": "user", "content": text}])


def test_a_reply_that_would_run_past_max_tokens_is_closed_and_parses(llm_fp32):
    class Story(BaseModel):
        title: str
        story: str
        stars: int

    constraint = OutputConstraint("json", json.dumps(Story.model_json_schema()))
    prompt = chat(llm_fp32, "Tell me a long story about a dragon, as JSON.")
    counted = llm_fp32.engine.stats().constrained_closed_early
    closed, short = llm_fp32.generate(
        [prompt, prompt],
        [
            SamplingParams(max_tokens=24, temperature=0, constraint=constraint, logprobs=0),
            SamplingParams(max_tokens=3, temperature=0, constraint=constraint),
        ],
    )
    reply = closed.outputs[0]
    assert reply.finish_reason == "stop" and reply.closed_early, reply
    assert len(reply.token_ids) <= 24
    assert llm_fp32.engine.stats().constrained_closed_early == counted + 1
    Story.model_validate_json(reply.text)
    # A forced token had no alternative: its log-probability under the masked logits is 0.
    assert reply.logprobs[-1][reply.token_ids[-1]].logprob == 0.0
    # No ending fits in three tokens: cut off as before.
    assert short.outputs[0].finish_reason == "length" and not short.outputs[0].closed_early


def test_a_reply_that_ends_by_itself_is_not_closed_early(llm_fp32):
    class Answer(BaseModel):
        answer: bool

    constraint = OutputConstraint("json", json.dumps(Answer.model_json_schema()))
    (reply,) = llm_fp32.generate(
        chat(llm_fp32, "Is water wet?"),
        SamplingParams(max_tokens=32, temperature=0, constraint=constraint),
    )
    assert reply.outputs[0].finish_reason == "stop"
    assert not reply.outputs[0].closed_early

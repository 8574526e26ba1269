"""Speculative decoding by prompt lookup: drafts are found where they should be, and greedy
output is the same token for token with and without them."""

import pytest

from ragserve import LLM, SamplingParams
from ragserve.engine.ngram import propose
from tests.engine.helpers import make_scheduler, make_seq

# Prompts whose continuations repeat earlier text, so drafts are proposed, accepted and
# rejected; and one that gives prompt lookup little to find.
PROMPTS = [
    "Copy this sentence exactly: The quick brown fox jumps over the lazy dog near the river"
    " bank. Copy: The quick",
    "List: apple, banana, cherry, apple, banana, cherry, apple, banana,",
    "Quote the rule. Rule: members must sign in at the front desk before using the pool."
    " The rule says: members must",
    "Tell me about the history of Rome.",
]


def test_propose_takes_the_longest_latest_match():
    # The 3-gram (2, 3, 4) occurred at 1; what followed it is the draft.
    assert propose([1, 2, 3, 4, 5, 9, 2, 3, 4], 3) == [5, 9, 2]
    # Of two earlier occurrences of (1, 2), the latest wins.
    assert propose([1, 2, 7, 1, 2, 8, 1, 2], 1) == [8]
    assert propose([1, 2, 3, 4, 5, 6], 4) == []
    assert propose([1, 2, 1, 2], 0) == []
    assert propose([4, 4], 3) == []


@pytest.fixture(scope="module")
def plain_and_speculative():
    memory = {"kv_cache_memory_bytes": 4096 * 46080}
    return (
        LLM(dtype="float32", speculative_tokens=0, **memory),
        LLM(dtype="float32", speculative_tokens=5, **memory),
    )


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=48, temperature=0),
        # Ends inside an accepted draft: by max_tokens, by a stop string, by a stop token.
        SamplingParams(max_tokens=7, temperature=0),
        SamplingParams(max_tokens=48, temperature=0, stop=["cherry, apple"]),
        SamplingParams(max_tokens=48, temperature=0, stop_token_ids=[28]),
    ],
    ids=["long", "max_tokens", "stop_string", "stop_token"],
)
def test_speculative_greedy_equals_plain_greedy(plain_and_speculative, params):
    plain, speculative = plain_and_speculative
    before = speculative.engine.stats()
    expected = [o.outputs[0] for o in plain.generate(PROMPTS, params)]
    got = [o.outputs[0] for o in speculative.generate(PROMPTS, params)]
    for want, have in zip(expected, got, strict=True):
        assert have.token_ids == want.token_ids
        assert have.text == want.text
        assert have.finish_reason == want.finish_reason
    after = speculative.engine.stats()
    assert after.spec_decode_draft_tokens > before.spec_decode_draft_tokens
    assert after.spec_decode_accepted_tokens > before.spec_decode_accepted_tokens


def test_speculative_saves_steps(plain_and_speculative):
    plain, speculative = plain_and_speculative
    params = SamplingParams(max_tokens=48, temperature=0, ignore_eos=True)
    steps = []
    for llm in (plain, speculative):
        before = llm.engine.step_times.steps
        llm.generate(PROMPTS[1], params)
        steps.append(llm.engine.step_times.steps - before)
    assert steps[1] < steps[0] * 0.7


def test_sampled_and_adjusted_requests_get_no_drafts(plain_and_speculative):
    _, speculative = plain_and_speculative
    before = speculative.engine.stats().spec_decode_draft_tokens
    for params in (
        SamplingParams(max_tokens=16, temperature=0.8, seed=1),
        SamplingParams(max_tokens=16, temperature=0, repetition_penalty=1.2),
        SamplingParams(max_tokens=16, temperature=0, logprobs=2),
    ):
        speculative.generate(PROMPTS[1], params)
    assert speculative.engine.stats().spec_decode_draft_tokens == before


def test_drafts_only_while_few_sequences_decode():
    scheduler = make_scheduler(64, speculative_tokens=3, speculative_max_batch=2)
    repeating = [5, 6, 5, 6, 5, 6, 5]
    seqs = [make_seq(f"r{i}", repeating) for i in range(3)]
    for seq in seqs:
        scheduler.add(seq)
    batch = scheduler.schedule()  # the three prefills
    scheduler.postprocess(batch, {seq: [6] for seq in seqs})
    batch = scheduler.schedule()
    assert not batch.drafts, "three decoding sequences exceed speculative_max_batch"
    scheduler.finish(seqs[2], "abort")
    batch = scheduler.schedule()
    assert set(batch.drafts) == set(seqs[:2])
    assert batch.num_decodes == 0
    # Each computes its last token and a draft of at most 3, with blocks for all of them.
    assert batch.num_new_tokens == [1 + len(batch.drafts[s]) for s in seqs[:2]]
    for seq in seqs[:2]:
        assert len(seq.block_table) * 4 >= seq.num_tokens + len(batch.drafts[seq])

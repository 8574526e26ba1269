"""Speculative decoding by prompt lookup: drafts are found where they should be, greedy output
is the same token for token with and without them, and sampled requests verify them too
(their distribution is tested in test_sampler.py)."""

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


def test_unseeded_sampled_requests_get_drafts_and_accept_some(plain_and_speculative):
    _, speculative = plain_and_speculative
    before = speculative.engine.stats()
    params = SamplingParams(max_tokens=32, temperature=0.5, ignore_eos=True)
    (output,) = speculative.generate(PROMPTS[1], params)[0].outputs
    assert len(output.token_ids) == 32
    after = speculative.engine.stats()
    assert after.spec_decode_draft_tokens > before.spec_decode_draft_tokens
    assert after.spec_decode_accepted_tokens > before.spec_decode_accepted_tokens


def test_seeded_and_adjusted_requests_get_no_drafts(plain_and_speculative):
    # A seeded request's tokens must not depend on its batch, and whether it gets drafts does.
    _, speculative = plain_and_speculative
    before = speculative.engine.stats().spec_decode_draft_tokens
    for params in (
        SamplingParams(max_tokens=16, temperature=0.8, seed=1),
        SamplingParams(max_tokens=16, temperature=0, repetition_penalty=1.2),
        SamplingParams(max_tokens=16, temperature=0, logprobs=2),
    ):
        speculative.generate(PROMPTS[1], params)
    assert speculative.engine.stats().spec_decode_draft_tokens == before


def decoding(scheduler, seqs):
    """Admit and prefill seqs; each then decodes, its prompt's repeating pattern continued."""
    for seq in seqs:
        scheduler.add(seq)
    scheduler.postprocess(scheduler.schedule(), {seq: [6] for seq in seqs})


REPEATING = [5, 6, 5, 6, 5, 6, 5]


def test_every_greedy_decode_gets_drafts_while_few_decode():
    scheduler = make_scheduler(64, speculative_tokens=3, speculative_max_batch=2)
    seqs = [make_seq(f"r{i}", REPEATING) for i in range(2)]
    decoding(scheduler, seqs)
    for seq in seqs:
        seq.draft_acceptance = 0.0  # a poor record does not matter in a small batch
    batch = scheduler.schedule()
    assert set(batch.drafts) == set(seqs)
    assert batch.num_decodes == 0
    # Each computes its last token and a draft of at most 3, with blocks for all of them.
    assert batch.num_new_tokens == [1 + len(batch.drafts[s]) for s in seqs]
    for seq in seqs:
        assert len(seq.block_table) * 4 >= seq.num_tokens + len(batch.drafts[seq])


def test_past_a_small_batch_only_sequences_whose_drafts_were_accepted_get_more():
    scheduler = make_scheduler(64, speculative_tokens=3, speculative_max_batch=2)
    seqs = [make_seq(f"r{i}", REPEATING) for i in range(4)]
    decoding(scheduler, seqs)
    # No record yet, mostly accepted, mostly rejected, exactly at the threshold (0.5).
    for seq, acceptance in zip(seqs, [None, 0.75, 0.25, 0.5], strict=True):
        seq.draft_acceptance = acceptance
    batch = scheduler.schedule()
    assert set(batch.drafts) == {seqs[0], seqs[1], seqs[3]}
    assert batch.num_decodes == 1 and batch.seqs[0] is seqs[2]


def test_a_sequence_s_acceptance_averages_its_drafts_outcomes():
    scheduler = make_scheduler(64, speculative_tokens=4, speculative_max_batch=4)
    seq = make_seq("r", REPEATING, max_tokens=64)
    decoding(scheduler, [seq])
    batch = scheduler.schedule()
    # The latest earlier (5, 6, 5, 6) is followed by the last two tokens.
    assert batch.drafts[seq] == [5, 6]
    scheduler.postprocess(batch, {seq: [5, 6, 5]})  # both accepted, and the next token
    assert seq.draft_acceptance == 1.0
    batch = scheduler.schedule()
    assert batch.drafts[seq] == [6, 5]
    scheduler.postprocess(batch, {seq: [9]})  # none accepted: the model's own token
    assert seq.draft_acceptance == 0.5

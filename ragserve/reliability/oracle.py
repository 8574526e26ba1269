"""The prefix-cache oracle, replayed against a live server: can a caller who may not read a
document confirm a guess at its text from `cached_tokens` or from the time to first token?

Each trial adds a restricted memo holding a figure, lets an authorized reader ask about it (so
its KV blocks are in the cache), and rebuilds that answer's prompt from the open prompt format,
the reader's own /v1/search results and the same evidence selection; the rebuild is checked
against the prompt token count the answer reported, and a trial whose rebuild differs (or whose
answer was refused or quoted, so that no prompt ran) is left out: run it against a server with
answer_style = "generate". The outsider then sends the
prompt cut before the memo's closing tag with a wrong figure of the same length (so that what
follows shares the outsider's own blocks up to the figure alike), then with the true figure and
with another wrong one, in random order, each as a one-token /v1/completions request sent for
the first time. A leak shows as more cached tokens or a shorter latency for the true figure. As
a control, the outsider repeats its wrong guess: that prompt is in the cache (its own), which
shows how large a cache hit's effect on latency is.
"""

import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from transformers import AutoTokenizer

from ragserve.engine.client import FixedModel
from ragserve.engine.loader import resolve_model
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.embeddings import DEFAULT_READER_MODEL
from ragserve.rag.evidence import EvidenceSelector, EvidenceSettings
from ragserve.rag.prompt import PromptBuilder
from ragserve.reports import markdown_table, run_metadata, summary
from ragserve.services import reader_embedder

SYLLABLES = ("vel", "cor", "dran", "mox", "tal", "quen", "bris", "lum", "var", "zet", "pol", "ka")


@dataclass
class OracleSettings:
    url: str
    admin_key: str
    reader_key: str
    outsider_key: str
    restricted_group: str
    model: str
    answer_max_tokens: int
    evidence_budget: int
    datamark: bool
    reader_model: str = DEFAULT_READER_MODEL
    evidence_sentences: int = 3
    trials: int = 100
    seed: int = 0


@dataclass
class Samples:
    cached_tokens: list[int] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)


def _company(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3)).title() + " Corporation"


def _figure(rng: random.Random, avoid: tuple[str, ...] = ()) -> str:
    """Three digits whose first differs from those of the figures to avoid, so that every
    guess shares exactly the text before the figure with the others."""
    while (figure := str(rng.randint(100, 999)))[0] in {a[0] for a in avoid}:
        pass
    return figure


class Oracle:
    def __init__(self, settings: OracleSettings) -> None:
        self.settings = settings
        self.client = httpx.Client(base_url=settings.url, timeout=600)
        served = self._get("/v1/models", settings.outsider_key)["data"][0]
        self.model_id = served["id"]
        self.builder = PromptBuilder(
            FixedModel(
                AutoTokenizer.from_pretrained(resolve_model(settings.model)),
                served["max_model_len"],
            ),
            settings.answer_max_tokens,
            settings.evidence_budget,
            settings.datamark,
        )
        self.selector = EvidenceSelector(
            reader_embedder(settings.reader_model), EvidenceSettings(settings.evidence_sentences)
        )

    def _get(self, path: str, key: str) -> Any:
        response = self.client.get(path, headers={"Authorization": f"Bearer {key}"})
        response.raise_for_status()
        return response.json()

    def _post(self, path: str, key: str, body: dict[str, Any]) -> Any:
        response = self.client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
        if response.status_code >= 400:
            raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def _guess(self, prompt: str, samples: Samples) -> None:
        body = {"model": self.model_id, "prompt": prompt, "max_tokens": 1, "temperature": 0}
        started = time.perf_counter()
        reply = self._post("/v1/completions", self.settings.outsider_key, body)
        samples.latency_ms.append((time.perf_counter() - started) * 1000)
        samples.cached_tokens.append(reply["usage"]["prompt_tokens_details"]["cached_tokens"])

    def _rebuilt_prompt(self, question: str, memo_id: str, prompt_tokens: int) -> str | None:
        """The reader's answer prompt cut before the memo's closing tag, or None when the
        rebuild does not match the prompt the server ran."""
        hits = self._post("/v1/search", self.settings.reader_key, {"query": question})["data"]
        chunks = [
            ScoredChunk(
                h["chunk_id"],
                h["doc_id"],
                h["title"],
                h["source"],
                0,
                h["start"],
                h["end"],
                h["text"],
                h["score"],
            )
            for h in hits
        ]
        evidence = self.selector.select(question, chunks)
        prompt = self.builder.build(question, [s.as_source() for s in evidence])
        memo = [s.n for s in prompt.sources if s.chunk.doc_id == memo_id]
        if len(prompt.token_ids) != prompt_tokens or not memo:
            return None
        return prompt.text[: prompt.text.index(f"</source {memo[0]}>")]

    def run(self) -> dict[str, Any]:
        # Fresh names every run: a repeated run must not find its own guesses in the cache.
        run_id = secrets.token_hex(4)
        rng = random.Random(f"{self.settings.seed}-{run_id}")
        first, right, wrong, control = Samples(), Samples(), Samples(), Samples()
        unverified = 0
        for trial in range(self.settings.trials):
            company, figure = _company(rng), _figure(rng)
            memo = self._post(
                "/v1/documents",
                self.settings.admin_key,
                {
                    "text": f"The board approved the acquisition of {company} for {figure} "
                    "million euros. The deal is confidential until it closes.",
                    "title": f"Board memo: {company}",
                    "doc_id": f"oracle-{run_id}-{trial}",
                    "acl": {"groups": [self.settings.restricted_group]},
                },
            )
            question = f"How much does the acquisition of {company} cost?"
            answer = self._post("/v1/answers", self.settings.reader_key, {"question": question})
            cut = self._rebuilt_prompt(
                question, memo["id"], answer["usage"].get("prompt_tokens", 0)
            )
            if cut is None or figure not in cut:
                unverified += 1
            else:
                # A first wrong guess, so the two measured guesses share the outsider's own
                # earlier blocks alike (up to the figure); then both, in random order.
                warm_up = _figure(rng, avoid=(figure,))
                self._guess(cut.replace(figure, warm_up), first)
                false = cut.replace(figure, _figure(rng, avoid=(figure, warm_up)))
                guesses = [(cut, right), (false, wrong)]
                rng.shuffle(guesses)
                for text, samples in guesses:
                    self._guess(text, samples)
                self._guess(false, control)
            self.client.delete(
                f"/v1/documents/{memo['id']}",
                headers={"Authorization": f"Bearer {self.settings.admin_key}"},
            ).raise_for_status()
        return {
            "meta": run_metadata(
                url=self.settings.url, trials=self.settings.trials, seed=self.settings.seed
            ),
            "verified_trials": len(right.latency_ms),
            "unverified_trials": unverified,
            "first_guess": _described(first),
            "right": _described(right),
            "wrong": _described(wrong),
            "control_repeat": _described(control),
            "p50_difference_ms": _p50_difference(right, wrong, rng),
        }


def _described(samples: Samples) -> dict[str, Any]:
    return {
        "cached_tokens": summary([float(c) for c in samples.cached_tokens]),
        "latency_ms": summary(samples.latency_ms),
    }


def _p50_difference(right: Samples, wrong: Samples, rng: random.Random) -> dict[str, float]:
    """Median latency of true-figure guesses minus that of wrong ones, with a 95% bootstrap
    interval: an interval holding 0 means no difference the run can tell from noise."""
    a, b = np.array(right.latency_ms), np.array(wrong.latency_ms)
    if not len(a) or not len(b):
        return {"p50": float("nan"), "ci95_low": float("nan"), "ci95_high": float("nan")}
    draws = np.random.default_rng(rng.getrandbits(32))
    boot = [
        np.median(draws.choice(a, len(a))) - np.median(draws.choice(b, len(b))) for _ in range(2000)
    ]
    low, high = np.percentile(boot, [2.5, 97.5])
    return {"p50": float(np.median(a) - np.median(b)), "ci95_low": low, "ci95_high": high}


def to_markdown(report: dict[str, Any]) -> str:
    rows = [
        [
            name,
            report[key]["cached_tokens"]["mean"],
            report[key]["latency_ms"]["p50"],
            report[key]["latency_ms"]["p90"],
        ]
        for name, key in (
            ("first (wrong) guess", "first_guess"),
            ("true figure", "right"),
            ("wrong figure", "wrong"),
            ("control: own repeat", "control_repeat"),
        )
    ]
    diff = report["p50_difference_ms"]
    return (
        "# Prefix-cache oracle\n\n"
        f"{report['verified_trials']} trials ({report['unverified_trials']} left out: prompt "
        "rebuild did not match).\n\n"
        + markdown_table(["guess", "cached tokens (mean)", "latency p50 ms", "p90 ms"], rows)
        + f"\n\np50(true) − p50(wrong): {diff['p50']:.1f} ms, 95% bootstrap interval "
        f"[{diff['ci95_low']:.1f}, {diff['ci95_high']:.1f}] ms.\n"
    )

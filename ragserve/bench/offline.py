"""Offline throughput: the engine against Hugging Face transformers on one workload.

N requests with random prompt lengths and output lengths (EOS ignored) are submitted at once to
the engine. The same kind of requests then go through transformers' generate, at batch 1 and as
a static batch (left-padded prompts, every row generating the longest output of its batch), in
float32 and in bfloat16.
transformers is given the benefit of the doubt: all tokens it generates count, padding
included, and it runs on a sample of the requests since it is slow.
"""

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ragserve import reports
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.engine.kv_cache import DTYPES
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.stats import StepTimes


@dataclass
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]

    @classmethod
    def random(
        cls,
        num_requests: int,
        input_range: tuple[int, int],
        output_range: tuple[int, int],
        vocab_size: int,
        seed: int,
    ) -> "Workload":
        rng = random.Random(seed)
        # Avoid the low ids, where tokenizers keep their special tokens.
        prompts = [
            [rng.randrange(1000, vocab_size) for _ in range(rng.randint(*input_range))]
            for _ in range(num_requests)
        ]
        outputs = [rng.randint(*output_range) for _ in range(num_requests)]
        return cls(prompts, outputs)

    def sample(self, count: int) -> "Workload":
        return Workload(self.prompts[:count], self.output_lens[:count])


@dataclass
class Measurement:
    name: str
    requests: int
    prompt_tokens: int
    output_tokens: int
    seconds: float

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


def run_engine(engine: LLMEngine, workload: Workload) -> tuple[Measurement, StepTimes]:
    for prompt, output_len in zip(workload.prompts, workload.output_lens, strict=True):
        params = SamplingParams(max_tokens=output_len, temperature=0, ignore_eos=True)
        engine.add_request(prompt, params)
    before = engine.step_times.copy()
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        engine.step()
    elapsed = time.perf_counter() - start
    measurement = Measurement(
        "ragserve",
        len(workload.prompts),
        sum(map(len, workload.prompts)),
        sum(workload.output_lens),
        elapsed,
    )
    return measurement, engine.step_times.since(before)


def run_transformers(
    model_path: Path, workload: Workload, batch_size: int, dtype: torch.dtype
) -> Measurement:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    model.eval()
    pad = model.config.eos_token_id
    pad = pad[0] if isinstance(pad, list) else pad
    generated = 0
    start = time.perf_counter()
    for first in range(0, len(workload.prompts), batch_size):
        prompts = workload.prompts[first : first + batch_size]
        new_tokens = max(workload.output_lens[first : first + batch_size])
        width = max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
        generated += (out.shape[1] - width) * len(prompts)
    elapsed = time.perf_counter() - start
    return Measurement(
        f"transformers {str(dtype).removeprefix('torch.')} batch {batch_size}",
        len(workload.prompts),
        sum(map(len, workload.prompts)),
        generated,
        elapsed,
    )


def run(
    config: EngineConfig,
    num_requests: int,
    input_range: tuple[int, int],
    output_range: tuple[int, int],
    hf_batch1_requests: int,
    hf_static_batch: int,
    seed: int,
    hf_dtypes: tuple[str, ...] = ("float32", "bfloat16"),
) -> dict:
    engine = LLMEngine(config)
    workload = Workload.random(
        num_requests, input_range, output_range, engine.model.spec.vocab_size, seed
    )
    # A short warm-up builds the attention kernel and touches the weights.
    run_engine(engine, workload.sample(2))
    ours, profile = run_engine(engine, workload)
    baselines = []
    for name in hf_dtypes:
        hf_dtype = DTYPES[name]
        if hf_batch1_requests:
            sample = workload.sample(hf_batch1_requests)
            baselines.append(run_transformers(engine.model_path, sample, 1, hf_dtype))
        if hf_static_batch:
            sample = workload.sample(hf_static_batch)
            baselines.append(run_transformers(engine.model_path, sample, hf_static_batch, hf_dtype))
    return {
        "workload": {
            "num_requests": num_requests,
            "input_range": input_range,
            "output_range": output_range,
            "seed": seed,
        },
        "config": asdict(config),
        "ragserve": asdict(ours) | {"output_tokens_per_s": ours.output_tokens_per_s},
        "step_profile": asdict(profile),
        "baselines": [
            asdict(b)
            | {
                "output_tokens_per_s": b.output_tokens_per_s,
                "speedup": ours.output_tokens_per_s / b.output_tokens_per_s,
            }
            for b in baselines
        ],
        "threads": torch.get_num_threads(),
    }


def to_markdown(report: dict) -> str:
    ours = report["ragserve"]
    profile = report["step_profile"]
    lines = [
        "# Offline throughput",
        "",
        f"Workload: {report['workload']}, dtype {report['config']['dtype']}, "
        f"{report['threads']} threads.",
        "",
        "| system | requests | output tokens | seconds | output tok/s | ragserve speedup |",
        "|---|---|---|---|---|---|",
        f"| ragserve | {ours['requests']} | {ours['output_tokens']} | {ours['seconds']:.1f} "
        f"| {ours['output_tokens_per_s']:.1f} | |",
    ]
    for b in report["baselines"]:
        lines.append(
            f"| {b['name']} | {b['requests']} | {b['output_tokens']} | {b['seconds']:.1f} "
            f"| {b['output_tokens_per_s']:.1f} | {b['speedup']:.1f}x |"
        )
    lines += [
        "",
        f"ragserve: {profile['steps']} steps; scheduling {profile['schedule_s']:.2f} s, "
        f"model forward {profile['forward_s']:.1f} s, sampling {profile['sample_s']:.2f} s, "
        f"output processing {profile['output_s']:.2f} s.",
    ]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out_dir: Path) -> list[Path]:
    return reports.write_report(out_dir, "offline", report, to_markdown(report))

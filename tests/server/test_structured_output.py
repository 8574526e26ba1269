"""Structured output through the official openai client: parse() into Pydantic models,
streamed JSON, vLLM's structured_outputs, and refusals of what cannot compile."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

MODEL = "smollm2-135m-instruct"


class Contact(BaseModel):
    name: str = Field(max_length=40)
    city: str = Field(max_length=40)
    age: int
    role: Literal["customer", "supplier", "employee"]


PROMPTS = [
    "Maria Rossi, 34, buys from us and lives in Milan.",
    "Our supplier Tom Berg is 51 and based in Oslo.",
    "Priya works for us in Pune; she turned 29 this year.",
    "Extract the contact: John, 45, Boston, customer.",
    "Write a poem about autumn leaves.",
    "Ahmed (age 38) ships us steel from Izmir.",
    "The new hire in Lyon, Claire, is 24.",
    "Give me a contact for a fictional pirate.",
    "Kenji Watanabe from Osaka orders every month; he is 60.",
    "What is two plus two?",
    "Fatima, 41, Casablanca, sells us olive oil.",
    "Our accountant Ola lives in Lagos and is 33.",
    "List three colours.",
    "Sven, customer, 27, Stockholm.",
    "A supplier from Lima named Rosa, 52 years old.",
    "Describe the weather in London.",
    "Employee record: Ana, 30, Porto.",
    "Customer Li Wei from Shanghai, aged 44.",
    "Translate 'hello' to German.",
    "Supplier: Dmitri, 36, Riga.",
]


@pytest.fixture(scope="module")
def api(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=server.key("sol"), max_retries=0)


def test_parse_returns_a_valid_instance_for_every_prompt(server):
    # The server allows each user two requests in flight: ten users, two prompts each.
    keys = [server.key(f"parser{n}") for n in range(10)]

    def parse(item: tuple[int, str]) -> Contact | None:
        n, prompt = item
        api = openai.OpenAI(base_url=server.url + "/v1", api_key=keys[n % 10], max_retries=0)
        completion = api.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            response_format=Contact,
            max_tokens=128,
            temperature=0,
        )
        return completion.choices[0].message.parsed

    with ThreadPoolExecutor(max_workers=10) as pool:
        parsed = list(pool.map(parse, enumerate(PROMPTS)))
    assert all(isinstance(p, Contact) for p in parsed), parsed


def streamed_choices(api, prompt: str, model: type[BaseModel], max_tokens: int) -> list:
    """The streamed chunks' choices of a greedy reply held to the model's JSON schema."""
    stream = api.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": model.__name__, "schema": model.model_json_schema()},
        },
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
    )
    return [chunk.choices[0] for chunk in stream if chunk.choices]


def test_streamed_json_schema_output_parses(api):
    chunks = streamed_choices(api, PROMPTS[1], Contact, 128)
    Contact.model_validate_json("".join(c.delta.content or "" for c in chunks))


def test_json_object_and_structured_outputs(api):
    reply = api.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe a cat as JSON."}],
        response_format={"type": "json_object"},
        max_tokens=96,
        temperature=0,
    )
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
    date = api.completions.create(
        model=MODEL,
        prompt="The treaty was signed on",
        max_tokens=16,
        temperature=0,
        extra_body={"structured_outputs": {"regex": r" \d{4}-\d{2}-\d{2}"}},
    )
    assert re.fullmatch(r" \d{4}-\d{2}-\d{2}", date.choices[0].text)
    verdict = api.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Is water wet?"}],
        max_tokens=8,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert verdict.choices[0].message.content in {"yes", "no"}


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "nosuch"}},
                }
            },
            "nosuch",
        ),
        ({"structured_outputs": {"regex": "(open"}}, "unclosed"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "exactly one"),
        ({"response_format": {"type": "json_schema"}}, "json_schema"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
    ],
)
def test_what_cannot_compile_is_a_400_with_the_reason(api, extra, reason):
    with pytest.raises(openai.BadRequestError) as refused:
        api.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=8,
            extra_body=extra,
        )
    assert reason in refused.value.message.lower()


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "maxLength": 40}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}
WEATHER_QUESTION = [{"role": "user", "content": "What's the weather in Paris, in celsius?"}]


class WeatherArguments(BaseModel):
    city: str
    unit: Literal["celsius", "fahrenheit"]


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_a_forced_tool_call_has_arguments_that_validate(api, tool_choice):
    reply = api.chat.completions.create(
        model=MODEL,
        messages=WEATHER_QUESTION,
        tools=[WEATHER, TIME] if tool_choice == "required" else [WEATHER],
        tool_choice=tool_choice,
        max_tokens=64,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    if tool_choice == "required":
        assert call.function.name in {"get_weather", "get_time"}
    else:
        assert call.function.name == "get_weather"
        WeatherArguments.model_validate_json(call.function.arguments)
    # The conversation goes on with the tool's result.
    follow_up = api.chat.completions.create(
        model=MODEL,
        messages=[
            *WEATHER_QUESTION,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18}'},
        ],
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=16,
        temperature=0,
    )
    assert follow_up.choices[0].message.content


def test_a_streamed_tool_call_arrives_as_deltas_the_sdk_assembles(api):
    # Not a question asked before: the response cache would replay it in one piece.
    question = [{"role": "user", "content": "Is it cold in Oslo? Fahrenheit, please."}]
    with api.chat.completions.stream(
        model=MODEL,
        messages=question,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        temperature=0,
    ) as stream:
        deltas = [e for e in stream if e.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    assert len(deltas) > 1, "the arguments stream in pieces"
    (call,) = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    WeatherArguments.model_validate_json(call.function.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


def test_auto_lets_the_model_answer_in_text_or_call(api):
    reply = api.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello to Ann."}],
        tools=[WEATHER],
        tool_choice="auto",
        max_tokens=32,
        temperature=0,
    )
    message = reply.choices[0].message
    # Either way the reply is well formed: text, or calls of offered functions.
    if message.tool_calls:
        assert all(c.function.name == "get_weather" for c in message.tool_calls)
        assert reply.choices[0].finish_reason == "tool_calls"
    else:
        assert message.content


def test_a_history_call_with_arguments_that_are_not_json_is_a_400(api):
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
    with pytest.raises(openai.BadRequestError) as refused:
        api.chat.completions.create(
            model=MODEL,
            messages=[{"role": "assistant", "content": None, "tool_calls": [call]}],
            max_tokens=8,
        )
    assert "must be json" in refused.value.message.lower()


def test_a_tool_choice_naming_no_offered_tool_is_a_400(api):
    with pytest.raises(openai.BadRequestError) as refused:
        api.chat.completions.create(
            model=MODEL,
            messages=WEATHER_QUESTION,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "launch_rocket"}},
            max_tokens=8,
        )
    assert "not in tools" in refused.value.message


class City(BaseModel):
    name: str
    country: str
    population: int


def test_parse_at_the_default_temperature_stays_inside_the_schema(server):
    """parse() with a three-field model and no bounds, sampled at temperature 1 without a
    seed: the grammar closes the object after its declared properties, ends integers within
    2^53, and a string the model does not close is closed in time (ending.py), so 20 of 20
    parse within max_tokens=80."""
    keys = [server.key(f"city{n}") for n in range(10)]

    def parse(n: int) -> City | None:
        api = openai.OpenAI(base_url=server.url + "/v1", api_key=keys[n % 10], max_retries=0)
        completion = api.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Describe a city as JSON."}],
            response_format=City,
            max_tokens=80,
        )
        return completion.choices[0].message.parsed

    with ThreadPoolExecutor(max_workers=10) as pool:
        parsed = list(pool.map(parse, range(20)))
    assert all(isinstance(p, City) for p in parsed), parsed


class Story(BaseModel):
    title: str
    story: str
    stars: int


def test_a_reply_closed_to_fit_max_tokens_parses_and_is_counted(server, api):
    def closed_early() -> float:
        lines = httpx.get(server.url + "/metrics").text.splitlines()
        counts = [
            line for line in lines if line.startswith("ragserve:constrained_closed_early_total{")
        ]
        assert counts, "no ragserve:constrained_closed_early_total in /metrics"
        return sum(float(line.rpartition(" ")[2]) for line in counts)

    def story(max_tokens: int):
        return api.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me a long story about a dragon."}],
            response_format=Story,
            max_tokens=max_tokens,
            temperature=0,
        )

    before = closed_early()
    completion = story(24)
    (choice,) = completion.choices
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Story)
    assert completion.usage.completion_tokens <= 24
    assert choice.model_extra["closed_early"] is True
    assert closed_early() == before + 1
    chunks = streamed_choices(api, "Tell me a long story about a dragon.", Story, 24)
    Story.model_validate_json("".join(c.delta.content or "" for c in chunks))
    assert chunks[-1].finish_reason == "stop" and chunks[-1].model_extra["closed_early"] is True
    assert not any((c.model_extra or {}).get("closed_early") for c in chunks[:-1])
    # A reply that ends by itself carries no mark.
    assert "closed_early" not in (story(80).choices[0].model_extra or {})


def test_a_forced_call_carries_exactly_the_declared_arguments(api):
    """The tool's schema does not say additionalProperties: it is taken as false."""
    parameters = {k: v for k, v in WEATHER["function"]["parameters"].items()}
    parameters.pop("additionalProperties")
    parameters["properties"] = {
        "city": {"type": "string"},
        "unit": parameters["properties"]["unit"],
    }
    tool = {"type": "function", "function": {**WEATHER["function"], "parameters": parameters}}
    for seed in range(20):
        reply = api.chat.completions.create(
            model=MODEL,
            messages=WEATHER_QUESTION,
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=80,
            seed=seed,
        )
        (call,) = reply.choices[0].message.tool_calls
        assert set(json.loads(call.function.arguments)) == {"city", "unit"}

"""A schema-driven fuzzer against a live server: no request it makes from the OpenAPI document
gets a 5xx, and every status code, content type and error body it sees is documented."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from ragserve.access import Role
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.server.conftest import start_server

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, embedder):
    # Small outputs keep each generated request cheap; the cap itself is fuzzed too.
    config = {"dtype": "float32", "kv_cache_memory_bytes": 4096 * 46080}
    engine = LLMEngine(EngineConfig(**config, max_num_batched_tokens=256))
    app_settings = Settings(
        data_dir=tmp_path_factory.mktemp("fuzz"),
        max_tokens_cap=4,
        default_max_tokens=4,
        max_upload_bytes=4096,
        **config,
    )
    yield from start_server(app_settings, engine, embedder)


@pytest.fixture(scope="module")
def admin_headers(fuzzed):
    return {"Authorization": f"Bearer {fuzzed.key('fuzzer', ('staff',), role=Role.ADMIN)}"}


def test_the_api_behaves_as_documented(fuzzed, admin_headers):
    api = schemathesis.openapi.from_url(fuzzed.url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 14

    statuses: list[int] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def behaves(case: schemathesis.Case) -> None:
            response = case.call_and_validate(headers=admin_headers, checks=CHECKS)
            statuses.append(response.status_code)

        behaves()
    # The fuzzer got through: requests were made and some succeeded.
    assert len(statuses) >= 5 * len(operations) and statuses.count(200) > len(operations)
    fuzzed.wait_idle(timeout=60)

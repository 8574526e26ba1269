"""The answerability model names the reader model whose similarities it was fitted on, and
settings that pair it with another reader model are refused with the reason."""

import json

import pytest
from pydantic import ValidationError

from ragserve.rag.answerability import PACKAGED, Answerability
from ragserve.rag.embeddings import DEFAULT_READER_MODEL
from ragserve.settings import Settings


def test_the_packaged_model_was_fitted_with_the_default_reader():
    assert Answerability.load().reader_model == DEFAULT_READER_MODEL == Settings().reader_model


def test_another_reader_needs_a_model_fitted_with_it(tmp_path):
    with pytest.raises(ValidationError, match="fitted with reader model 'all-mpnet-base-v2'"):
        Settings(reader_model="all-minilm-l6-v2")
    refitted = tmp_path / "answerability.json"
    refitted.write_text(json.dumps(json.loads(PACKAGED.read_text()) | {"reader_model": "x"}))
    assert Settings(reader_model="x", answerability_file=refitted).reader_model == "x"


def test_a_missing_answerability_file_is_a_settings_error(tmp_path):
    with pytest.raises(ValidationError, match="does not exist"):
        Settings(answerability_file=tmp_path / "nowhere.json")

import pytest
from pydantic import ValidationError

from ragserve.settings import Settings


def test_toml_then_environment_then_flags(tmp_path, monkeypatch):
    config = tmp_path / "ragserve.toml"
    config.write_text("port = 9001\nmax_tokens_cap = 100\nresponse_cache = true\n")
    monkeypatch.setenv("RAGSERVE_MAX_TOKENS_CAP", "200")
    settings = Settings.load(config, host="0.0.0.0")
    assert settings.port == 9001
    assert settings.max_tokens_cap == 200
    assert settings.response_cache is True
    assert settings.host == "0.0.0.0"
    assert Settings.load(config, port=9002).port == 9002


def test_unknown_keys_and_bad_values_are_errors(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("max_tokens_capp = 5\n")
    with pytest.raises(ValidationError, match="max_tokens_capp"):
        Settings.load(config)
    with pytest.raises(ValidationError):
        Settings(max_num_seqs=0)
    with pytest.raises(FileNotFoundError):
        Settings.load(tmp_path / "missing.toml")


def test_engine_settings_reach_the_engine_config(monkeypatch):
    monkeypatch.setenv("RAGSERVE_KV_CACHE_DTYPE", "int8")
    monkeypatch.setenv("RAGSERVE_QUANTIZATION", "int8")
    config = Settings().engine_config()
    assert (config.kv_cache_dtype, config.quantization) == ("int8", "int8")
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, int8"):
        Settings(kv_cache_dtype="fp8").engine_config()

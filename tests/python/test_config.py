"""The Python view of meridian.toml: same schema as C++, ValueError with dotted paths."""
import json

import pytest

import meridian


def test_package_is_the_installed_extension_not_the_source_tree():
    assert meridian.__version__ == "0.1.0"
    assert "site-packages" in meridian.__file__ or "dist-packages" in meridian.__file__


def test_defaults_and_presets():
    cfg = meridian.MeridianConfig.defaults()
    assert cfg.scheduler.max_think_tokens == 32768
    assert cfg.entropy.ema_alpha == pytest.approx(0.2)
    assert cfg.kv_memory.capacity_bytes is None  # "auto"
    assert cfg.disagg.fabric == meridian.FabricKind.NONE
    assert cfg.model_names == ["deepseek_r1", "deepseek_r1_distill_qwen", "granite_3_2", "qwen3"]
    assert cfg.model("qwen3").think_start_token_ids == [151667]
    assert cfg.model("deepseek_r1").think_end_token_ids == [128799]


def test_load_config_overlays_a_file(tmp_path):
    path = tmp_path / "meridian.toml"
    path.write_text("[scheduler]\nmax_think_tokens = 8192\n[model.qwen3]\nsupports_think_disable = false\n")
    cfg = meridian.load_config(path)
    assert cfg.scheduler.max_think_tokens == 8192
    assert cfg.scheduler.min_think_tokens == 512
    assert cfg.model("qwen3").supports_think_disable is False
    assert cfg.model("qwen3").think_end_token_ids == [151668]


def test_load_config_several_files_later_wins(tmp_path):
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text("[entropy]\nema_alpha = 0.2\nrpdi_threshold = 4.0\n")
    b.write_text("[entropy]\nema_alpha = 0.3\n")
    cfg = meridian.load_config([a, b])
    assert cfg.entropy.ema_alpha == pytest.approx(0.3)
    assert cfg.entropy.rpdi_threshold == pytest.approx(4.0)


def test_load_config_without_a_file_uses_the_search_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MERIDIAN_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing-here"))
    assert meridian.load_config() == meridian.MeridianConfig.defaults()
    (tmp_path / "meridian.toml").write_text("[logging]\nlevel = \"debug\"\n")
    assert meridian.load_config().logging.level == "debug"


def test_bad_value_is_a_value_error_with_the_dotted_path(tmp_path):
    path = tmp_path / "meridian.toml"
    path.write_text("[entropy]\nema_alpha = 1.5\n")
    with pytest.raises(ValueError) as err:
        meridian.load_config(path)
    assert str(err.value).startswith("entropy.ema_alpha must be in (0, 1]; got 1.5")
    assert f"{path}:2:13" in str(err.value)


def test_every_problem_is_reported():
    with pytest.raises(ValueError) as err:
        meridian.parse_config("[scheduler]\nmin_think_tokens = 9\nmax_think_tokens = 9\nbogus = 1\n[disagg]\nenabled = true\n")
    lines = str(err.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("scheduler.min_think_tokens must be < scheduler.max_think_tokens")
    assert lines[1].startswith("scheduler.bogus is not a known key of [scheduler]")
    assert lines[2].startswith('disagg.fabric must be "nixl" or "mooncake" when disagg.enabled = true')


def test_missing_file_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read config file"):
        meridian.load_config(tmp_path / "absent.toml")


def test_hand_edited_config_is_validated():
    cfg = meridian.MeridianConfig.defaults()
    cfg.entropy.ema_alpha = 0.0
    assert cfg.issues() == ["entropy.ema_alpha must be in (0, 1]; got 0.0"]
    with pytest.raises(ValueError, match=r"entropy\.ema_alpha must be in \(0, 1\]"):
        cfg.validate()


def test_toml_and_json_round_trip():
    cfg = meridian.parse_config("[kv_memory]\ncapacity_bytes = 1073741824\n[telemetry]\nprometheus_port = 9100\n")
    again = meridian.parse_config(cfg.to_toml())
    assert again == cfg
    doc = json.loads(cfg.to_json(model="qwen3"))
    assert doc["kv_memory"]["capacity_bytes"] == 1073741824
    assert list(doc["model"]) == ["qwen3"]


def test_field_paths_cover_every_section():
    paths = meridian.config_field_paths()
    assert "entropy.ema_alpha" in paths
    assert "model.<name>.think_end_token_ids" in paths
    sections = {p.split(".")[0] for p in paths}
    assert sections == {"scheduler", "entropy", "kv_memory", "disagg", "telemetry", "logging", "model"}


def test_qwen3_preset_against_the_real_tokenizer(qwen3_tokenizer):
    vocab = meridian.TokenizerVocab.from_file(str(qwen3_tokenizer))
    qwen = meridian.MeridianConfig.defaults().model("qwen3")
    assert vocab.check_model(qwen) == []
    assert vocab.find_id("<think>") == 151667
    assert vocab.find_id("</think>") == 151668
    wrong = meridian.MeridianConfig.defaults().model("deepseek_r1_distill_qwen")
    problems = vocab.check_model(wrong)
    assert any('is "<|box_start|>" in the tokenizer' in p for p in problems)


def test_qwen3_preset_against_the_real_tokenizer_config(repo):
    # tokenizer_config.json is a second, independent source of the same ids.
    decoder = json.loads((repo / "tests/data/qwen3/tokenizer_config.json").read_text())["added_tokens_decoder"]
    by_text = {entry["content"]: int(token_id) for token_id, entry in decoder.items()}
    qwen = meridian.MeridianConfig.defaults().model("qwen3")
    assert qwen.think_start_token_ids == [by_text["<think>"]]
    assert qwen.think_end_token_ids == [by_text["</think>"]]
    assert by_text["<|im_end|>"] in qwen.eos_token_ids
    assert qwen.tool_call_start_token_ids == [by_text["<tool_call>"]]


def test_soft_switch_detection():
    assert meridian.prompt_disables_thinking("hi /no_think")
    assert not meridian.prompt_disables_thinking("hi /no_think ... /think")

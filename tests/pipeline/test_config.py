"""Config loading: presets resolve, bad files fail with one line naming the field, the dump round-trips."""

import pytest

from pipeline.config import Config, ConfigError, from_dict, load_file, load_preset, presets


def test_every_preset_loads_and_round_trips(tmp_path):
    assert "demo" in presets()
    for name in presets():
        cfg = load_preset(name)
        assert cfg.name == name
        p = tmp_path / f"{name}.toml"
        p.write_text(cfg.to_toml())
        assert load_file(p) == cfg


def test_overrides_change_only_run_fields():
    cfg = load_preset("demo")
    new = cfg.with_overrides(n=5, seed=None)
    assert new.run.n == 5 and new.run.seed == cfg.run.seed and new.sample == cfg.sample


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"run": {"n": "ten"}}, "[run] n must be an integer"),
        ({"run": {"device": "tpu"}}, "run.device"),
        ({"sample": {"max_ops": 9}}, "max_ops"),
        ({"sample": {"min_ops": 3, "max_ops": 2}}, "min_ops"),
        ({"sample": {"depth_weights": [1.0]}}, "depth_weights"),
        ({"sample": {"categories": ["no-such-category"]}}, "unknown"),
        ({"filter": {"min_eager_ms": 5.0, "max_eager_ms": 1.0}}, "min_eager_ms"),
        ({"filter": {"min_input_sensitivity_ratio": -1.0}}, "min_input_sensitivity_ratio must be >= 0"),
        ({"profiel": {}}, "unknown section"),
        ({"run": {"nn": 3}}, "unknown key"),
        ({"decontaminate": {"reference": []}}, "reference"),
    ],
)
def test_bad_configs_name_the_field(data, fragment):
    with pytest.raises(ConfigError) as e:
        from_dict(data, "test.toml")
    msg = str(e.value)
    assert fragment in msg and "test.toml" in msg and "\n" not in msg


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="demo"):
        load_preset("nope")


def test_malformed_toml_is_one_line(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[run\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_file(p)


def test_defaults_meet_the_composition_targets():
    s = Config().sample
    w = s.depth_weights[: s.max_ops]
    assert sum(w[2:]) / sum(w) >= 0.4 and s.dag_share >= 0.25

"""Config loading: presets resolve, bad files fail with one line naming the field, the dump round-trips."""

import dataclasses

import pytest

from pipeline.rundir.config import (
    Config,
    ConfigError,
    from_dict,
    load_file,
    load_preset,
    presets,
    with_profile_settings,
)


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
        ({"profile": {"first_run_wait_s": -1.0}}, "profile.first_run_wait_s must be >= 0"),
        ({"profile": {"holder_cores": -1}}, "profile.holder_cores must be >= 0"),
        ({"profile": {"longest_first_last_shards": -1}}, "profile.longest_first_last_shards must be >= 0"),
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


def test_profile_settings_for_one_call_change_only_those_keys():
    cfg = load_preset("h200")
    got, given = with_profile_settings(cfg, ["profile.median_precision=0.02", " profile.timing_phases = false"], "t")
    assert given == {"median_precision": 0.02, "timing_phases": False}
    assert got.profile.median_precision == 0.02 and got.profile.timing_phases is False
    assert dataclasses.replace(got.profile, median_precision=cfg.profile.median_precision,
                               timing_phases=True) == cfg.profile
    assert got.filter == cfg.filter and got.sample == cfg.sample
    assert with_profile_settings(cfg, [], "t") == (cfg, {})


@pytest.mark.parametrize(("pair", "fragment"), [
    ("filter.max_eager_ms=200", "--set takes profile.KEY=VALUE"),   # only how tasks are measured
    ("profile.median_precision", "--set takes profile.KEY=VALUE"),
    ("profile.no_such_key=1", "unknown key(s) ['no_such_key']"),
    ("profile.max_runs=two", "is not a TOML value"),
    ("profile.max_runs=2", "profile.max_runs must be >= min_runs"),
    ("profile.timing_phases=1", "timing_phases must be true or false"),
    ("profile.shortcut_ulp_steps=0", "profile.shortcut_ulp_steps must be >= 1 (got 0)"),
])
def test_bad_profile_settings_name_the_key_and_the_fix(pair, fragment):
    with pytest.raises(ConfigError) as e:
        with_profile_settings(load_preset("h200"), [pair], "run/config.toml with --set")
    assert fragment in str(e.value) and "\n" not in str(e.value)

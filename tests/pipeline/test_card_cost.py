"""The card states what a release cost: GPU time over every profile call, the CPU stages, sampled -> published."""

from pipeline.outputs import card


def _manifest(calls: list[dict]) -> dict:
    return {"rows": 300, "gpu": ["NVIDIA H200"],
            "funnel": [{"step": "sampled", "tasks": 400}, {"step": "kept after filter", "tasks": 320}],
            "stage_records": {"profile": {**calls[-1], "calls": calls},
                              "sample": {"seconds": 120.0, "seconds_all_calls": 180.0}}}


def test_gpu_hours_sum_every_call_times_its_gpus():
    text = "\n".join(card._cost(_manifest([{"seconds": 1800.0, "device": "cuda", "gpus": 1},
                                           {"seconds": 900.0, "device": "cuda", "gpus": 4}])))
    assert "1.50 GPU-hours in 2 call(s) on NVIDIA H200" in text  # (1800 + 4 * 900) / 3600
    assert "18.00 GPU-s per published task" in text  # 5400 / 300
    assert "| sample (CPU) | 3.0 min wall |" in text
    assert "400 -> 300 (75.0%)" in text


def test_calls_measured_with_other_settings_are_named():
    calls = [{"seconds": 60.0, "device": "cuda", "gpus": 1},
             {"seconds": 60.0, "device": "cuda", "gpus": 1, "settings": {"profile.median_precision": 0.015}},
             {"seconds": 60.0, "device": "cuda", "gpus": 1, "settings": {"profile.median_precision": 0.015}}]
    text = "\n".join(card._cost(_manifest(calls)))
    assert "| profile settings | 2 of 3 call(s) changed some from `config.toml`" in text
    assert "| `profile.median_precision` | 0.015 | 2 |" in text
    assert "settings" not in "\n".join(card._cost(_manifest(calls[:1])))


def test_a_cpu_profile_costs_no_gpu_time_and_no_profile_says_nothing():
    text = "\n".join(card._cost(_manifest([{"seconds": 60.0, "device": "cpu", "gpus": 0}])))
    assert "GPU-hours" not in text and "400 -> 300" in text
    assert card._cost({"rows": 3, "stage_records": {}}) == []


def test_a_grown_run_says_how_far_one_command_reproduces_it():
    cfg = {"name": "h200", "run": {"seed": 7}}
    plain = card._reproduce({}, cfg)
    assert plain.startswith("Reproduce: `opsynth run --preset h200 --seed 7") and "grew" not in plain
    grown = card._reproduce({"growth": [{"from": 900, "to": 3600}, {"from": 3600, "to": 9000}]}, cfg)
    assert "grew in 2 step(s) (n 900 -> 3,600 -> 9,000" in grown and "at n = 9,000" in grown


def test_a_run_whose_compile_choices_were_untimed_says_what_compile_ms_measured():
    said = card.untimed_compile({"profile": {"compile_timed_choices": False}})
    assert "no choice by timing" in said and "not the fastest autotuned" in said
    assert card.untimed_compile({"profile": {"compile_timed_choices": True}}) == ""
    assert card.untimed_compile({"profile": {}}) == ""  # a run from before the setting: timed, as inductor does

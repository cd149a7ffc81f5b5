"""Torch's own metadata against the catalog: no sampleable entry draws random numbers (live torch.Tag through the
pinned ATen labels of the CPU and the GPU), every entry torch tests takes float32 on the CPU, the pin in operators/torch_meta.json is
current, and the OpInfo matching rules. Reads the pinned JSON; never imports torch.testing._internal."""

import random
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

from operators import torch_meta
from operators.catalog import REGISTRY, sampleable
from operators.labels import pins
from operators.render import render
from operators.sample import single_op_graph
from operators.trace import load_module
from pinning.torch_meta import match_moduleinfos, match_opinfos


def _aten(name: str) -> set[str]:
    return set().union(*pins("cuda").get(name, ()))  # CPU and GPU behaviours (the GPU pin, once it exists)


def test_live_tags_read_torch():
    # the checks below lean on these answers; a torch that renamed its tags would make them pass vacuously
    assert torch_meta.seeded_kind("aten.bernoulli") == "rng"
    assert torch_meta.seeded_kind("aten.add") is None
    assert {"core", "pointwise"} <= torch_meta.live_tags("aten.add")
    assert torch_meta.live_tags("aten.no_such_op_here") is None


def test_every_pinned_aten_op_resolves_in_torch():
    unresolved = {a for s in sampleable() for a in _aten(s.name) if torch_meta.live_tags(a) is None}
    assert not unresolved, f"pinned ATen ops torch does not know (re-pin: python -m pinning.labels): {unresolved}"


def test_no_sampleable_entry_runs_a_seeded_aten_op():
    bad = {}
    for spec in sampleable():
        rng_ops = [a for a, kind in torch_meta.seeded_ops(_aten(spec.name)).items() if kind == "rng"]
        if rng_ops:
            bad[spec.name] = rng_ops
    assert not bad, f"entries run ATen ops tagged nondeterministic_seeded; flag them stochastic=True: {bad}"


def _forward_twice(spec) -> tuple[torch.Tensor, torch.Tensor]:
    for attempt in range(20):
        try:
            g = single_op_graph(spec, random.Random(f"seeded:{spec.name}:{attempt}"), spec.ranks[attempt % len(spec.ranks)])
            break
        except Exception:  # noqa: BLE001 - some draws do not fit the input; the sampler resamples too
            continue
    ns = load_module(render(g))
    torch.manual_seed(0)
    model, inputs = ns["Model"](*ns["get_init_inputs"]()), ns["get_inputs"]()
    outs = []
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for seed in (1, 2):
            torch.manual_seed(seed)
            outs.append(model(*inputs))
    return outs[0], outs[1]


def test_entries_seeded_only_through_dropout_p_are_deterministic():
    # fused attention kernels carry the seeded tag for their dropout_p argument: an entry must leave it at 0
    # (in training mode too: KernelBench never calls .eval()), so two RNG seeds give the same output
    specs = [s for s in sampleable() if torch_meta.seeded_ops(_aten(s.name))]
    if not specs:
        pytest.skip("no sampleable entry runs an op tagged nondeterministic_seeded with this torch")
    differ = [s.name for s in specs if not torch.equal(*_forward_twice(s))]
    assert not differ, f"entries whose output depends on the RNG seed; set their dropout to 0 or flag them stochastic: {differ}"


def test_entries_torch_tests_take_float32_on_cpu():
    # an index input (F.one_hot) is int64 by design: the sampler's float32 reaches such an entry only as weights
    ops = torch_meta.meta()["ops"]
    bad = [s.name for s in sampleable() if not s.token_input and ops[s.name]["float32_cpu"] is False]
    assert not bad, f"torch's OpInfo/ModuleInfo says these do not take float32 on the CPU: {bad}"


def test_pin_is_fresh():
    assert torch_meta.stale_problem() is None, torch_meta.stale_problem()
    ops = torch_meta.meta()["ops"]
    assert set(ops) == set(REGISTRY)
    stale = [n for n, e in ops.items() if set(e["aten_tags"]) | set(e["unresolved"]) != _aten(n)]
    assert not stale, f"torch_meta.json predates aten_pins.json for {stale[:5]}; run: {torch_meta.REPIN}"


def test_pinned_tags_equal_torchs_now():
    pinned = torch_meta.meta()["torch_version"]
    if pinned.split(".")[:2] != torch.__version__.split(".")[:2]:
        pytest.skip(f"tags pinned with torch {pinned}, running {torch.__version__}: tags may differ across versions")
    recorded = {a: tags for e in torch_meta.meta()["ops"].values() for a, tags in e["aten_tags"].items()}
    assert len(recorded) >= 100
    moved = {a: (tags, sorted(torch_meta.live_tags(a) or ())) for a, tags in recorded.items()
             if tags != sorted(torch_meta.live_tags(a) or ())}
    assert not moved, f"tags differ from the pin (pinned, now); run: {torch_meta.REPIN}: {dict(list(moved.items())[:3])}"


def test_pinned_matches_follow_torchs_spellings():
    ops = torch_meta.meta()["ops"]
    assert ops["F.gelu"]["opinfo"] == ["nn.functional.gelu"]
    assert ops["Tensor.cumsum"]["opinfo"] == ops["torch.cumsum"]["opinfo"] == ["cumsum"]
    assert ops["torch.special.expit"]["opinfo"] == ["sigmoid"]  # an alias
    assert ops["nn.Conv2d"]["moduleinfo"] == ["nn.Conv2d"] and ops["nn.Conv2d"]["float32_cpu"] is True
    assert ops["F.dropout"]["opinfo"] == ["nn.functional.dropout"]  # stochastic entries are pinned too


def _opinfo(name, op=None, method=None, operator=None, aliases=(), aten_name=None):
    return SimpleNamespace(name=name, op=op, method_variant=method, operator_variant=operator,
                           aliases=tuple(SimpleNamespace(name=a, op=None, method_variant=None) for a in aliases),
                           aten_name=aten_name or name)


def test_matching_rules():
    import operator

    import torch.nn.functional as F  # noqa: N812

    db = [_opinfo("nn.functional.gelu", op=F.gelu), _opinfo("cumsum", op=torch.cumsum, method=torch.Tensor.cumsum),
          _opinfo("add", operator=operator.add), _opinfo("nn.functional.conv2d", op=lambda *a: None, aliases=("conv2d",)),
          _opinfo("nn.functional.relu", op=F.relu, aten_name="relu"), _opinfo("true_divide"), _opinfo("max")]

    def names(entry):
        return sorted(o.name for o in match_opinfos(entry, db))

    assert names("F.gelu") == ["nn.functional.gelu"]
    assert names("Tensor.cumsum") == names("torch.cumsum") == ["cumsum"]
    assert names("Tensor.__add__") == ["add"] and names("Tensor.__truediv__") == ["true_divide"]
    assert names("torch.conv2d") == ["nn.functional.conv2d"] and names("torch.relu") == ["nn.functional.relu"]
    assert names("torch.amax") == [] and names("nn.GELU") == []
    mdb = [SimpleNamespace(name="nn.Conv2d", module_cls=torch.nn.Conv2d)]
    assert [m.name for m in match_moduleinfos("nn.Conv2d", mdb)] == ["nn.Conv2d"]
    assert match_moduleinfos("nn.Conv1d", mdb) == [] and match_moduleinfos("F.conv2d", mdb) == []


def test_coverage_report():
    c = torch_meta.coverage()
    matched = {n for e in torch_meta.meta()["ops"].values() for n in e["opinfo"]}
    assert c["covered"] + len(c["missing"]) == c["universe"] <= c["op_db_total"]
    assert not set(c["missing"]) & matched and not set(c["missing"]) & set(torch_meta.meta()["op_db_random"])
    print(f"\ncatalog covers {c['covered']} of {c['universe']} float32, non-random op_db operators "
          f"(torch {c['torch_version']}); {len(c['missing'])} missing")
    assert "torch.testing._internal.common_methods_invocations" not in sys.modules  # the runtime reads JSON only


def test_cli_catalog_torch_and_coverage():
    import json

    from typer.testing import CliRunner

    from pipeline.cli import app

    plain = CliRunner().invoke(app, ["catalog"])
    assert plain.exit_code == 0 and "OpInfo" not in plain.output and "F.celu" in plain.output
    res = CliRunner().invoke(app, ["catalog", "--torch", "--coverage"])
    assert res.exit_code == 0, res.output
    rows = {ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in res.output.splitlines()
            if len(ln.split()) == 5 and ln.split()[1].isdigit()}
    matches = torch_meta.category_matches()
    assert {c: [r["entries"], r["opinfo"], r["moduleinfo"], r["either"]] for c, r in matches.items()} == \
        {c: v for c, v in rows.items() if c != "total"}
    assert rows["total"][0] == len(REGISTRY)
    cover = torch_meta.coverage()
    assert f"{len(cover['missing'])} missing:" in res.output and cover["missing"][-1] in res.output
    data = json.loads(CliRunner().invoke(app, ["catalog", "--json", "--torch"]).output)
    assert data["torch"] == matches and sum(r["entries"] for r in data["torch"].values()) == data["total"]
    assert "coverage" not in data

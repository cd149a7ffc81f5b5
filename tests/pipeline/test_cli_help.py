"""`opsynth --help` and each command's help: plain metavars, one flag style, commands in stage order, `--stages` in
the declared order."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from pipeline import cli
from pipeline.rundir.stage_defs import AUDIT_STAGES, RUN_STAGES


def _help(*args: str) -> str:
    res = CliRunner().invoke(cli.app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    return res.output


def _commands() -> list[str]:
    listed = _help().split("Commands")[1]
    return re.findall(r"^\W*([a-z][a-z-]*)\s{2,}", listed, flags=re.M)


def test_commands_are_listed_in_stage_order():
    names = _commands()
    assert set(cli.COMMAND_ORDER) <= set(names)
    stages = [n for n in names if n in RUN_STAGES]
    assert stages == [s for s in RUN_STAGES if s in names]
    assert names.index("init") < names.index("sample") and names.index("run") == 0


@pytest.mark.parametrize("command", sorted({*cli.COMMAND_ORDER} - {"reference"}))
def test_help_shows_plain_metavars(command):
    text = _help(command)
    assert "<bool>" not in text and "<path>" not in text and "<str>" not in text
    assert not re.search(r"\{[a-z_]+\}", text), "an argument shown in braces"
    assert "--no-" not in text  # one flag style: a flag alone turns it on


def test_run_directory_and_audit_input_are_named_for_what_to_type():
    assert re.search(r"publish \[OPTIONS\] DIR\b", _help("publish"))
    text = _help("audit")
    assert re.search(r"audit \[OPTIONS\] FILE\|FOLDER", text)


def test_audit_input_is_a_path():
    param = next(p for p in _audit_params() if p.name == "file")
    assert param.type_descriptor.is_path


def test_stages_listed_in_the_declared_order():
    text = " ".join(_help("audit").split())
    assert ",".join(AUDIT_STAGES) in text
    default = next(p for p in _audit_params() if p.name == "stages").default
    chosen = default.split(",")
    assert chosen == [s for s in AUDIT_STAGES if s in chosen]


def _audit_params():
    import typer

    return typer.main.get_command(cli.app).commands["audit"].params


def test_single_flags_parse(tmp_path, monkeypatch):
    """--private and --dry-run alone turn the flags on; the run directory is checked first, so the command fails
    before any upload on a folder that is not a run."""
    res = CliRunner().invoke(cli.app, ["publish", str(tmp_path / "nope"), "--private", "--dry-run"])
    assert "No such option" not in res.output
    res = CliRunner().invoke(cli.app, ["publish", str(tmp_path / "nope"), "--no-private"])
    assert res.exit_code != 0 and "No such option" in res.output


def _all_commands() -> list[tuple[str, ...]]:
    import typer

    group = typer.main.get_command(cli.app)
    out = []
    for name, cmd in group.commands.items():
        subs = getattr(cmd, "commands", None)
        out += [(name, sub) for sub in subs] if subs else [(name,)]
    return sorted(out)


@pytest.mark.parametrize("command", _all_commands(), ids=" ".join)
def test_arguments_are_spelled_like_dir(command):
    usage = next(ln for ln in _help(*command).splitlines() if "Usage:" in ln)
    args = usage.split("[OPTIONS]", 1)[1].split()
    assert all(a.strip("[].") == a.strip("[].").upper() for a in args), usage


def test_no_option_help_is_cut_short():
    text = " ".join(_help("catalog").split())
    assert "how many entries torch's own tests cover (OpInfo, ModuleInfo, either)" in text

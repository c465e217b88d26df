"""Configurations whose model code differs between two sides, and compare's note about them."""

from __future__ import annotations

from torchgauge.cli import main
from torchgauge.compare.code_changes import CODE_CHANGE_MODELS_SHOWN, code_change_note, model_code_changes
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord


def _run(model: str, code: str | None, mode: str = "eval") -> RunRecord:
    samples = [1.0 + 0.001 * i for i in range(10)]
    return RunRecord(RunConfig(model, mode=mode), "ok", metrics={"time_ms": {"samples": samples}}, model_code_hash=code)


def test_only_configurations_with_two_different_known_hashes_are_listed() -> None:
    base = [_run("a", "1"), _run("b", "1"), _run("c", None), _run("d", "1"), _run("e", "1", mode="train")]
    new = [_run("a", "1"), _run("b", "2"), _run("c", "2"), _run("e", "2", mode="train"), _run("f", "9")]
    assert [c.label() for c in model_code_changes(base, new)] == ["b/eval/cpu/fp32/eager", "e/train/cpu/fp32/eager"]
    assert model_code_changes(new, new) == []


def test_repeated_runs_count_as_changed_when_their_hashes_differ() -> None:
    assert model_code_changes([_run("a", "1"), _run("a", "1")], [_run("a", "1"), _run("a", "2")]) != []
    assert model_code_changes([_run("a", "1"), _run("a", "1")], [_run("a", "1")]) == []


def test_note_names_each_model_once_and_says_what_it_means() -> None:
    assert code_change_note([]) is None
    configs = [RunConfig("b", mode="eval"), RunConfig("b", mode="train"), RunConfig("e", mode="eval")]
    assert code_change_note(configs) == (
        "model code changed: b, e — a difference there may be the model edit, not the stack"
    )
    many = [RunConfig(f"m{i}", mode="eval") for i in range(CODE_CHANGE_MODELS_SHOWN + 2)]
    assert "m9 and 2 more —" in code_change_note(many)


def test_compare_prints_the_note(tmp_path, capsys) -> None:
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    ResultsFile(env={}, runs=[_run("a", "1"), _run("b", "1")]).write(base)
    ResultsFile(env={}, runs=[_run("a", "1"), _run("b", "2")]).write(new)
    assert main(["compare", str(base), str(new)]) == 0
    note = "model code changed: b — a difference there may be the model edit, not the stack"
    assert note in capsys.readouterr().err
    ResultsFile(env={}, runs=[_run("a", "1"), _run("b", "1")]).write(new)
    main(["compare", str(base), str(new)])
    assert "model code changed" not in capsys.readouterr().err

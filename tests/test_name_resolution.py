"""Model names resolve case-insensitively when unambiguous; an exact match wins (issue 23)."""

from __future__ import annotations

import dataclasses

import pytest

from torchgauge import registry
from torchgauge.registry import UnknownModelError, get_spec, resolve_name
from torchgauge.suite import SelectionError, select_models


def test_case_insensitive_name_resolves_to_the_registered_one() -> None:
    assert resolve_name("hf_bert") == "hf_Bert"
    assert resolve_name("HF_BERT_LARGE") == "hf_Bert_large"
    assert get_spec("RESNET50").name == "resnet50"


def test_exact_match_wins_over_case_folding(monkeypatch) -> None:
    spec = get_spec("resnet18")
    monkeypatch.setitem(registry.entries.specs, "ResNet18", dataclasses.replace(spec, name="ResNet18"))
    assert resolve_name("resnet18") == "resnet18"
    assert resolve_name("ResNet18") == "ResNet18"


def test_ambiguous_name_lists_the_candidates(monkeypatch) -> None:
    spec = get_spec("resnet18")
    monkeypatch.setitem(registry.entries.specs, "ResNet18", dataclasses.replace(spec, name="ResNet18"))
    with pytest.raises(
        UnknownModelError,
        match=r"'RESNET18' is ambiguous: it matches resnet18, ResNet18 case-insensitively; give the exact name",
    ):
        resolve_name("RESNET18")
    with pytest.raises(SelectionError, match="ambiguous"):
        select_models(["RESNET18"])


def test_unknown_name_suggests_close_names_whatever_the_case() -> None:
    with pytest.raises(UnknownModelError, match="did you mean: hf_Bert"):
        resolve_name("HF_BERTT")


def test_selection_folds_case_for_names_and_wildcards() -> None:
    assert select_models(["hf_bert"]) == ["hf_Bert"]
    assert "resnet50" in select_models(["RESNET5*"])
    # A wildcard with exact hits is not folded: "hf_B*" keeps to the capitalised names.
    assert "hf_Bert" in select_models(["hf_b*"])
    assert "hf_Bert" not in select_models(["hf_Bl*"])


def test_create_uses_the_registered_name() -> None:
    from torchgauge.registry import create

    workload = create("RESNET18", mode="eval", size="smoke")
    assert workload.name == "resnet18"

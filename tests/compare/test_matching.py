"""One pairing for every comparison: config_key/config_label and match_groups/match_runs."""

from __future__ import annotations

import pytest

from torchgauge.compare.matching import (
    CompareError,
    config_key,
    config_label,
    group_config,
    match_groups,
    match_runs,
    representative,
)
from torchgauge.config import RunOptions
from torchgauge.results.schema import RunConfig, RunRecord


def _rec(
    model: str,
    status: str = "ok",
    *,
    mode: str = "eval",
    device: str = "cpu",
    backend: str = "eager",
    bs: int | None = None,
    actual: int | None = 2,
    error: str | None = None,
) -> RunRecord:
    return RunRecord(
        RunConfig(model, mode=mode, device=device, backend=backend, batch_size=bs),
        status,
        error=error,
        batch_size=actual,
    )


def test_config_key_drops_the_compared_axes() -> None:
    rec = _rec("m", device="cuda", backend="inductor", bs=8)
    assert config_key(rec) == rec.config.key() == ("m", "eval", "cuda", "fp32", "inductor", 8)
    assert config_key(rec, without="backend") == ("m", "eval", "cuda", "fp32", 8)
    assert config_key(rec, without="device") == ("m", "eval", "fp32", "inductor", 8)
    assert config_key(rec.config, without=("device", "backend")) == ("m", "eval", "fp32", 8)
    assert config_label(rec) == "m/eval/cuda/fp32/inductor/bs=8"
    assert config_label(_rec("m"), without="backend") == "m/eval/cpu/fp32/bs=default"
    with pytest.raises(ValueError, match="invalid axis 'size'; accepted: model, mode, device, precision, backend"):
        config_key(rec, without="size")


def test_match_groups_pairs_every_run_of_a_configuration() -> None:
    base = [_rec("a"), _rec("a"), _rec("b"), _rec("gone"), _rec("flaky"), _rec("flaky", "error", error="E\nboom")]
    new = [_rec("a"), _rec("b"), _rec("b"), _rec("b"), _rec("fresh"), _rec("flaky")]
    groups = match_groups(base, new)
    assert [(g.key[0], len(g.base), len(g.new)) for g in groups] == [
        ("a", 2, 1),
        ("b", 1, 3),
        ("gone", 1, 0),
        ("flaky", 2, 1),
        ("fresh", 0, 1),
    ]
    by_model = {g.key[0]: g for g in groups}
    assert by_model["a"].unmatched is None and by_model["b"].unmatched is None
    assert (by_model["gone"].unmatched.reason, by_model["gone"].unmatched.side) == ("missing", "new")
    assert (by_model["fresh"].unmatched.reason, by_model["fresh"].unmatched.side) == ("missing", "base")
    # a group speaks through its first failing run: one failed round fails the configuration
    flaky = by_model["flaky"]
    assert flaky.base_run.status == "error" and flaky.unmatched.reason == "failed"
    assert flaky.unmatched.detail == "failed in base: error (boom)" and flaky.unmatched.side == "base"


def test_match_groups_reasons_follow_the_single_run_pairing() -> None:
    base = [_rec("u", "unsupported"), _rec("bs", actual=2), _rec("m", bs=4)]
    new = [_rec("u", "skipped"), _rec("bs", actual=4), _rec("m", bs=8)]
    single = match_runs(base, new, key=config_key, label=config_label)
    grouped = [g.unmatched for g in match_groups(base, new)]
    assert single.pairs == [] and single.unmatched == grouped
    assert [(u.model, u.reason) for u in grouped] == [
        ("u", "unsupported"),
        ("bs", "batch_mismatch"),
        ("m", "missing"),
        ("m", "missing"),
    ]
    assert grouped[2].detail == "missing in new (it has m/eval/cpu/fp32/eager/bs=8)"


def test_match_runs_refuses_two_runs_of_one_key_and_keeps_order() -> None:
    with pytest.raises(CompareError, match="base has more than one run of a/eval/cpu/fp32/eager/bs=default"):
        match_runs([_rec("a"), _rec("a")], [_rec("a")], key=config_key, label=config_label)
    m = match_runs([_rec("b"), _rec("a")], [_rec("a"), _rec("b")], key=config_key, label=config_label)
    assert [k[0] for k, _, _ in m.pairs] == ["b", "a"]
    assert representative([_rec("x"), _rec("x", "timeout")]).status == "timeout"


def test_group_config_is_the_round_that_requested_every_metric() -> None:
    """Later rounds request fewer metrics (plan's later_round); the group speaks as the first round
    wherever its record sits, so that --confirm reruns what was asked for."""
    first = RunConfig("m", metrics=("time", "memory", "op_counts"), options=RunOptions(accuracy=True))
    later = RunConfig("m", metrics=("time", "memory"))
    records = [RunRecord(later, "ok"), RunRecord(first, "ok"), RunRecord(later, "ok")]
    assert group_config(records) == first
    assert group_config(records[:1]) == later
    # records of separate runs that asked for different metrics: the union, on the first record's config
    other = RunConfig("m", metrics=("time", "leak"))
    assert group_config([RunRecord(later, "ok"), RunRecord(other, "ok")]) == later.with_(
        metrics=("time", "memory", "leak")
    )

"""RunConfig, its typed options and plan(): selections, modes, vary grids, rounds and --batch-size auto."""

from __future__ import annotations

import pickle

import pytest

from torchgauge.config import (
    Adaptive,
    ConfigError,
    RunConfig,
    RunOptions,
    backend_options,
    check_names,
    plan,
)
from torchgauge.results.schema import ResultsFile, RunRecord, SchemaError
from torchgauge.stats.batch_doubling import BatchPoint, choose_batch_size
from torchgauge.suite import Selection
from torchgauge.workflows.tune_batch import BatchSearch, BatchSizeStore, device_name

BASE = RunConfig(model="", size="smoke", repeat=2, warmup=1)


def test_options_serialise_as_the_results_files_always_held_them() -> None:
    opts = RunOptions(
        channels_last=True,
        compile_mode="max-autotune",
        dynamic=False,
        compile_scope="step",
        accuracy=True,
        leak_iterations=20,
        adaptive=Adaptive(0.05, 40),
        stable_warmup=0.1,
    )
    doc = opts.to_dict()
    assert doc == {
        "channels_last": True,
        "compile_mode": "max-autotune",
        "dynamic": False,
        "compile_scope": "step",
        "accuracy": True,
        "leak_iterations": 20,
        "adaptive": {"target": 0.05, "max_repeat": 40},
        "stable_warmup": 0.1,
    }
    assert list(doc) == [
        "channels_last",
        "compile_mode",
        "dynamic",
        "compile_scope",
        "accuracy",
        "leak_iterations",
        "adaptive",
        "stable_warmup",
    ]
    assert RunOptions.from_dict(doc) == opts and RunOptions().to_dict() == {}


def test_a_record_round_trips_its_options_and_keeps_unknown_keys() -> None:
    config = RunConfig("m", options={"channels_last": True, "from_a_newer_torchgauge": [1, 2]})
    assert config.options.channels_last is True
    assert config.options.unknown == (("from_a_newer_torchgauge", [1, 2]),)
    back = RunRecord.from_dict(RunRecord(config, "ok").to_dict()).config
    assert back == config and back.options.to_dict() == {"channels_last": True, "from_a_newer_torchgauge": [1, 2]}
    assert pickle.loads(pickle.dumps(config)) == config


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"compile_mode": "fast"}, "invalid compile_mode 'fast'; accepted: default, reduce-overhead, max-autotune"),
        ({"compile_scope": "graph"}, "invalid compile_scope 'graph'; accepted: forward, step"),
        ({"dynamic": "yes"}, "invalid dynamic 'yes'; accepted: true, false or unset"),
        ({"channels_last": 1}, "invalid channels_last 1; accepted: true or false"),
        ({"leak_iterations": 2}, "invalid leak_iterations 2; accepted: an integer >= "),
        ({"instruction_steps": 0}, "invalid instruction_steps 0; accepted: an integer >= 1"),
        ({"adaptive": {"target": 2, "max_repeat": 10}}, "adaptive target 2; accepted: a fraction between 0 and 1"),
        ({"stable_warmup": 1.5}, "invalid stable_warmup 1.5; accepted: a fraction between 0 and 1"),
        ({"stable_warmup": True}, "invalid stable_warmup True; accepted: a fraction between 0 and 1"),
        ({"colour": "red"}, "unknown run option 'colour'; accepted: accuracy, adaptive, channels_last"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as info:
        RunOptions.from_dict(doc)
    assert "\n" not in str(info.value) and info.value.option in str(info.value)


def test_a_stored_record_with_a_bad_option_is_a_schema_error() -> None:
    doc = RunRecord(RunConfig("m"), "ok").to_dict()
    doc["options"] = {"compile_mode": "fast"}
    with pytest.raises(SchemaError, match="runs\\[0\\]: invalid compile_mode 'fast'"):
        ResultsFile.from_dict({"schema_version": 1, "runs": [doc]})


def test_backend_options_follow_what_the_backend_reads() -> None:
    assert backend_options("inductor", compile_mode="max-autotune").to_dict() == {
        "compile_mode": "max-autotune",
        "compile_scope": "forward",
    }
    assert backend_options("eager", accuracy=True).to_dict() == {"accuracy": True}  # no compile_scope off dynamo
    with pytest.raises(ConfigError, match="does not apply to backend torchscript") as info:
        backend_options("torchscript", dynamic=True)
    assert info.value.option == "dynamic"
    with pytest.raises(ConfigError, match="does not apply to backend eager"):
        backend_options("eager", compile_scope="step")
    with pytest.raises(ConfigError, match="0: backend inductor compiles during warm-up; accepted: >= 1"):
        backend_options("inductor", warmup=0)
    with pytest.raises(ConfigError, match="invalid precision 'fp8'; accepted: fp32, tf32"):
        check_names("fp8", "eager")


def test_plan_is_models_then_modes_with_the_base_settings() -> None:
    configs = plan(["a", "b"], BASE.with_(model="ignored", mode="eval", options=RunOptions(accuracy=True)))
    assert [(c.model, c.mode) for c in configs] == [("a", "train"), ("a", "eval"), ("b", "train"), ("b", "eval")]
    assert all(c.size == "smoke" and c.repeat == 2 and c.options.accuracy for c in configs)
    assert [c.mode for c in plan(["a"], BASE, modes=("eval", "train"))] == ["eval", "train"]
    assert plan(["a"]) == [RunConfig("a", mode="train"), RunConfig("a", mode="eval")]
    assert plan("a", BASE, modes=("eval",), size="full", seed=7) == [
        BASE.with_(model="a", mode="eval", seed=7, size="full")
    ]


def test_plan_selects_by_pattern_exclude_and_shard() -> None:
    names = Selection(("resnet*",)).models()
    assert "resnet18" in names and "resnet50" in names
    kept = Selection(("resnet*",), exclude=("resnet5*",)).models()
    assert "resnet18" in kept and not any(n.startswith("resnet5") for n in kept)
    halves = [Selection(("resnet*",), shard=(i, 2)).models() for i in (1, 2)]
    assert sorted(halves[0] + halves[1]) == sorted(names) and not set(halves[0]) & set(halves[1])
    configs = plan(Selection(("resnet18",)), BASE, modes=("eval",))
    assert [(c.model, c.mode) for c in configs] == [("resnet18", "eval")]


def test_vary_grids_are_innermost_and_split_run_fields_from_model_arguments() -> None:
    configs = plan(
        ["dlrm"],
        BASE.with_(model_kwargs={"num_tables": 4}),
        modes=("train",),
        vary={"embedding_dim": (8, 16), "batch_size": (2, 4)},
    )
    assert [(c.model_kwargs["embedding_dim"], c.batch_size) for c in configs] == [(8, 2), (8, 4), (16, 2), (16, 4)]
    assert all(c.model_kwargs["num_tables"] == 4 for c in configs)


def test_vary_interleaves_backends_with_their_own_options() -> None:
    candidate = RunOptions(accuracy=True, compile_scope="step")
    configs = plan(
        ["a", "b"],
        BASE,
        modes=("eval",),
        vary={("backend", "options"): [("eager", RunOptions()), ("inductor", candidate)]},
    )
    assert [(c.model, c.backend, c.options.accuracy) for c in configs] == [
        ("a", "eager", False),
        ("a", "inductor", True),
        ("b", "eager", False),
        ("b", "inductor", True),
    ]


def test_rounds_repeat_the_whole_plan_round_major() -> None:
    configs = plan(["a", "b"], BASE, modes=("eval",), rounds=2)
    assert [c.model for c in configs] == ["a", "b", "a", "b"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(modes=("infer",)), "invalid mode 'infer'; accepted: train, eval"),
        (dict(modes=()), "no mode given; accepted: train, eval"),
        (dict(size="tiny"), "invalid size 'tiny'; accepted: full, smoke"),
        (dict(repeat=0), "invalid repeat 0; accepted: an integer >= 1"),
        (dict(warmup=-1), "invalid warmup -1; accepted: an integer >= 0"),
        (dict(mode="eval"), "mode is planned from the models, modes and batch_size arguments"),
        (dict(rounds=0), "invalid rounds 0; accepted: an integer >= 1"),
        (dict(batch_size=0), "invalid batch size 0; accepted: an integer >= 1 or 'auto'"),
        (dict(vary={"width": ()}), "vary width has no values"),
        (dict(vary={"mode": ("eval",)}), "mode is planned from the selection and modes"),
        (dict(vary={"batch_size": (1,)}, batch_size="auto"), "batch size 'auto' and a batch_size axis"),
        (
            dict(base=BASE.with_(repeat=50, options=RunOptions(adaptive=Adaptive(0.1, 20)))),
            "adaptive repeats 50..20; accepted: repeat <= max_repeat",
        ),
        (
            dict(base=BASE.with_(warmup=1, options=RunOptions(stable_warmup=0.1))),
            "warmup 1 is the most warm-up steps with stable_warmup; accepted: warmup >= 2",
        ),
    ],
)
def test_bad_plans_are_one_line_errors(kwargs: dict, message: str) -> None:
    kwargs.setdefault("base", BASE)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        plan(["a"], **kwargs)


def test_batch_size_auto_takes_tuned_eval_sizes_from_the_store(tmp_path) -> None:
    points = [BatchPoint(1, "ok", 1.0), BatchPoint(2, "ok", 1.0), BatchPoint(4, "oom")]
    store = BatchSizeStore(tmp_path / "store.json")
    store.put(
        BatchSearch(
            model="tuned",
            device="cpu",
            device_name=device_name("cpu"),
            size="smoke",
            default_batch_size=8,
            points=points,
            stop="oom",
            choice=choose_batch_size(points),
        )
    )
    store.save()
    notes: list[str] = []
    configs = plan(["tuned", "untuned"], BASE, batch_size="auto", batch_store=store.path, on_note=notes.append)
    assert [(c.model, c.mode, c.batch_size) for c in configs] == [
        ("tuned", "train", None),
        ("tuned", "eval", 2),
        ("untuned", "train", None),
        ("untuned", "eval", None),
    ]
    assert len(notes) == 1 and "for untuned; using the default" in notes[0]
    assert all(c.batch_size == 3 for c in plan(["tuned"], BASE, batch_size=3))

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


NIGHTLY_METRICS = ("time", "memory", "tensor_memory", "op_counts", "flops")


def test_one_round_plans_every_metric_and_check_as_asked() -> None:
    base = BASE.with_(metrics=(*NIGHTLY_METRICS, "leak"), options=RunOptions(accuracy=True))
    configs = plan(["a", "b"], base, modes=("train", "eval"))
    assert configs == [base.with_(model=m, mode=mode) for m in ("a", "b") for mode in ("train", "eval")]
    assert plan(["a"], base, modes=("eval",), rounds=1) == plan(["a"], base, modes=("eval",))


def test_later_rounds_drop_what_is_the_same_in_every_process() -> None:
    """The nightly's metrics over 3 rounds: the first round collects all of them and checks
    accuracy; rounds 2 and 3 re-measure only what varies between processes (the leak test is a
    noisy flag, tflops is only shown beside the FLOP count), in the same interleaved order."""
    base = BASE.with_(metrics=(*NIGHTLY_METRICS, "leak"), options=RunOptions(accuracy=True, channels_last=True))
    configs = plan(["a", "b"], base, modes=("train", "eval"), rounds=3)
    assert len(configs) == 12
    labels = [(c.model, c.mode) for c in configs]
    assert labels == [(m, mode) for _ in range(3) for m in ("a", "b") for mode in ("train", "eval")]
    first, later = configs[:4], configs[4:]
    assert {c.metrics for c in first} == {(*NIGHTLY_METRICS, "leak")}
    assert {c.options for c in first} == {RunOptions(accuracy=True, channels_last=True)}
    assert {c.metrics for c in later} == {("time", "memory", "leak")}
    assert {c.options for c in later} == {RunOptions(channels_last=True)}  # only the once-per-configuration check goes
    assert {c.key() for c in later} == {c.key() for c in first}  # still the same configurations: compare pairs them
    assert all(c.repeat == 2 and c.warmup == 1 and c.size == "smoke" for c in configs)


def test_explicit_metrics_with_rounds_are_each_collected_once_at_least() -> None:
    """Whatever a user asks for is measured in the first round; a configuration asked only for
    deterministic counts has nothing to repeat and runs once."""
    for metrics in (("op_counts",), ("flops", "tensor_memory"), ("instructions",)):
        configs = plan(["a"], BASE.with_(metrics=metrics), modes=("eval",), rounds=5)
        assert [c.metrics for c in configs] == [metrics]
    mixed = plan(["a"], BASE.with_(metrics=("op_counts", "time")), modes=("eval",), rounds=3)
    assert [c.metrics for c in mixed] == [("op_counts", "time"), ("time",), ("time",)]
    noisy = ("time", "memory", "leak", "breakdown", "coverage")  # no quantity, or not deterministic: every round
    assert {c.metrics for c in plan(["a"], BASE.with_(metrics=noisy), modes=("eval",), rounds=3)} == {noisy}


def test_later_rounds_read_the_registry_facts_not_metric_names(monkeypatch) -> None:
    """A metric added in a file is collected once exactly when every quantity compare judges is deterministic."""
    from torchgauge.harness import metrics as registry
    from torchgauge.harness.metrics import Quantity, collected_once, register_metric

    monkeypatch.setattr(registry, "_QUANTITIES", dict(registry._QUANTITIES))
    monkeypatch.setattr(registry, "_METRICS", dict(registry._METRICS))
    exact = Quantity("planted_exact", ("planted_exact", "n"), "n", deterministic=True, rule="exact")
    shown = Quantity("planted_rate", ("planted_exact", "rate"), "n/s", rule="none")
    noisy = Quantity("planted_noisy", ("planted_noisy", "n"), "n", rule="memory")
    register_metric("planted_exact", "test", quantities=[exact, shown])(lambda w, c, m: {})
    count = Quantity("planted_count", ("planted_noisy", "count"), "n", deterministic=True, rule="exact")
    register_metric("planted_mixed", "test", quantities=[noisy, count])(lambda w, c, m: {})
    register_metric("planted_bare", "test")(lambda w, c, m: {})  # declares nothing: not known to be deterministic
    assert [collected_once(m) for m in ("planted_exact", "planted_mixed", "planted_bare")] == [True, False, False]
    configs = plan(["a"], BASE.with_(metrics=("time", "planted_exact", "planted_mixed", "planted_bare")), rounds=2)
    assert [c.metrics for c in configs if c.mode == "eval"] == [
        ("time", "planted_exact", "planted_mixed", "planted_bare"),
        ("time", "planted_mixed", "planted_bare"),
    ]


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


def test_plan_resolves_torchbench_precision_per_model_device_and_mode() -> None:
    # Planning is pure: CUDA configurations are planned (not run) without a GPU.
    def planned(models: list[str], device: str) -> dict[tuple[str, str], str]:
        return {(c.model, c.mode): c.precision for c in plan(models, BASE, device=device, precision="torchbench")}

    assert set(planned(["resnet50", "pytorch_unet", "hf_Bert", "yolov3", "dlrm"], "cpu").values()) == {"fp32"}
    assert planned(["resnet50", "pytorch_unet", "basic_gnn_gcn"], "cuda") == {
        ("resnet50", "train"): "fp32",  # TorchVisionModel declares an eval default only
        ("resnet50", "eval"): "fp16",
        ("pytorch_unet", "train"): "amp",  # its own DEFAULT_TRAIN_CUDA_PRECISION
        ("pytorch_unet", "eval"): "amp",
        ("basic_gnn_gcn", "train"): "fp32",  # BasicGNNModel is no GNNModel: no fp16 default
        ("basic_gnn_gcn", "eval"): "fp32",
    }
    assert planned(["yolov3"], "cuda:1") == {("yolov3", "train"): "fp32", ("yolov3", "eval"): "amp"}


def test_torchbench_precision_is_resolved_in_vary_grids_and_every_round() -> None:
    grid = {"precision": ("fp32", "torchbench")}
    configs = plan(["resnet50"], BASE, modes=("eval",), device="cuda", vary=grid, rounds=2)
    assert [c.precision for c in configs] == ["fp32", "fp16", "fp32", "fp16"]
    # the two configurations stay distinct runs with unchanged keys (compare/history pair on precision)
    assert len({c.key() for c in configs}) == 2


def test_torchbench_precision_needs_a_registered_model() -> None:
    from torchgauge.registry import UnknownModelError

    with pytest.raises(UnknownModelError, match="no_such_model"):
        plan(["no_such_model"], BASE, precision="torchbench")


def test_check_names_accepts_torchbench_and_lists_it() -> None:
    check_names("torchbench", "eager")
    with pytest.raises(ConfigError, match="'fp8'; accepted: fp32, tf32, fp16, bf16, amp, torchbench"):
        check_names("fp8", "eager")

"""Models that share a name with TorchBench are TorchBench's workload: the fidelity table holds.

``docs/torchbench-fidelity.json`` records, for every name torchgauge shares with
pytorch/benchmark (at the commit in its ``meta``), TorchBench's facts with the file and line
they come from, ours, and a verdict. These tests rebuild our side (modules on the meta device,
so no weights are allocated) and fail when it drifts from the table; a row whose verdict is
``match`` must also agree with TorchBench's side. ``docs/torchbench-fidelity.md`` is rendered
from the JSON and must be up to date.

Regenerate our side and the Markdown after a deliberate change::

    PYTHONPATH=src python tests/models/test_torchbench_fidelity.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import torchgauge
from torchgauge.registry import get_builder, get_spec
from torchgauge.workload import BuildContext

ROOT = Path(__file__).resolve().parents[2]
TABLE_JSON = ROOT / "docs" / "torchbench-fidelity.json"
TABLE_MD = ROOT / "docs" / "torchbench-fidelity.md"

# The bound on architecture drift: parameter counts within 0.5% of TorchBench's.
PARAM_RTOL = 0.005

# How a row's module is built to read its parameters and inputs: "meta" (no allocation),
# "cpu" (full size on CPU; the builder computes on weights, a few seconds at most) or "spec"
# (too slow to build in a fast test: the registry's param_count and batch sizes only; the
# full-size parameter count is checked by test_param_counts.py).
BUILD_MODES = ("meta", "cpu", "spec")


def load_table() -> dict[str, Any]:
    return json.loads(TABLE_JSON.read_text())


def tensor_signature(t: torch.Tensor) -> str:
    """``"float32[8,3,224,224]"``: dtype and shape of one input tensor."""
    return f"{str(t.dtype).removeprefix('torch.')}[{','.join(str(d) for d in t.shape)}]"


def _build(name: str, mode: str, device: str) -> Any:
    spec = get_spec(name)
    ctx = BuildContext(name=name, mode=mode, device=torch.device(device), batch_size=spec.batch_size(mode), size="full")
    builder = get_builder(name)  # imports the model's module where the registry only has its index entry
    if device == "meta":
        with torch.device("meta"):
            return builder(ctx)
    return builder(ctx)


# -- step facts: what the timed step does, where TorchBench's code fixes it --------------------
# A row may carry ``step_facts`` on both sides: TorchBench's read from its code (``step_facts_src``),
# ours measured by the reader below, built from the workload (settings) or observed while a smoke
# step runs (what runs inside the step). A row whose verdict is match must agree on every fact.


def _speech_transformer_facts() -> dict[str, Any]:
    eval_w = _build("speech_transformer", "eval", "meta")  # full size: the search settings
    smoke = torchgauge.create("speech_transformer", mode="eval", size="smoke")
    model, calls = smoke.module, []
    decode = model.decode
    model.decode = lambda ys, *args, **kw: calls.append(tuple(ys.shape)) or decode(ys, *args, **kw)
    (result,) = smoke.step()
    train_w = torchgauge.create("speech_transformer", mode="train", size="smoke")
    steps = []
    step = train_w.optimizer.step
    train_w.optimizer.step = lambda *a, **kw: steps.append(1) or step(*a, **kw)
    train_w.step()
    search, lengths = eval_w.search, [length for _, length in calls]
    whole_prefix = lengths == sorted(lengths) and sorted(set(lengths)) == list(range(1, result.steps + 1))
    return {
        "eval_utterances": len(eval_w.inputs),
        "beam_size": search.beam_size,
        "nbest": search.nbest,
        "decode_max_len": search.decode_max_len,
        # one live hypothesis per decoder call, each over all its ids so far (no cache): step i's
        # calls see i + 1 ids
        "decoder_batch": max(batch for batch, _ in calls),
        "decoder_input": "whole prefix" if whole_prefix else "other",
        "optimizer_steps_per_train_step": len(steps),
    }


def _vision_maskrcnn_facts() -> dict[str, Any]:
    full = _build("vision_maskrcnn", "eval", "meta")
    cfg, transform = full.module.cfg, full.module.transform.cfg
    smoke = torchgauge.create("vision_maskrcnn", mode="eval", size="smoke")
    seen = []
    handle = smoke.module.transform.register_forward_hook(lambda mod, args, out: seen.append(args[0][0].shape))
    (detection,) = smoke.step()
    handle.remove()
    train_w = torchgauge.create("vision_maskrcnn", mode="train", size="smoke")
    sgd = train_w.optimizer.defaults
    (images,) = smoke.inputs
    in_unit_range = [i.dim() == 3 and i.is_floating_point() and 0 <= i.min() <= i.max() <= 1 for i in images]
    raw = isinstance(images, list) and all(in_unit_range)
    return {
        "model_input": "list of raw float images in [0, 1]" if raw else "other",
        "transform_in_step": seen == [smoke.inputs[0][0].shape],
        "min_size": transform.min_size[-1],
        "max_size": transform.max_size,
        "size_divisible": transform.size_divisible,
        "image_mean": list(transform.image_mean),
        "image_std": list(transform.image_std),
        "rpn_pre_nms_top_n_test": cfg.rpn_pre_nms_topk[1],
        "rpn_post_nms_top_n_test": cfg.rpn_post_nms_topk[1],
        "rpn_nms_thresh": cfg.rpn_nms_thresh,
        "box_score_thresh": cfg.score_thresh,
        "box_nms_thresh": cfg.nms_thresh,
        "box_detections_per_img": cfg.detections_per_image,
        "masks_at_original_size": tuple(detection["masks"].shape[-2:]) == tuple(smoke.inputs[0][0].shape[-2:]),
        "optimizer": f"SGD(lr={sgd['lr']}, momentum={sgd['momentum']}, weight_decay={sgd['weight_decay']})",
    }


def _sam_fast_facts() -> dict[str, Any]:
    from torchgauge.models.nlp.hf import sam as sam_module

    asked = []
    create = sam_module._create_sam
    sam_module._create_sam = lambda ctx, *args, **kw: asked.append(args)
    try:  # the CUDA-only builder's request, without building (a device object needs no GPU)
        get_builder("sam_fast")(BuildContext("sam_fast", "eval", torch.device("cuda"), 32, "full"))
    finally:
        sam_module._create_sam = create
    ((dtype, attention, encoder_compile),) = asked
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "attention": attention,
        "image_encoder_compile_mode": encoder_compile["mode"],
    }


STEP_FACT_READERS = {
    "speech_transformer": _speech_transformer_facts,
    "vision_maskrcnn": _vision_maskrcnn_facts,
    "sam_fast": _sam_fast_facts,
}


def measure_ours(name: str, build: str, modes: tuple[str, ...] = ("train", "eval")) -> dict[str, Any]:
    """Our side of one row, read from the registry and (unless ``build == "spec"``) the workloads of ``modes``."""
    spec = get_spec(name)
    ours: dict[str, Any] = {
        "params": spec.param_count,
        "batch": [spec.batch_size("train"), spec.batch_size("eval")],
        "cpu_batch": [spec.batch_size("train", "cpu"), spec.batch_size("eval", "cpu")],
        "modes": list(spec.modes),
        # what --precision torchbench resolves to where it is not fp32 (the registry's declaration)
        "precision": {device: dict(modes) for device, modes in spec.torchbench_precision.items()},
    }
    if spec.samples_per_step is not None:  # a step processes a fixed count whatever the batch
        ours["samples_per_step"] = list(spec.samples_per_step)
    hf_spec = spec.extra.get("hf_spec")
    if hf_spec is not None:
        ours["seq_len"] = list(hf_spec.seq_len)
        ours["cpu_eval_seq_len"] = hf_spec.cpu_eval_seq_len or hf_spec.seq_len[1]
    if name in STEP_FACT_READERS:
        ours["step_facts"] = STEP_FACT_READERS[name]()
    if build == "spec":
        return ours
    for mode in (m for m in spec.modes if m in modes):
        workload = _build(name, mode, build)
        ours["params"] = sum(p.numel() for p in workload.module.parameters())
        leaves = pytree.tree_leaves(workload.inputs)
        ours[f"{mode}_inputs"] = [tensor_signature(t) for t in leaves if isinstance(t, torch.Tensor)]
    return ours


def mismatches_with_torchbench(tb: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """What keeps a row from matching TorchBench (empty when it matches)."""
    problems = []
    if tb.get("params") is not None and ours.get("params") is not None:
        if abs(ours["params"] - tb["params"]) > PARAM_RTOL * tb["params"]:
            problems.append(f"params {ours['params']:,} vs {tb['params']:,}")
    modes = tb.get("modes", ["train", "eval"])
    if not set(modes) <= set(ours["modes"]):  # a mode TorchBench lacks may be extra here, never one missing
        problems.append(f"modes {ours['modes']} vs {modes}")
    for i, mode in enumerate(("train", "eval")):
        if mode not in modes:
            continue
        if ours["batch"][i] != tb["batch"][i]:
            problems.append(f"{mode} batch {ours['batch'][i]} vs {tb['batch'][i]}")
        tb_cpu = tb.get("cpu_batch", tb["batch"])
        if "cpu" in tb.get("devices", ["cpu", "cuda"]) and ours["cpu_batch"][i] != tb_cpu[i]:
            problems.append(f"{mode} CPU batch {ours['cpu_batch'][i]} vs {tb_cpu[i]}")
        key = f"{mode}_inputs"
        if key in tb and key in ours and sorted(tb[key]) != sorted(ours[key]):
            problems.append(f"{mode} inputs {ours[key]} vs {tb[key]}")
    for key in ("seq_len", "cpu_eval_seq_len"):
        if key in tb and tb[key] != ours.get(key):
            problems.append(f"{key} {ours.get(key)} vs {tb[key]}")
    if tb.get("precision") != ours.get("precision"):  # run.py's default, per device and mode
        problems.append(f"torchbench precision {_precision(ours)} vs {_precision(tb)}")
    for fact, value in tb.get("step_facts", {}).items():
        if ours.get("step_facts", {}).get(fact) != value:
            problems.append(f"step fact {fact}: {ours.get('step_facts', {}).get(fact)!r} vs {value!r}")
    return problems


def _precision(side: dict[str, Any], key: str = "precision") -> str:
    """``"CUDA eval fp16, else fp32"``: a side's default precision per device and mode, fp32 unless named."""
    declared = side.get(key)
    if declared is None:
        return "not recorded"
    named = [f"{device.upper()} {mode} {p}" for device, modes in declared.items() for mode, p in modes.items()]
    return f"{', '.join(named)}, else fp32" if named else "fp32"


def _facts(side: dict[str, Any]) -> str:
    return "; ".join(f"{k} {v}" for k, v in side["step_facts"].items())


def render_markdown(table: dict[str, Any]) -> str:
    """``docs/torchbench-fidelity.md`` from the table."""
    meta, rows = table["meta"], table["models"]
    matched = sum(row["verdict"] == "match" for row in rows.values())
    out = [
        "# TorchBench fidelity",
        "",
        "<!-- Generated from torchbench-fidelity.json by "
        "`PYTHONPATH=src python tests/models/test_torchbench_fidelity.py --write`; do not edit. -->",
        "",
        f"Every model name torchgauge shares with pytorch/benchmark (TorchBench), compared with TorchBench at commit "
        f"`{meta['torchbench_commit']}` ({meta['torchbench_date']}). TorchBench's values cite the file and line "
        "they come from (paths under `torchbenchmark/`); ours are read back from the registry and from the "
        "workloads built on the meta device by `tests/models/test_torchbench_fidelity.py`, which fails when "
        "either side drifts from this table. Batches are `train / eval`; inputs are the tensors the timed step "
        "feeds at the default batch on a non-CPU device (TorchBench's A100-only metadata overrides aside).",
        "",
        f"**{matched} of {len(rows)} shared names match** (parameters within "
        f"{PARAM_RTOL:.1%}, batch sizes per mode and on CPU, modes, input shapes and dtypes); "
        + ("the others say how they differ. " if matched < len(rows) else "")
        + "Where TorchBench's code fixes what its step does (decoding settings, what runs inside the step, "
        "thresholds, dtype, compilation), those step facts are compared too.",
        "",
        "**Precision.** TorchBench's run.py runs each model in its default precision "
        "(`util/extra_args.py:86-101`): for eval on CUDA the model's or its framework factory's "
        "`DEFAULT_EVAL_CUDA_PRECISION`, for train on CUDA its `DEFAULT_TRAIN_CUDA_PRECISION`, else fp32; so "
        "`run.py resnet50 -d cuda -t eval` runs in fp16. torchgauge runs every model in fp32 unless told "
        'otherwise (comparable across models); `--precision torchbench` (`precision="torchbench"` in '
        "`torchgauge.run`) runs each model, device and mode in TorchBench's default instead, and every record "
        "stores the concrete precision. Each row cites which class the model's `__init__.py` subclasses and the "
        "declaration that applies; ours is the registration's `torchbench_precision`, which must equal it. "
        "TorchBench's fp16 (`enable_fp16`: module and float32 inputs cast, `util/model.py:470-473`) is our "
        "fp16; its amp (fp16 `torch.cuda.amp.autocast`, with a GradScaler where the model's own step has one) "
        "is our amp.",
        "",
        "| model | verdict | params TorchBench / ours | batch TorchBench / ours (CPU) "
        "| default precision TorchBench / ours |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        tb, ours = row["torchbench"], row["ours"]

        def batch(side: dict[str, Any], cpu_key: str = "cpu_batch") -> str:
            text = f"{side['batch'][0]} / {side['batch'][1]}"
            cpu = side.get(cpu_key)
            if cpu and cpu != side["batch"]:
                text += f" (CPU {cpu[0]} / {cpu[1]})"
            return text

        tb_params = f"{tb['params']:,}" if tb.get("params") is not None else "n/a"
        ours_params = f"{ours['params']:,}" if ours.get("params") is not None else "n/a"
        verdict = "match" if row["verdict"] == "match" else "**differs**"
        out.append(
            f"| [{name}](#{name.lower()}) | {verdict} | {tb_params} / {ours_params} | {batch(tb)} vs {batch(ours)} "
            f"| {_precision(tb)} / {_precision(ours)} |"
        )
    out += [
        "",
        "## Published architectures",
        "",
        "Models named after a torchvision, timm or Hugging Face architecture match its published parameter "
        f"count (within {PARAM_RTOL:.1%}). The torchvision and Hugging Face architectures among the shared names "
        "(alexnet ... vgg16, hf_*) are in the table above, where TorchBench's count is the library's. The others:",
        "",
        "| model | architecture | published | ours | source |",
        "|---|---|---|---|---|",
    ]
    for name, row in table.get("published", {}).items():
        out.append(f"| {name} | {row['architecture']} | {row['params']:,} | {row['ours_params']:,} | {row['source']} |")
    out += ["", "## Per model", ""]
    for name, row in rows.items():
        tb, ours = row["torchbench"], row["ours"]
        out += [f"### {name}", "", f"- **Verdict**: {row['verdict']}"]
        out.append(
            f"- **TorchBench** (`{tb['file']}`): modes {', '.join(tb.get('modes', ['train', 'eval']))}"
            f" on {', '.join(tb.get('devices', ['cpu', 'cuda']))}; batch {tb['batch'][0]} / {tb['batch'][1]}"
            f" (`{tb['batch_src']}`)"
            + (
                f", CPU {tb['cpu_batch'][0]} / {tb['cpu_batch'][1]} (`{tb['cpu_batch_src']}`)"
                if tb.get("cpu_batch")
                else ""
            )
        )
        if tb.get("params") is not None:
            out.append(f"  - parameters {tb['params']:,} ({tb['params_src']})")
        for mode in ("train", "eval"):
            if f"{mode}_inputs" in tb:
                out.append(f"  - {mode} inputs {', '.join(f'`{s}`' for s in tb[f'{mode}_inputs'])}")
        if "seq_len" in tb:
            out.append(
                f"  - sequence length {tb['seq_len'][0]} / {tb['seq_len'][1]}, eval on CPU "
                f"{tb.get('cpu_eval_seq_len', tb['seq_len'][1])} (`{tb['seq_src']}`)"
            )
        if tb.get("inputs_src"):
            out.append(f"  - inputs from `{tb['inputs_src']}`")
        out.append(f"  - step: {tb['step']}")
        if "precision" in tb:
            declared = f" (declared: {_precision(tb, 'precision_declared')})" if tb.get("precision_declared") else ""
            out.append(f"  - default precision {_precision(tb)}{declared}: {tb['precision_src']}")
        if tb.get("step_facts"):
            out.append(f"  - step facts ({tb['step_facts_src']}): {_facts(tb)}")
        ours_line = f"- **Ours**: modes {', '.join(ours['modes'])}; batch {ours['batch'][0]} / {ours['batch'][1]}" + (
            f", CPU {ours['cpu_batch'][0]} / {ours['cpu_batch'][1]}" if ours["cpu_batch"] != ours["batch"] else ""
        )
        if ours.get("params") is not None:
            ours_line += f"; parameters {ours['params']:,}"
        if ours.get("samples_per_step"):
            per_step = ", ".join(
                f"{mode} {n}" for mode, n in zip(("train", "eval"), ours["samples_per_step"]) if n is not None
            )
            ours_line += f"; samples a step processes, whatever the batch (throughput counts these): {per_step}"
        out.append(ours_line)
        for mode in ("train", "eval"):
            if f"{mode}_inputs" in ours:
                out.append(
                    f"  - {mode} inputs "
                    f"{', '.join(f'`{s}`' for s in ours[f'{mode}_inputs']) or '(none: environment steps)'}"
                )
        if "seq_len" in ours:
            out.append(
                f"  - sequence length {ours['seq_len'][0]} / {ours['seq_len'][1]}, "
                f"eval on CPU {ours['cpu_eval_seq_len']}"
            )
        if "precision" in ours:
            out.append(f"  - `--precision torchbench`: {_precision(ours)}")
        if ours.get("step_facts"):
            out.append(f"  - step facts: {_facts(ours)}")
        if row.get("data"):
            out.append(f"- **Data**: {row['data']}")
        if row.get("kept_as"):
            out.append(f"- **Kept under its own name**: {row['kept_as']}")
        out.append("")
    return "\n".join(out)


def _torchbench_modes(row: dict[str, Any]) -> tuple[str, ...]:
    # Only the modes TorchBench has are compared (and built); a mode extra here is listed, not built.
    return tuple(row["torchbench"].get("modes", ("train", "eval")))


TABLE = load_table() if TABLE_JSON.exists() else {"meta": {}, "models": {}}
ROWS = sorted(TABLE["models"])


def test_table_covers_every_shared_name() -> None:
    from torchgauge.registry import list_models

    shared = set(TABLE["meta"]["torchbench_models"]) & set(list_models())
    assert sorted(shared) == ROWS


@pytest.mark.parametrize("name", ROWS)
def test_our_side_is_as_recorded(name: str) -> None:
    row = TABLE["models"][name]
    assert row["build"] in BUILD_MODES
    if "hf" in get_spec(name).tags:
        pytest.importorskip("transformers")  # the optional extra these models are built with
    measured = measure_ours(name, row["build"], _torchbench_modes(row))
    recorded = {k: v for k, v in row["ours"].items() if k in measured}
    assert measured == recorded, f"{name} drifted from docs/torchbench-fidelity.json; regenerate it"


@pytest.mark.parametrize("name", ROWS)
def test_verdict_agrees_with_the_values(name: str) -> None:
    row = TABLE["models"][name]
    problems = mismatches_with_torchbench(row["torchbench"], row["ours"])
    if row["verdict"] == "match":
        assert not problems, f"{name} is marked match but differs: {problems}"
    else:
        assert row["verdict"].startswith("differs: "), row["verdict"]


def test_a_step_fact_that_drifts_is_a_mismatch() -> None:
    row = TABLE["models"]["speech_transformer"]
    ours = {**row["ours"], "step_facts": {**row["ours"]["step_facts"], "beam_size": 1}}
    assert mismatches_with_torchbench(row["torchbench"], ours) == ["step fact beam_size: 1 vs 5"]
    del ours["step_facts"]
    assert len(mismatches_with_torchbench(row["torchbench"], ours)) == len(row["torchbench"]["step_facts"])


@pytest.mark.parametrize("name", ROWS)
def test_row_records_torchbench_default_precision_with_its_source(name: str) -> None:
    tb = TABLE["models"][name]["torchbench"]
    assert isinstance(tb.get("precision"), dict) and tb.get("precision_src"), f"{name}: no default precision"
    assert f"models/{name}/__init__.py:" in tb["precision_src"]  # the class the model subclasses
    for modes in tb["precision"].values():
        assert set(modes) <= set(tb.get("modes", ("train", "eval"))), f"{name}: a default for a mode it lacks"


def test_a_precision_declaration_that_drifts_is_a_mismatch() -> None:
    row = TABLE["models"]["resnet50"]
    assert row["torchbench"]["precision"] == {"cuda": {"eval": "fp16"}}
    ours = {**row["ours"], "precision": {}}  # a registration that dropped torchbench_precision
    assert mismatches_with_torchbench(row["torchbench"], ours) == [
        "torchbench precision fp32 vs CUDA eval fp16, else fp32"
    ]


def test_create_takes_the_cpu_batch_size_on_cpu() -> None:
    # demucs evaluates 8 clips by default and 1 on CPU (TorchBench divides its eval batch by 8 there)
    spec = get_spec("demucs")
    assert (spec.batch_size("eval"), spec.batch_size("eval", "cuda"), spec.batch_size("eval", "cpu")) == (8, 8, 1)
    import torchgauge

    assert torchgauge.create("demucs", mode="eval", device="cpu", size="smoke").batch_size == 1  # smoke caps at 2


PUBLISHED = sorted(TABLE.get("published", {}))


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_architecture_parameter_count(name: str) -> None:
    row = TABLE["published"][name]
    if "hf" in get_spec(name).tags:
        pytest.importorskip("transformers")
    ours = measure_published(name, row["build"])
    assert ours == row["ours_params"], f"{name} drifted from docs/torchbench-fidelity.json; regenerate it"
    assert abs(ours - row["params"]) <= PARAM_RTOL * row["params"], f"{name}: {ours:,} vs published {row['params']:,}"


def measure_published(name: str, build: str) -> int:
    """Parameters of the full-size model ``name`` built on ``build`` (see BUILD_MODES; "spec": the registry's)."""
    if build == "spec":
        return get_spec(name).param_count
    mode = get_spec(name).modes[0]
    return sum(p.numel() for p in _build(name, mode, build).module.parameters())


def test_markdown_is_rendered_from_the_table() -> None:
    assert TABLE_MD.read_text() == render_markdown(TABLE) + "\n"


def _write() -> None:
    table = load_table()
    for name, row in table["models"].items():
        row["ours"] = measure_ours(name, row["build"], _torchbench_modes(row))
    for name, row in table.get("published", {}).items():
        row["ours_params"] = measure_published(name, row["build"])
    TABLE_JSON.write_text(json.dumps(table, indent=1) + "\n")
    TABLE_MD.write_text(render_markdown(table) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: PYTHONPATH=src python tests/models/test_torchbench_fidelity.py --write")
    _write()

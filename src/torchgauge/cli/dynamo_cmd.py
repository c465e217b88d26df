"""``torchgauge dynamo``: PyTorch's dynamo benchmark harness flags, mapped onto ``torchgauge run``.

The harness (``benchmarks/dynamo/torchbench.py --performance --training --inductor --only
MODEL``) times eager and the compiled whole iteration in one process and writes its
performance CSV. The same measurement here is ``torchgauge run MODEL --backend inductor
--compile-scope step --csv FILE``: each configuration runs eager and compiled, interleaved,
in isolated workers. This command prints that command and runs it; flags it cannot map make
it stop with the equivalent of the rest printed.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import click

__all__ = ["dynamo_command", "equivalent_run_args"]

# The harness's precision flags -> --precision.
_PRECISIONS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "amp": "amp"}


def equivalent_run_args(
    *,
    performance: bool,
    accuracy: bool,
    training: bool,
    backend: str | None,
    only: str | None,
    device: str | None,
    batch_size: int | None,
    precision: str | None,
    output: str | None,
    repeat: int | None,
) -> list[str]:
    """The ``torchgauge run`` arguments that measure what the harness flags ask for.

    Raises:
        click.UsageError: a combination with no equivalent (the message names the flag).
    """
    if performance == accuracy:
        raise click.UsageError("give one of --performance or --accuracy, as the dynamo harness needs")
    if not only:
        raise click.UsageError("give --only MODEL (the torchgauge command takes model names or wildcards instead)")
    args = [only, "--mode", "train" if training else "eval"]
    if device:
        args += ["--device", device]
    if batch_size:
        args += ["--batch-size", str(batch_size)]
    args += ["--precision", _PRECISIONS.get(precision or "float32", "fp32")]
    args += ["--backend", backend or "inductor"]
    if _takes_compile_scope(backend or "inductor"):  # the harness compiles its whole model_iter_fn
        args += ["--compile-scope", "step"]
    if repeat:
        args += ["--repeat", str(repeat)]
    if accuracy:
        if output:
            raise click.UsageError(
                "torchgauge writes no accuracy CSV; the check itself is: torchgauge run "
                + shlex.join(args + ["--accuracy"])
            )
        return args + ["--accuracy"]
    if output:
        args += ["--csv", output]
    return args


def _takes_compile_scope(backend: str) -> bool:
    from ..backends import get_backend

    try:
        return "compile_scope" in get_backend(backend).accepts
    except ValueError:  # unknown: run reports it with the accepted names
        return False


@click.command("dynamo", context_settings={"ignore_unknown_options": True})
@click.option("--performance", is_flag=True, help="Time eager and compiled (speedup), as the harness's --performance.")
@click.option("--accuracy", is_flag=True, help="Check the compiled model against eager fp64 (run --accuracy).")
@click.option("--training/--inference", default=False, help="Train step or inference (the harness's default).")
@click.option("--inductor", "backend", flag_value="inductor", help="Same as --backend inductor.")
@click.option("--backend", "backend", default=None, help="Compiler backend: inductor, aot_eager, cudagraphs, ...")
@click.option("--only", default=None, help="The model to run.")
@click.option("--devices", "--device", "-d", "device", default=None, help="cpu or cuda.")
@click.option("--batch-size", "--bs", type=int, default=None, help="Batch size.")
@click.option("--float32", "precision", flag_value="float32", help="fp32 (the default).")
@click.option("--float16", "precision", flag_value="float16", help="fp16.")
@click.option("--bfloat16", "precision", flag_value="bfloat16", help="bf16.")
@click.option("--amp", "precision", flag_value="amp", help="Automatic mixed precision.")
@click.option("--output", default=None, help="Performance CSV to write (run --csv).")
@click.option("--repeat", "-n", type=int, default=None, help="Timed iterations.")
@click.option("--dry-run", is_flag=True, help="Print the equivalent torchgauge command without running it.")
@click.argument("unmapped", nargs=-1, type=click.UNPROCESSED)
def dynamo_command(unmapped: Sequence[str], dry_run: bool, **flags: object) -> None:
    """Accept the dynamo harness's flags (e.g. --performance --training --inductor --only hf_Bert)
    and run the equivalent `torchgauge run`, printing it first."""
    from .run_cmd import run_command
    from .terminal import Terminal

    args = equivalent_run_args(**flags)
    command = "torchgauge run " + shlex.join(args)
    if unmapped:
        raise click.UsageError(
            f"no torchgauge equivalent for {' '.join(unmapped)}; without it the command is: {command}"
        )
    term = Terminal()
    # One unwrapped, unstyled line: it is meant to be copied (patterns may hold [brackets]).
    term.err.print(f"equivalent: {command}", soft_wrap=True, markup=False, highlight=False)
    if dry_run:
        return
    run_command.main(args=args, prog_name="torchgauge run", standalone_mode=False)

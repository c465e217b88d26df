"""``torchgauge list``: registered models with their metadata."""

from __future__ import annotations

import click

from ..registry import DOMAINS
from .params import model_file_option


@click.command("list")
@click.argument("patterns", nargs=-1)
@click.option("--domain", type=click.Choice(DOMAINS), multiple=True, help="Only models of this domain (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Only models carrying this tag (repeatable; all must match).")
@model_file_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_command(
    *,
    patterns: tuple[str, ...],
    domain: tuple[str, ...],
    tags: tuple[str, ...],
    model_files: tuple[str, ...],
    as_json: bool,
) -> None:
    """List models matching PATTERNS (fnmatch wildcards, e.g. 'resnet*')."""
    from ..registry import get_spec, list_models, load_model_file
    from .terminal import Terminal

    term = Terminal()
    for path in model_files:
        load_model_file(path)
    names = list_models(list(patterns) or None, domain=list(domain) or None, tags=list(tags) or None)
    specs = [get_spec(n) for n in names]
    if as_json:
        term.json([s.as_dict() for s in specs])
        return
    rows = [
        [
            s.name,
            s.domain,
            s.task,
            s.train_batch_size,
            s.eval_batch_size,
            ",".join(s.modes),
            f"{s.param_count / 1e6:.1f}M" if s.param_count else None,
            ",".join(sorted(s.tags)),
        ]
        for s in specs
    ]
    term.table(
        ("model", "domain", "task", "train bs", "eval bs", "modes", "params", "tags"),
        rows,
        justify=("left", "left", "left", "right", "right", "left", "right", "left"),
    )
    term.info(f"{len(specs)} models in {len({s.domain for s in specs})} domains")

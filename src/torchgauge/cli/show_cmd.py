"""``torchgauge show``: the results table of a results file."""

from __future__ import annotations

import click


@click.command("show")
@click.argument("results_file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the (migrated) JSON document instead of a table.")
def show_command(*, results_file: str, as_json: bool) -> None:
    """Show the runs recorded in RESULTS_FILE."""
    from ..report.table import RESULT_COLUMNS, RESULT_JUSTIFY, result_rows
    from ..results.schema import SchemaError, load_results
    from .terminal import Terminal

    term = Terminal()
    try:
        results = load_results(results_file)
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        term.json(results.to_dict())
        return
    env = results.env
    term.info(
        f"torch {env.get('torch_version')} ({str(env.get('torch_git_version') or '')[:10]}) | "
        f"{env.get('cpu_model')} x{env.get('cpu_count')} | GPU {env.get('gpu_name') or 'none'} | {results.created_at}"
        + ("" if results.complete else " | INCOMPLETE: the run was interrupted")
    )
    term.table(RESULT_COLUMNS, result_rows(results.runs), justify=RESULT_JUSTIFY)

"""The ``torchgauge`` command line: a thin click layer over plain Python functions.

Commands are loaded lazily (``--help`` stays fast and torch is imported only by commands
that need it). One module per command; nothing imports ``torchgauge.cli``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

# command name -> "module:function" (relative to this package)
COMMANDS = {
    "list": "list_cmd:list_command",
    "run": "run_cmd:run_command",
    "show": "show_cmd:show_command",
    "breakdown": "breakdown_cmd:breakdown_command",
    "diagnose": "diagnose_cmd:diagnose_command",
    "tune-batch": "tune_batch_cmd:tune_batch_command",
    "compare-backends": "compare_backends_cmd:compare_backends_command",
    "compare-devices": "compare_devices_cmd:compare_devices_command",
    "compare": "compare_cmd:compare_command",
    "history": "history_cmd:history_command",
    "import": "import_cmd:import_command",
    "export": "export_cmd:export_command",
    "bisect": "bisect_cmd:bisect_command",
    "scale": "scale_cmd:scale_command",
    "coverage": "coverage_cmd:coverage_command",
    "report": "report_cmd:report_command",
    "dynamo": "dynamo_cmd:dynamo_command",
}


def _available(name: str) -> bool:
    module = COMMANDS[name].split(":")[0]
    return importlib.util.find_spec(f"{__name__}.{module}") is not None


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when invoked or listed in help."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if _available(name)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS or not _available(cmd_name):
            return None
        module, func = COMMANDS[cmd_name].split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), func)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="torchgauge")
def cli() -> None:
    """torchgauge: benchmark the PyTorch software stack on many representative models."""


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code."""
    try:
        return cli.main(args=argv, prog_name="torchgauge", standalone_mode=False) or 0
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted; finished runs were saved", err=True)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

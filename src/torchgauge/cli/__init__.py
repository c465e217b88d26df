"""The ``torchgauge`` command line: a thin click layer over plain Python functions.

Commands are loaded lazily (``--help`` stays fast and torch is imported only by commands
that need it). One module per command; nothing imports ``torchgauge.cli``.

Exit codes (README.md "Exit codes" documents them): 0 success; 1 a run failed, a
regression or new failure was found, or the command could not finish (one ``error:``
line names the file and the problem); 2 a usage error; 4 nothing was measured because
the requested device is missing; 70 an internal error (a bug: ``--debug`` or
``TORCHGAUGE_DEBUG=1`` shows the traceback); 128+N killed by signal N (130 Ctrl-C, 143
SIGTERM, 129 SIGHUP), after saving every finished run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Iterator

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


# Environment variable that, like --debug, shows tracebacks instead of one-line errors.
DEBUG_ENV_VAR = "TORCHGAUGE_DEBUG"
# Exit codes set here (click sets 2 for usage errors; suite.DEVICE_MISSING_EXIT_CODE is 4).
EXIT_FAILURE = 1
EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE
# Signals that stop a command the way Ctrl-C does: finished work is saved, workers killed.
INTERRUPT_SIGNALS = ("SIGTERM", "SIGHUP")


class Interrupted(KeyboardInterrupt):
    """SIGTERM/SIGHUP raised as a KeyboardInterrupt, so every cleanup path for Ctrl-C runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted` (main thread only)."""
    previous = {}
    try:
        for name in INTERRUPT_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None:
                previous[signum] = signal.signal(signum, _raise_interrupted)
    except ValueError:  # not the main thread (an embedding application): leave signals alone
        pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def interrupt_exit_code(exc: BaseException) -> int:
    """128 + the signal number for an Interrupted (or a KeyboardInterrupt: SIGINT)."""
    while exc is not None and not isinstance(exc, KeyboardInterrupt):
        exc = exc.__cause__ or exc.__context__
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


def _debug_requested(argv: list[str]) -> bool:
    if os.environ.get(DEBUG_ENV_VAR, "") not in ("", "0"):
        return True
    for arg in argv:  # the group's own options come before the command name
        if arg == "--debug":
            return True
        if not arg.startswith("-"):
            return False
    return False


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
@click.option("--debug", is_flag=True, help=f"Show tracebacks instead of one-line errors (or set {DEBUG_ENV_VAR}=1).")
def cli(debug: bool) -> None:
    """torchgauge: benchmark the PyTorch software stack on many representative models."""


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code (see the module docstring)."""
    from ..registry import ModelFileError
    from ..report.escape import terminal_text
    from ..results.schema import SchemaError
    from ..results.store import StoreError

    argv = sys.argv[1:] if argv is None else list(argv)
    debug = _debug_requested(argv)
    try:
        with _signals_interrupt():
            return cli.main(args=argv, prog_name="torchgauge", standalone_mode=False) or 0
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:  # click turns Ctrl-C into Abort
        code = interrupt_exit_code(exc)
        click.echo(f"aborted by {signal.Signals(code - 128).name}", err=True)
        return code
    except click.UsageError as exc:  # the user's own arguments
        exc.show()
        return exc.exit_code
    except click.ClickException as exc:  # may quote files and databases: no escape sequences
        click.echo(f"Error: {terminal_text(exc.format_message())}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (ModelFileError, SchemaError, StoreError, OSError) as exc:  # bad input: one line
        if debug:
            raise
        click.echo(f"error: {terminal_text(exc)}", err=True)
        return EXIT_FAILURE
    except Exception as exc:  # a bug: one line unless asked for the traceback
        if debug:
            raise
        first = terminal_text((str(exc).strip().splitlines() or [""])[0][:300])
        click.echo(
            f"error: internal error: {type(exc).__name__}: {first} "
            f"(rerun with --debug or {DEBUG_ENV_VAR}=1 for the traceback)",
            err=True,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

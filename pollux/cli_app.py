"""The project's typer applications, made alike: `pollux` and every sub-application (`data`, `workload`, `spec`).

- Errors: a `PolluxError` is one line and exit 2 (`pollux.console.OneLineErrors`), never typer's boxed traceback.
- Help: plain text (click's formatter, not rich's panels), which wraps to the terminal instead of cutting option
  names and defaults short (`--checkpoint-inter…`), shows no `<bool>` for a flag, and needs no rich at all: with
  the commands' heavy imports deferred, `pollux --help` starts in a fraction of a second.
- Usage lines name arguments as click does (`SPEC`, `[JOB]`), not as typer 0.29 does (`{spec}`).
- Each command ends its help with an example (`examples`).
- Option values of plain types (str, int, float, bool, Path) are converted without pydantic (`PlainValues`):
  typer 0.29 builds a pydantic TypeAdapter for every option, and importing pydantic alone costs `pollux ls` or
  `pollux submit` about 0.15 s, more than the rest of their start-up together.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from typer._coercion import RuntimeParam
from typer._param_types import coerce_cli_path
from typer.core import TyperArgument, TyperCommand, _TyperParameter

from pollux.console import OneLineErrors

# Help wraps at the terminal's width, up to this many columns (click's own limit is 80).
HELP_MAX_WIDTH = 120
_PLAIN_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}


class PlainValues(RuntimeParam):
    """Converts an option's value as pydantic would for these types (`"4"` → 4, `"nan"` → nan, `"x"` → Path("x"),
    then typer's own path checks), but without importing pydantic. A wrong value is click's usual error."""

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if self.annotation is Path:
            path = Path(value) if isinstance(value, str) else value
            return coerce_cli_path(path, self.parameter_info, path_type=Path, param=param, ctx=ctx)
        try:
            if self.annotation is bool and not isinstance(value, bool):  # flags give bools; no argument is a bool
                raise ValueError(value)
            return self.annotation(value)
        except ValueError:
            raise typer.BadParameter(
                f"{value!r} is not a valid {_PLAIN_TYPES[self.annotation]}", ctx=ctx, param=param
            ) from None


def _plain(params: list[Any]) -> list[Any]:
    """`params`, those of plain types given a `PlainValues` converter (typer builds its own on first use)."""
    for param in params:
        if not isinstance(param, _TyperParameter) or param._runtime_param is not None:
            continue
        descriptor = param.type_descriptor
        info = descriptor.parameter_info
        if descriptor.annotation in _PLAIN_TYPES and info.parser is None and info.min is None and info.max is None:
            param._runtime_param = PlainValues(info, descriptor.annotation)
    return params


class CliGroup(OneLineErrors):
    """A group (`pollux`, `pollux data`, ...): one-line errors, and plain values for its own options (`--help`)."""

    def get_params(self, ctx: Any) -> list[Any]:  # typer's own (vendored) click Context
        return _plain(super().get_params(ctx))


class CliCommand(TyperCommand):
    """A command whose arguments read `SPEC` (required) or `[JOB]` (optional) in its usage line and help, and whose
    options of plain types are converted without pydantic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument) and param.metavar is None and param.name:
                param.metavar = param.name.upper()

    def get_params(self, ctx: Any) -> list[Any]:  # typer's own (vendored) click Context
        return _plain(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # typer's own (vendored) click Context
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                piece = f"{param.metavar}{'...' if param.nargs != 1 else ''}"
                pieces.append(piece if param.required else f"[{piece}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class CliApp(typer.Typer):
    """A `typer.Typer` with the project's settings; its commands are `CliCommand`s unless told otherwise."""

    def __init__(self, *, help: str, cls: type[CliGroup] = CliGroup, **kwargs: Any) -> None:
        super().__init__(
            help=help,
            cls=cls,
            no_args_is_help=True,
            rich_markup_mode=None,
            pretty_exceptions_enable=False,
            add_completion=False,
            context_settings={"max_content_width": HELP_MAX_WIDTH},
            **kwargs,
        )

    def command(  # type: ignore[override]  # the same parameters, with a different default class
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return super().command(name, cls=cls or CliCommand, **kwargs)


def examples(*commands: str) -> str:
    """A command's epilog: `Example(s):` and each command line as typed, kept unwrapped (click's `\\b` marker)."""
    title = "Example:" if len(commands) == 1 else "Examples:"
    return "\n".join([title, "", "\b", *(f"  {command}" for command in commands)])

"""Consoles that print text as written. Job names, reasons, logs, paths and error messages may hold brackets (a log's
`[rank 0]`, gloo's `[/__w/…/pair.cc:537]`) or colons (`:thumbs_up:`) that rich would take for markup or emoji: it
drops the first silently and dies on a stray closing tag. Style comes from `Text` and `style=`, never from markup."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from pollux.errors import PolluxError

if TYPE_CHECKING:
    from rich.console import Console


def plain_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console without markup, emoji or highlighting: every string it prints appears literally. (rich is imported
    here, not atop the module: `pollux --help` prints no console output and starts faster without it.)"""
    from rich.console import Console

    return Console(stderr=stderr, width=width, markup=False, emoji=False, highlight=False)


def print_error(error: BaseException) -> None:
    """`error: <message>` on stderr, one line however long (a wrapped path would read as two)."""
    from rich.text import Text

    plain_console(stderr=True).print(Text.assemble(("error:", "red"), f" {error}"), soft_wrap=True)


class OneLineErrors(TyperGroup):
    """The command line's one error handler: a `PolluxError` (bad input or environment) from any command is printed
    as `error: <message>` and exits 2; anything else is a bug and keeps its traceback. Every `typer.Typer` of the
    project uses it (`cls=OneLineErrors`), so a sub-application run on its own behaves the same."""

    def invoke(self, ctx: Any) -> Any:  # typer's own (vendored) click Context
        try:
            return super().invoke(ctx)
        except PolluxError as error:
            print_error(error)
            raise typer.Exit(2) from None

"""Consoles that print text as written. Job names, reasons, logs, paths and error messages may hold brackets (a log's
`[rank 0]`, gloo's `[/__w/…/pair.cc:537]`) or colons (`:thumbs_up:`) that rich would take for markup or emoji: it
drops the first silently and dies on a stray closing tag. Style comes from `Text` and `style=`, never from markup."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def plain_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console without markup, emoji or highlighting: every string it prints appears literally."""
    return Console(stderr=stderr, width=width, markup=False, emoji=False, highlight=False)


def print_error(error: BaseException) -> None:
    """`error: <message>` on stderr, one line however long (a wrapped path would read as two)."""
    plain_console(stderr=True).print(Text.assemble(("error:", "red"), f" {error}"), soft_wrap=True)

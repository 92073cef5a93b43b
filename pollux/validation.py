"""Pydantic's validation errors in our one-line form: which field, what it accepts, what it got.

The job spec (`pollux.runtime.spec`) and the agent's report (`pollux.agent.report`) are pydantic models; this is the
one place where what pydantic found wrong is put into words (`first_problem`), which each document then prints in
its own sentence (`SpecError`, `ReportError`). A validator with a rule of its own raises `invalid` (a value outside
what the field accepts), `rule` (a cross-field rule, in its own words), `missing` or `unknown`, naming the field when
the rule belongs to the whole model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictInt, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

Kind = Literal["syntax", "missing", "unknown", "invalid", "rule"]

# What a field accepts, by pydantic's error type; the rest reads pydantic's own "Input should be ..." text.
_ACCEPTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "path_type": "a path string",
    "dict_type": "a mapping {name: value}",
    "dataclass_type": "an object {field: value}",
    "list_type": "a list",
    "tuple_type": "a list",
}


@dataclass(frozen=True)
class Problem:
    """The first thing wrong with a document. `field` is a dotted path ('batch.local_bsz', 'gpu_types[1]'), '' for
    the document itself; `text` is what the field accepts (kind "invalid"), the rule's own words (kind "rule") or
    the parser's complaint (kind "syntax": not valid JSON at all)."""

    kind: Kind
    field: str
    text: str = ""
    value: Any = None


def invalid(accepted: str, value: Any, field: str = "") -> PydanticCustomError:
    """A value outside what its field accepts; `field` names it when a model-wide rule raises this."""
    return PydanticCustomError("pollux_invalid", "{accepted}", {"accepted": accepted, "value": value, "field": field})


def rule(message: str, field: str = "") -> PydanticCustomError:
    """A rule between fields, in its own words (what is wrong and the fix), blamed on `field`."""
    return PydanticCustomError("pollux_rule", "{message}", {"message": message, "field": field})


def missing(field: str) -> PydanticCustomError:
    return PydanticCustomError("pollux_missing", "missing field {field}", {"field": field})


def unknown(field: str) -> PydanticCustomError:
    return PydanticCustomError("pollux_unknown", "unknown field {field}", {"field": field})


_KINDS: dict[str, Kind] = {
    "json_invalid": "syntax",
    "missing": "missing",
    "pollux_missing": "missing",
    "extra_forbidden": "unknown",
    "unexpected_keyword_argument": "unknown",
    "pollux_unknown": "unknown",
    "pollux_rule": "rule",
}
_ORDER: dict[Kind, int] = {"syntax": 0, "unknown": 1, "missing": 2, "invalid": 3, "rule": 3}


def first_problem(error: ValidationError) -> Problem:
    """The problem to report: an unknown field first, then a missing one, then the first bad value (a default that
    could not be computed because another field is bad is that field's problem, not one of its own)."""
    details = [d for d in error.errors(include_url=False) if d["type"] != "default_factory_not_called"]
    problems = [_problem(detail) for detail in details or error.errors(include_url=False)]
    return min(problems, key=lambda p: _ORDER[p.kind])


def _problem(detail: ErrorDetails) -> Problem:
    ctx = detail.get("ctx") or {}
    field = _path((*detail["loc"], *([ctx["field"]] if ctx.get("field") else [])))
    kind = _KINDS.get(detail["type"], "invalid")
    if kind in ("rule", "syntax"):
        return Problem(kind, field, str(ctx.get("message", ctx.get("error"))))
    if kind != "invalid":
        return Problem(kind, field)
    return Problem(kind, field, _accepted(detail), ctx.get("value", detail["input"]))


def _accepted(detail: ErrorDetails) -> str:
    ctx = detail.get("ctx") or {}
    kind = detail["type"]
    if kind == "pollux_invalid":
        return str(ctx["accepted"])
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx["ge"] if kind == "greater_than_equal" else ctx["gt"]
        noun = "a number" if isinstance(bound, float) else "an integer"
        return f"{noun} {'>=' if kind == 'greater_than_equal' else '>'} {bound}"
    if kind == "literal_error":
        return f"one of {ctx['expected']}"
    if kind == "too_short":
        return f"at least {ctx['min_length']} item(s)"
    return _ACCEPTED.get(kind) or detail["msg"].removeprefix("Input should be ")


def _path(loc: tuple[int | str, ...]) -> str:
    """('batch', 'local_bsz') -> 'batch.local_bsz'; list positions as [i]; a bad key is named by the key itself."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part != "[key]":
            text += f".{part}" if text else part
    return text


def _pair(value: Any) -> Any:
    if not (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 1 <= value[0] <= value[1]
    ):
        raise invalid("[min, max] integers with 1 <= min <= max", value)
    return value


Bounds = Annotated[tuple[Annotated[StrictInt, Field(ge=1)], Annotated[StrictInt, Field(ge=1)]], BeforeValidator(_pair)]
"""Per-GPU batch bounds [min, max]: the spec's `local_bsz_bounds` and the report's, one rule and one message."""

"""The Pollux policy's modules import in one direction: the policy (`pollux.policies.pollux`) imports the typed
search, the search state and the speedup tables; none of those imports the policy, so each reads on its own."""

import ast
from pathlib import Path

import pytest

import pollux.policies

POLICIES = Path(pollux.policies.__file__).parent


def imported_modules(name: str) -> set[str]:
    """Every module `pollux/policies/<name>.py` imports, at the top, under TYPE_CHECKING or inside a function."""
    tree = ast.parse((POLICIES / f"{name}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("name", ["typed_search", "search_state", "speedup"])
def test_the_pollux_policys_parts_do_not_import_the_policy(name):
    assert "pollux.policies.pollux" not in imported_modules(name)


def test_the_policy_imports_the_typed_search():
    assert "pollux.policies.typed_search" in imported_modules("pollux")

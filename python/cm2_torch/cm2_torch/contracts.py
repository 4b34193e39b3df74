"""The train queue's activity contracts (contracts.json, generated from the TypeScript zod shapes by
scripts/export-contracts.ts): what the worker validates its inputs and results against, and the failure types the
workflows do not retry."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

CONTRACTS_FILE = os.path.join(os.path.dirname(__file__), "contracts.json")


@lru_cache(maxsize=1)
def contracts() -> dict:
    with open(CONTRACTS_FILE) as f:
        return json.load(f)


def non_retryable_types() -> list[str]:
    return list(contracts()["nonRetryableErrorTypes"])


class ContractError(ValueError):
    """A value that does not match its contract; `type` is the failure type the workflows do not retry."""

    type = "BadInput"

    def __init__(self, activity: str, kind: str, problems: list[str]):
        super().__init__(f"{activity} {kind}: " + "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))
        self.problems = problems


@lru_cache(maxsize=None)
def _validator(activity: str, kind: str) -> Draft202012Validator:
    c = contracts()["activities"].get(activity)
    if c is None:
        raise KeyError(f"no contract for activity {activity!r}")
    return Draft202012Validator(c[kind])


def validate(activity: str, kind: str, value: Any) -> Any:
    """`value` if it matches the `input` or `result` contract of `activity`, else ContractError naming each field."""
    errors = sorted(_validator(activity, kind).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        raise ContractError(activity, kind, [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors])
    return value


@lru_cache(maxsize=None)
def _file_validator(name: str) -> Draft202012Validator:
    f = contracts()["files"].get(name)
    if f is None:
        raise KeyError(f"no contract for file {name!r}")
    return Draft202012Validator(f)


def validate_file(name: str, value: Any, where: str) -> Any:
    """`value` if it matches the contract of file `name` (contracts.json `files`), else ContractError naming each field."""
    errors = sorted(_file_validator(name).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        raise ContractError(where, name, [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors])
    return value

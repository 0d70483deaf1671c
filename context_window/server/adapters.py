"""What every tool adapter shares: error mapping, the audit line, and result building.

Core errors become the SDK's ToolError here and nowhere else; anything
unexpected is logged with its traceback and reported generically.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from context_window import errors
from context_window.errors import ContextWindowError, advised

log = logging.getLogger("context_window")

# The tool annotations, one set for every tool: no tool reaches outside the data dir
# and the ingest roots, so none is open-world.
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

# What the model can do about an error (see ``errors.REMEDIES``): the tool to call.
ADVICE = {
    errors.SPLIT_OR_INGEST: ". Split it, or ingest it as a document with doc_ingest",
    errors.FIND_ENTRY: "; entry ids are shown by context_recall and context_append",
    errors.FIND_COMPACTION: (
        "; its id is the summary id context_compact returned (role summary in context_recall)"
    ),
    errors.UNCOMPACT_FIRST: "; call context_uncompact(compaction_id={compaction_id!r}) first",
    errors.REDO_COMPACTION: "; context_update(entry_id=<the summary>, delete=false) redoes it",
    errors.RETRY: ". Call it again",
    errors.OPEN_SESSION: ". Call context_open to create or resume one",
    errors.LIST_DOCUMENTS: "; call doc_list",
    errors.INGEST_FIRST: ". Call doc_list, or doc_ingest it first",
    errors.REINGEST: "; doc_ingest it again or doc_forget it",
    errors.SET_INGEST_ROOT: ": pass text instead",
}
audit_log = logging.getLogger("context_window.audit")

P = ParamSpec("P")


def result(
    text: str,
    data: dict[str, Any],
    budget: int | None = None,
    count: Callable[[str], int] | None = None,
) -> CallToolResult:
    """A tool result: compact text for the model plus the same facts as structured content.

    With a ``budget``, the structured content is fitted to it on its own (see ``fit_data``):
    some clients hand that to the model instead of the text.
    """
    if budget is not None and count is not None:
        data = fit_data(data, budget, count)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def fit_data(data: dict[str, Any], budget: int, count: Callable[[str], int]) -> dict[str, Any]:
    """``data`` whose JSON is within ``budget`` tokens: trailing list items dropped, long
    strings cut (with an ellipsis), largest first; then, if the keys alone are over, the
    last keys. ``"cut": true`` marks a fitted answer. Lists are best first or in reading
    order, so what is dropped is what matters least or comes last."""
    if count(_json(data)) <= budget:
        return data
    out: dict[str, Any] = {"cut": True, **data}
    lists = [k for k, v in out.items() if isinstance(v, list) and v]
    if lists:  # the common case, at the cost of one pass: keep the longest prefix that fits
        key = max(lists, key=lambda k: len(_json(out[k])))
        room = budget - count(_json({**out, key: []}))
        kept: list[Any] = []
        for item in out[key]:
            room -= count(_json(item)) + 1
            if room < 0:
                break
            kept.append(item)
        out[key] = kept or out[key][:1]  # one item at least, cut to fit below
        if count(_json(out)) <= budget:
            return out
    out = copy.deepcopy(out)
    for _ in range(_FIT_ROUNDS):
        over = count(_json(out)) - budget
        if over <= 0:
            return out
        parent, key, node = _largest(out)
        share = over / max(1, count(_json(node)))  # the part of this node that must go
        if isinstance(node, list):
            parent[key] = node[: max(0, len(node) - max(1, math.ceil(len(node) * share)))]
        elif isinstance(node, str) and len(node) > 1:
            parent[key] = node[: max(0, len(node) - max(2, math.ceil(len(node) * share)))] + "…"
        else:
            break
    while len(out) > 1 and count(_json(out)) > budget:
        out.popitem()
    return out


_FIT_ROUNDS = 200


def _largest(node: Any) -> tuple[Any, Any, Any]:
    """(container, key, value) of the value to shrink next: the largest list of two or more
    items, or string, found by descending into the largest child at each level."""
    parent: Any = None
    key: Any = None
    while True:
        if isinstance(node, dict) and node:
            k = max(node, key=lambda k: len(_json(node[k])))
            parent, key, node = node, k, node[k]
        elif isinstance(node, list) and len(node) == 1:
            parent, key, node = node, 0, node[0]
        else:
            return parent, key, node


def guarded(
    name: str, audit: bool
) -> Callable[[Callable[P, Awaitable[CallToolResult]]], Callable[P, Awaitable[CallToolResult]]]:
    """Wrap a tool: map core errors to ToolError, log unexpected ones, write the audit line."""

    def decorate(
        fn: Callable[P, Awaitable[CallToolResult]],
    ) -> Callable[P, Awaitable[CallToolResult]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
            started = time.perf_counter()
            outcome = "ok"
            try:
                return await fn(*args, **kwargs)
            except ContextWindowError as exc:
                outcome = type(exc).__name__
                raise ToolError(advised(exc, ADVICE)) from exc
            except ToolError:
                outcome = "ToolError"
                raise
            except Exception as exc:
                outcome = "internal"
                log.exception("tool %s failed unexpectedly", name)
                raise ToolError(
                    f"{name} failed with an internal error ({type(exc).__name__}); "
                    "the server log on stderr has details"
                ) from exc
            finally:
                if audit:
                    ms = round((time.perf_counter() - started) * 1000, 1)
                    audit_log.info(json.dumps({"tool": name, "outcome": outcome, "ms": ms}))

        return wrapper

    return decorate


_TYPES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
}


def argument_errors(error: ValidationError, schema: dict[str, Any] | None) -> str:
    """One short line per invalid argument, in the words a model can act on.

    pydantic's own report spans several lines per problem, repeats the input and
    links to its documentation; this names the argument and the rule it broke.
    """
    properties = (schema or {}).get("properties", {})
    lines: list[str] = []
    for err in error.errors(include_url=False):
        loc = err["loc"]
        name = ".".join(str(part) for part in loc) or "arguments"
        spec = _flat(properties.get(str(loc[0]), {})) if loc else {}
        for part in loc[1:]:  # into a list's items
            spec = _flat(spec.get("items", {})) if isinstance(part, int) else {}
        line = f"{name} {_problem(err, spec)}"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines)


def _flat(spec: dict[str, Any]) -> dict[str, Any]:
    """A property schema with its non-null ``anyOf`` branch merged in."""
    for option in spec.get("anyOf", []):
        if option.get("type") != "null":
            return {**option, **{k: v for k, v in spec.items() if k != "anyOf"}}
    return spec


def _problem(err: Any, spec: dict[str, Any]) -> str:
    kind = str(err["type"])
    low, high = spec.get("minimum"), spec.get("maximum")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a parameter of this tool"
    if kind in {"greater_than_equal", "less_than_equal", "greater_than", "less_than"}:
        if low is not None and high is not None:
            return f"must be between {low:,} and {high:,}"
        bound = err.get("ctx", {})
        limit = next(iter(bound.values()), "")
        word = "at least" if kind.startswith("greater") else "at most"
        return f"must be {word} {limit}"
    if kind in {"string_too_long", "too_long"}:
        return f"is too long (at most {spec.get('maxLength', spec.get('maxItems', '?')):,})"
    if kind in {"string_too_short", "too_short"}:
        return "is too short"
    if kind in {"literal_error", "enum"}:
        return f"must be one of {', '.join(map(str, spec.get('enum', [])))}".rstrip()
    wanted = spec.get("type")
    if isinstance(wanted, str) and kind.endswith(("_type", "_parsing")):
        return f"must be {_TYPES.get(wanted, wanted)}"
    return "is invalid: " + str(err["msg"]).split("\n", 1)[0]

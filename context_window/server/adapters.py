"""What every tool adapter shares: error mapping, the audit line and the annotations."""

from __future__ import annotations

import difflib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, get_args

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ValidationError

from context_window import errors
from context_window.errors import ContextWindowError, InvalidInput, advised
from context_window.storage import is_valid_id

log = logging.getLogger("context_window")

# No tool reaches outside the data dir and the ingest roots: none is open-world.
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# readOnlyHint defaults to false, so writing tools leave it out (schema tokens cost).
WRITES = ToolAnnotations(destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(destructive_hint=True, open_world_hint=False)
# doc_ingest replaces a doc_id (destructive); the same text twice is one copy (idempotent).
REPLACES = ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False)

# What the model can do about an error (the remedies of ``errors``): the tool to call.
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
    errors.USE_ID: ". Call again with {name}={id!r}",
    errors.REINGEST: "; doc_ingest it again or doc_forget it",
    errors.SET_INGEST_ROOT: ": pass text instead, or ask the user to set an existing ingest root",
}
audit_log = logging.getLogger("context_window.audit")

P = ParamSpec("P")


def guarded(
    name: str, audit: bool, ready: Callable[[], Awaitable[object]] | None = None
) -> Callable[[Callable[P, Awaitable[CallToolResult]]], Callable[P, Awaitable[CallToolResult]]]:
    """Wrap a tool: await ``ready``, map core errors to ToolError, write the audit line."""

    def decorate(
        fn: Callable[P, Awaitable[CallToolResult]],
    ) -> Callable[P, Awaitable[CallToolResult]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
            started = time.perf_counter()
            outcome = "ok"
            try:
                if ready is not None:
                    await ready()
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
    """One short line per invalid argument, naming it and the rule it broke."""
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


def unset_blanks(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` less the optional ones given as null or blank strings, which clients
    and small models send to mean "not given" (``doc_search(doc_id="")`` searches every
    document; OpenAI's strict function calling sends every parameter, null if unset)."""
    required = set(schema.get("required", ()))
    return {
        k: v
        for k, v in arguments.items()
        if k in required or not (v is None or (isinstance(v, str) and not v.strip()))
    }


def quoted_id(arguments: dict[str, Any]) -> str:
    """The error for an id sent padded or in quotes, as a model copies one from an answer
    (``doc_id='d1'``), with the call to make instead; '' when there is none."""
    for key, value in arguments.items():
        if isinstance(value, str) and key.endswith("_id") and not is_valid_id(value):
            bare = value.strip()
            bare = bare[1:-1] if len(bare) > 2 and bare[0] == bare[-1] in "'\"`" else bare
            if is_valid_id(bare):
                why = f"invalid {key} {value!r:.80}: an id holds no quotes or spaces"
                return advised(InvalidInput(why, remedy=errors.USE_ID, name=key, id=bare), ADVICE)
    return ""


class VerbatimStrings(FuncMetadata):
    """A tool's arguments, where a string sent for a parameter that takes one stays as sent.
    The SDK reads a string as JSON for any parameter not typed plain ``str`` (a list sent
    as text, as Claude Desktop does), so ``doc_ingest(text='[{"id": 1}]')`` got a list."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` as the SDK pre-parses it, but with every string kept that may be one."""
        fields = self.arg_model.model_fields
        parsed = super().pre_parse_json(data)
        for key, value in data.items():
            field = fields.get(key)
            if isinstance(value, str) and field is not None and str in get_args(field.annotation):
                parsed[key] = value
        return parsed


def ignored_arguments(tool: str, arguments: dict[str, Any], schema: dict[str, Any]) -> str:
    """A note on the arguments ``tool`` lacks, which it ignores ('' when none): a model
    that writes ``pin`` for ``pinned`` must learn it, not find its entry unpinned."""
    names = list(schema.get("properties", {}))
    notes = []
    for key in [k for k, v in arguments.items() if k not in names and v is not None][:5]:
        close = _close(key, names)
        mean = f"; did you mean {close}?" if close else f"; it takes {', '.join(names) or 'none'}"
        notes.append(f"\n(ignored {key!r:.60}: not a parameter of {tool}{mean})")
    return "".join(notes)


def _close(key: str, names: list[str]) -> str:
    """The parameter ``key`` most likely meant: one a prefix of the other (``pin``,
    ``sessionId``), or ``key`` its end (``path``, ``id``), else a near spelling; '' when
    none is near."""
    bare = key.lower().replace("_", "")
    for name in names:
        plain = name.replace("_", "")
        if bare and (plain.startswith(bare) or bare.startswith(plain) or plain.endswith(bare)):
            return name
    return next(iter(difflib.get_close_matches(key, names, n=1, cutoff=0.75)), "")


def _flat(spec: dict[str, Any]) -> dict[str, Any]:
    """A property schema with its non-null ``anyOf`` branch merged in."""
    for option in spec.get("anyOf", []):
        if option.get("type") != "null":
            return {**option, **{k: v for k, v in spec.items() if k != "anyOf"}}
    return spec


# A schema's bounds as an argument error states them (``gt=0`` is "more than 0").
_BOUNDS = {
    "minimum": "at least",
    "exclusiveMinimum": "more than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


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
        rules = [f"{word} {spec[key]:,}" for key, word in _BOUNDS.items() if key in spec]
        return "must be " + " and ".join(rules) if rules else f"is out of range: {err['msg']}"
    if kind in {"string_too_long", "too_long"}:
        return f"is too long (at most {spec.get('maxLength', spec.get('maxItems', '?')):,})"
    if kind in {"string_too_short", "too_short"}:
        return "is too short"
    if kind in {"literal_error", "enum"}:
        return f"must be one of {', '.join(map(str, spec.get('enum', [])))}".rstrip()
    wanted = spec.get("type")
    if isinstance(wanted, str) and kind.endswith(("_type", "_parsing", "_from_float")):
        given = err.get("input")  # words where a list of words goes: show the list to send
        if wanted == "array" and isinstance(given, str) and 0 < len(given) <= 60:
            words = [w.strip() for w in given.split(",") if w.strip()] or [given]
            return f"must be a list, as {json.dumps(words, ensure_ascii=False)}"
        return f"must be {_TYPES.get(wanted, wanted)}"
    return "is invalid: " + str(err["msg"]).split("\n", 1)[0]


# Each tool's structured-content keys, its outputSchema (names only); "cut" when fitted.
_DOC = "id title source sha256 chars chunks tokens cursor created_at summary_cached"
OUTPUT_KEYS = {
    "context_guide": "data_dir budget ingest_roots token_counts token_ratio summarizer tools",
    "context_open": "session_id title created live total tokens budget pinned",
    "context_append": "entry_id ref tokens session_tokens budget advice",
    "context_recall": "session_id entries candidates searchable used_tokens budget omitted "
    "beyond_limit",
    "context_compact": "session_id dry_run folded folded_tokens compaction_id summary_id "
    "summary_tokens method reason tokens_freed kept_facts facts_not_kept left",
    "context_uncompact": "session_id compaction_id restored session_tokens budget",
    "context_status": "total live superseded deleted pinned expired live_tokens skipped_lines "
    "orphan_patches repairs session_id budget token_counts token_ratio summarizer advice",
    "context_update": "id ref seq created_at role text tokens tags pinned deleted superseded "
    "replaced_by replaces expires_at expired",
    "context_list_sessions": "sessions total matched offset",
    "doc_ingest": f"{_DOC} doc_id duplicate_of reused replaced seconds next",
    "doc_outline": f"{_DOC} outline",
    "doc_search": "query searchable hits omitted",
    "doc_window": "doc_id session_id chunks cursor total_chunks at_end truncated used_tokens "
    "budget",
    "doc_summarize": "doc_id from to whole text method reason tokens note cached",
    "doc_list": "documents",
    "doc_forget": "doc_id forgotten",
}


def output_schema(tool: str) -> dict[str, Any] | None:
    """The outputSchema of ``tool``: an object with its structured content's keys."""
    keys = OUTPUT_KEYS.get(tool)
    return {"type": "object", "required": keys.split()} if keys else None

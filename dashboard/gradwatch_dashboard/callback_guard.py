"""ASGI guard in front of the dashboard: a Dash callback request is checked before Dash sees it.

Dash parses the body of ``POST /_dash-update-component`` and indexes into it without
checks: a body nested 400,000 levels deep (a ``RecursionError`` in the JSON parser), a
list where an object belongs or an unknown callback each end in an HTML 500. Here the body
(complete: the server's body guard has read it) is parsed once on a worker thread and
must be what the dashboard's own pages send: a JSON object at most ``MAX_DEPTH`` levels
deep naming a registered callback (``output``), with its ``outputs``, and ``inputs`` and
``state`` matching that callback's registered ids and properties in number and order
(pattern-matching ids: a list of objects), and each value of the type the callback's
function declares for it (its annotations: ``str | None``, ``list[str] | None``, ...), so
that a callback never runs on a value its own page could not send. A callback that runs
in the browser (a clientside callback) has no server side and is refused. Anything else
is answered with a 400 JSON error naming what was wrong, before a worker thread of the
dashboard is taken.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import types
import typing
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CALLBACK_ROUTE = "_dash-update-component"
#: deepest JSON a callback body may be (the dashboard's own bodies are under 20 levels)
MAX_DEPTH = 100


class BadCallbackError(ValueError):
    """The body is not a callback request of this dashboard; the message says why."""


class CallbackGuard:
    """Wraps the dashboard's ASGI app; see the module docstring. ``callbacks`` is the Dash
    app's ``callback_map`` and ``prefix`` its ``routes_pathname_prefix``."""

    def __init__(self, app: ASGIApp, callbacks: dict[str, Any], prefix: str = "/") -> None:
        self.app = app
        self.callbacks = callbacks
        self.route = f"{prefix.rstrip('/')}/{CALLBACK_ROUTE}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check a callback request's body; pass every request that is fine on."""
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        path = scope.get("root_path", "") + scope.get("path", "")
        if path != self.route and scope.get("path") != self.route:
            await self.app(scope, receive, send)
            return
        body, receive = await _body(receive)
        try:
            await asyncio.to_thread(check_callback, body, self.callbacks)
        except BadCallbackError as e:
            from starlette.responses import JSONResponse

            reply = JSONResponse({"detail": f"invalid dashboard callback request: {e}"}, 400)
            await reply(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body, and a ``receive`` that gives it again."""
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(parts)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def check_callback(body: bytes, callbacks: dict[str, Any]) -> None:
    """``BadCallbackError`` unless ``body`` is a request for one of ``callbacks``."""
    try:
        request = json.loads(body)
    except RecursionError:
        raise BadCallbackError(f"the JSON is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # not UTF-8, not JSON, cut short
        raise BadCallbackError(f"the body is not JSON ({str(e)[:200]})") from None
    _check_depth(request)
    if not isinstance(request, dict):
        raise BadCallbackError(f"the body is a JSON {_kind(request)}, not an object")
    output = request.get("output")
    if not isinstance(output, str):
        raise BadCallbackError("'output' must be a string naming a callback's outputs")
    callback = callbacks.get(output)
    if callback is None:
        raise BadCallbackError(f"no callback has the outputs {output[:200]!r}")
    if callback.get("callback") is None:
        raise BadCallbackError(f"the callback of {output[:200]!r} runs in the browser")
    _check_outputs(request.get("outputs"), output)
    for part in ("inputs", "state"):
        _check_args(part, request.get(part, []), callback.get(part, []))
    _check_types(request, callback)
    changed = request.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        raise BadCallbackError("'changedPropIds' must be a list of strings")


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else "number"
    )


def _check_depth(value: Any) -> None:
    """``BadCallbackError`` for JSON deeper than ``MAX_DEPTH`` (without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadCallbackError(f"the JSON is nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _is_prop(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("id"), str | dict)
        and isinstance(item.get("property"), str)
    )


def _check_outputs(outputs: Any, output: str) -> None:
    if output.startswith(".."):  # several outputs: '..a.children...b.data..'
        count = output.count("...") + 1
        if not isinstance(outputs, list) or len(outputs) != count:
            raise BadCallbackError(f"'outputs' must be a list of {count} objects")
        items = outputs
    elif output.startswith("{"):  # one pattern-matching output: a list of matches
        items = outputs if isinstance(outputs, list) else [None]
    elif not _is_prop(outputs):  # one output: one object (a list reads as a pattern's)
        raise BadCallbackError("'outputs' must be an object with an 'id' and a 'property'")
    else:
        return
    if not all(_is_prop(o) or (isinstance(o, list) and all(map(_is_prop, o))) for o in items):
        raise BadCallbackError("each of 'outputs' must be an object with an 'id' and a 'property'")


def _check_args(part: str, sent: Any, registered: list[dict[str, Any]]) -> None:
    if not isinstance(sent, list) or len(sent) != len(registered):
        raise BadCallbackError(f"{part!r} must be a list of {len(registered)} objects")
    for item, spec in zip(sent, registered, strict=True):
        if str(spec.get("id", "")).startswith("{"):  # pattern-matching: a list of matches
            if not isinstance(item, list) or not all(
                _is_prop(i) and isinstance(i["id"], dict) for i in item
            ):
                raise BadCallbackError(f"{part!r}: {spec['id']} takes a list of matches")
            continue
        if not _is_prop(item) or (item["id"], item["property"]) != (spec["id"], spec["property"]):
            raise BadCallbackError(
                f"{part!r} must be {spec['id']}.{spec['property']} where {str(item)[:100]} was sent"
            )


def _check_types(request: dict[str, Any], callback: dict[str, Any]) -> None:
    """``BadCallbackError`` unless every value has the type the callback's function declares
    for its argument (inputs, then state, in order; a pattern-matching input gives a list)."""
    hints = _hints(callback["callback"])
    if hints is None:
        return
    items = [*request.get("inputs", []), *request.get("state", [])]
    for (name, hint), item in zip(hints, items, strict=False):
        value = [i.get("value") for i in item] if isinstance(item, list) else item.get("value")
        if not _conforms(value, hint):
            raise BadCallbackError(
                f"{name!r} takes {_show(hint)} where a JSON {_kind(value)} was sent"
            )


_HINTS: dict[Any, list[tuple[str, Any]] | None] = {}


def _hints(function: Any) -> list[tuple[str, Any]] | None:
    """(argument name, declared type) of a callback's function in order, or None where its
    annotations cannot be read (then values are not checked)."""
    if function not in _HINTS:
        original = inspect.unwrap(function)
        try:
            declared = typing.get_type_hints(original)
            names = list(inspect.signature(original).parameters)
        except (NameError, TypeError, ValueError):
            _HINTS[function] = None
        else:
            _HINTS[function] = [(n, declared.get(n, Any)) for n in names]
    return _HINTS[function]


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of the declared type (``Any`` and unknown forms accept all)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is list or origin is list or origin is tuple:
        args = typing.get_args(hint)
        inner = args[0] if args else Any
        return isinstance(value, list) and all(_conforms(v, inner) for v in value)
    if typing.is_typeddict(hint):
        fields = typing.get_type_hints(hint)
        return (
            isinstance(value, dict)
            and set(value) <= set(fields)
            and hint.__required_keys__ <= set(value)
            and all(_conforms(value.get(k), fields[k]) for k in fields)
        )
    if hint is dict or origin is dict:
        args = typing.get_args(hint)
        inner = args[1] if len(args) == 2 else Any
        return isinstance(value, dict) and all(_conforms(v, inner) for v in value.values())
    return True


def _show(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("NoneType", "None")

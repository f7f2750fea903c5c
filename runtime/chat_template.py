"""Render a model's Jinja chat template exactly as Hugging Face's ``apply_chat_template`` does.

Same sandbox (``ImmutableSandboxedEnvironment``, ``trim_blocks``/``lstrip_blocks``, loop controls,
the ``{% generation %}`` tag), same helpers (``tojson`` without HTML escaping, ``raise_exception``,
``strftime_now``, restricted ``dict``/``namespace``) and the same inputs (messages with ``None``
values dropped and reasoning fields aliased, the tokenizer's special tokens, then caller kwargs
such as ``enable_thinking`` or ``reasoning_effort``). Templates come from downloaded files, so they
are untrusted code: the sandbox is not optional.

Jinja's sandbox stops a template from reaching Python internals, but not from exhausting the
machine: ``range(10**9)``, ``'x' * 10**10``, nested loops or a macro that calls itself twice run
out of memory or never end. So every render also runs under a :class:`RenderLimits` budget:

* every value a template creates (call and filter results, operators, ``~``, list/dict literals)
  is weighed *before* it is built where the size is predictable (``*``, ``center``, ``join``,
  ``replace``, format widths, ...) and after it is built otherwise; the weight counts shared
  parts as often as they appear (``[s] * 1000`` weighs 1000 ``s``), so printing, comparing or
  joining any value costs at most the limit;
* loop steps, emitted text and the total of created values are counted over the whole render;
* a deadline is checked at every operation, and a watchdog thread interrupts pure-Python work
  (a filter over a long text) that never reaches a check.

Every limit names the template's source and the limit hit (:class:`ChatTemplateError`).
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import json
import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from runtime.errors import TernaryError

# Plain ChatML, for the rare file without a template (every Bonsai model is ChatML).
FALLBACK_CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{% endif %}{% endif %}"
)

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(TernaryError):
    """The model's chat template failed to render (or raised on purpose, e.g. bad roles).

    ``limit`` names the safety limit the template hit ("time", "size", "loop", "range", "output",
    "depth", "template"; "memory" if the machine ran out first), or is ``""`` for an ordinary
    template error.
    """

    def __init__(self, message: str, limit: str = "") -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True)
class RenderLimits:
    """How much one render may do. The defaults are far above what real chat templates need
    (a 1,000-message conversation through the Qwen3 template uses < 0.1 % of each)."""

    seconds: float = 10.0
    max_chars: int = 8 * 1024 * 1024  # largest value / output, plus 4x the size of the inputs
    input_factor: int = 4
    max_range: int = 100_000  # items in one range() (Jinja's own sandbox limit)
    max_loop_steps: int = 1_000_000  # loop iterations over the whole render
    work_factor: int = 16  # all created values together may weigh this many times max_chars
    max_depth: int = 256  # nesting of lists/dicts
    max_int_bits: int = 100_000
    max_template_chars: int = 1024 * 1024


DEFAULT_LIMITS = RenderLimits()


class _LimitExceeded(Exception):
    """Raised inside a render when a limit is hit; ``kind`` is the :attr:`ChatTemplateError.limit`."""

    def __init__(self, kind: str, what: str) -> None:
        super().__init__(what)
        self.kind = kind


class _Deadline(BaseException):  # noqa: N818 - delivered asynchronously by the watchdog
    """Injected into the rendering thread when the deadline passed (BaseException: nothing in the
    template machinery may swallow it)."""


class _Budget:
    """The counters of one render (kept in a context variable: compiled templates are shared)."""

    def __init__(self, limits: RenderLimits, input_weight: int) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.max_chars = limits.max_chars + limits.input_factor * input_weight
        self.work_left = limits.work_factor * self.max_chars
        self.emitted_left = limits.input_factor * self.max_chars
        self.loop_steps_left = limits.max_loop_steps

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _LimitExceeded("time", f"it ran longer than {self.limits.seconds:g} s")

    def check(self, value: Any, what: str = "a value", count: bool = True) -> Any:
        """Refuse a value weighing more than the limit; count it as work (``count``: it is new)."""
        w = weigh(value, self.max_chars, self.limits.max_depth)
        self.refuse_size(w, what)
        if not count:
            return value
        self.work_left -= w
        if self.work_left < 0:
            raise _LimitExceeded("size", f"it built more than {self.limits.work_factor * self.max_chars} "
                                         f"characters of values in all")
        return value

    def refuse_size(self, size: int, what: str = "a value") -> None:
        if size > self.max_chars:
            raise _LimitExceeded("size", f"it would build {what} of {_count(size)} characters or items "
                                         f"(at most {self.max_chars} are allowed)")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("chat_template_budget", default=None)


def _count(n: int) -> str:
    return f"more than {n}" if n >= 2**62 else str(n)


def _budget() -> _Budget | None:
    b = _BUDGET.get()
    if b is not None:
        b.tick()
    return b


# -- weighing values ------------------------------------------------------------------------------
_LEAF_TYPES = (int, float, bool, type(None))


def weigh(value: Any, cap: int, max_depth: int = 256) -> int:
    """Characters/items of ``value`` with shared parts counted every time they appear (what
    printing it would cost); stops counting past ``cap`` (returns ``cap + 1``)."""
    memo: dict[int, int] = {}

    def w(v: Any, depth: int) -> int:
        if isinstance(v, str | bytes):
            return len(v)
        if isinstance(v, _LEAF_TYPES):
            return 1
        if isinstance(v, jinja2.utils.Namespace):
            items: Iterable[Any] = object.__getattribute__(v, "_Namespace__attrs").values()
        elif isinstance(v, dict):
            items = (x for kv in v.items() for x in kv)
        elif isinstance(v, list | tuple | set | frozenset):
            items = v
        elif isinstance(v, range):
            return len(v)
        else:
            return 1
        key = id(v)
        if key in memo:
            return memo[key]
        if depth > max_depth:
            raise _LimitExceeded("depth", f"it nests values more than {max_depth} levels deep")
        total = 1
        for item in items:
            total += w(item, depth + 1)
            if total > cap:
                total = cap + 1
                break
        memo[key] = total
        return total

    return w(value, 0)


# -- size predictions for operations that allocate in one C call ---------------------------------
_PRINTF_WIDTH = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_SPEC_NUMBER = re.compile(r"\d+")


def _check_printf(b: _Budget, fmt: str, args: Any) -> None:
    """``'%*s' % (10**9, x)`` or ``'%999999999d'`` allocate before anything can be checked."""
    star = False
    for width, precision in _PRINTF_WIDTH.findall(fmt):
        for part in (width, precision):
            if part == "*":
                star = True
            elif part:
                b.refuse_size(int(part), "a formatted field")
    if star:
        values = args if isinstance(args, tuple) else (args,)
        for v in values:
            if isinstance(v, int) and not isinstance(v, bool):
                b.refuse_size(abs(v), "a formatted field")
    b.check(args, "format arguments", count=False)


def _check_format_string(b: _Budget, fmt: str, args: Any, kwargs: Any) -> None:
    """``'{:>999999999}'.format(x)``: widths in format specs, also nested ones (``{:{w}}``)."""
    nested = False
    try:
        for _, _, spec, _ in string.Formatter().parse(fmt):
            if spec:
                nested = nested or "{" in spec
                for number in _SPEC_NUMBER.findall(spec):
                    b.refuse_size(int(number), "a formatted field")
    except ValueError:
        return  # a malformed format string fails by itself
    if nested:
        for v in [*args, *kwargs.values()]:
            if isinstance(v, int) and not isinstance(v, bool):
                b.refuse_size(abs(v), "a formatted field")
    b.check((args, kwargs), "format arguments", count=False)


def _check_replace(b: _Budget, text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(text, str | bytes) and isinstance(old, type(text)) and isinstance(new, type(text)):
        n = (len(text) + 1) if not old else text.count(old)
        if isinstance(count, int) and count >= 0:
            n = min(n, count)
        b.refuse_size(len(text) + n * max(0, len(new) - len(old)), "a replaced text")


def _check_join(b: _Budget, sep: Any, items: Any) -> None:
    if isinstance(items, str):
        b.refuse_size(len(items) * (1 + len(str(sep))), "a joined text")
    elif isinstance(items, list | tuple):
        b.refuse_size(weigh(items, b.max_chars) + len(str(sep)) * max(0, len(items) - 1), "a joined text")


def _check_width(b: _Budget, text: Any, width: Any, what: str) -> None:
    if isinstance(width, int) and not isinstance(width, bool):
        b.refuse_size(abs(width) + (len(text) if isinstance(text, str | bytes) else 0), what)


_SIZE_METHODS = {"center", "ljust", "rjust", "zfill"}


def _check_method(b: _Budget, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """Pre-checks for methods of str/bytes/int whose result size comes from an argument; returns
    the arguments (an iterator to ``join`` is read into a list to be measured)."""
    target = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
    owner = getattr(target, "__self__", None)
    name = getattr(target, "__name__", "")
    if isinstance(owner, str | bytes):
        if name in _SIZE_METHODS and args:
            _check_width(b, owner, args[0], "a padded text")
        elif name == "expandtabs":
            size = args[0] if args else kwargs.get("tabsize", 8)
            if isinstance(size, int):
                b.refuse_size(len(owner) + owner.count("\t" if isinstance(owner, str) else b"\t") * abs(size),
                              "an expanded text")
        elif name == "replace" and len(args) >= 2:
            _check_replace(b, owner, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count", -1))
        elif name == "join" and args:
            items = args[0] if isinstance(args[0], list | tuple) else list(_Guards._loop(None, args[0]))
            _check_join(b, owner, items)
            args = (items, *args[1:])
        elif name in ("format", "format_map") and isinstance(owner, str):
            _check_format_string(b, owner, args, kwargs)
        elif name == "translate" and args and isinstance(args[0], dict):
            longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
            b.refuse_size(len(owner) * longest, "a translated text")
    elif isinstance(owner, int) and name == "to_bytes":
        length = args[0] if args else kwargs.get("length", 1)
        if isinstance(length, int):
            b.refuse_size(length, "a byte string")
    return args


# -- filters and globals --------------------------------------------------------------------------
def _filter_prechecks(b: _Budget, name: str, args: tuple, kwargs: dict) -> tuple:
    """Size predictions for filters that allocate their result in one go; returns the arguments
    (an iterator given to ``join`` is read into a list to be measured)."""
    value = args[0] if args else None
    rest = args[1:]

    def arg(i: int, key: str, default: Any = None) -> Any:
        return rest[i] if len(rest) > i else kwargs.get(key, default)

    if name == "center":
        _check_width(b, value, arg(0, "width", 80), "a centered text")
    elif name == "indent":
        width = arg(0, "width", 4)
        size = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        lines = str(value).count("\n") + 1 if isinstance(value, str) else 1
        b.refuse_size(len(str(value)) + abs(size) * lines if isinstance(value, str) else abs(size), "an indented text")
    elif name == "replace":
        _check_replace(b, value, arg(0, "old"), arg(1, "new"), arg(2, "count", -1))
    elif name == "join":
        if isinstance(value, Iterable) and not isinstance(value, str | dict | list | tuple):
            value = list(_Guards._loop(None, value))
            args = (value, *rest)
        _check_join(b, arg(0, "d", ""), value)
    elif name == "format" and isinstance(value, str):
        _check_printf(b, value, tuple(rest) if rest else kwargs)
    elif name == "tojson":
        indent = arg(1, "indent")
        size = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
        if abs(size) > 16:
            raise _LimitExceeded("size", f"it asked tojson for an indent of {_count(abs(size))} (at most 16)")
    elif name in ("slice", "batch"):
        n = arg(0, "slices" if name == "slice" else "linecount")
        if isinstance(n, int):
            b.refuse_size(abs(n), f"a {name} of lists")
    elif name == "sum":
        start = arg(1, "start", 0)
        if not isinstance(start, int | float) and isinstance(value, list | tuple):
            # sum() of texts or lists copies the growing result once per item, inside one C call
            b.refuse_size(len(value) * weigh(value, b.max_chars), "a sum of texts or lists")
    return args


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    pass_arg = jinja2.utils._PassArg.from_obj(func)

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        b = _budget()
        if b is None:  # compile-time constant folding: no budget, do not fold
            raise _LimitExceeded("template", "filters run only while rendering")
        if pass_arg is not None:
            args = (args[0], *_filter_prechecks(b, name, args[1:], kwargs))
        else:
            args = _filter_prechecks(b, name, args, kwargs)
        return b.check(func(*args, **kwargs), f"the result of the {name} filter")

    return guarded


def _bounded_range(*args: int) -> range:
    r = range(*args)
    b = _budget()
    limit = b.limits.max_range if b is not None else DEFAULT_LIMITS.max_range
    if len(r) > limit:
        raise _LimitExceeded("range", f"it asked for a range of {_count(len(r))} numbers (at most {limit})")
    return r


def _bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
    b = _budget()
    if b is not None and isinstance(n, int) and isinstance(max, int):
        b.refuse_size(abs(n) * abs(max) * 12, "lorem ipsum text")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


# -- the environment ------------------------------------------------------------------------------
class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (HF tracks assistant spans)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


class _Guards(jinja2.ext.Extension):
    """Runtime hooks the rewritten template calls (see :class:`_Rewriter`)."""

    def _loop(self, iterable: Any) -> Iterator[Any]:  # also called unbound (self=None) by join checks
        b = _budget()
        if b is None:
            yield from iterable
            return
        for item in iterable:
            b.loop_steps_left -= 1
            if b.loop_steps_left < 0:
                raise _LimitExceeded("loop", f"it ran more than {b.limits.max_loop_steps} loop steps")
            if b.loop_steps_left & 255 == 0:
                b.tick()
            yield item

    def _emit(self, value: Any) -> Any:
        b = _budget()
        if b is not None:
            w = weigh(value, b.max_chars, b.limits.max_depth)
            b.refuse_size(w, "an output piece")
            b.emitted_left -= w
            if b.emitted_left < 0:
                raise _LimitExceeded("output", f"it wrote more than {b.limits.input_factor * b.max_chars} "
                                               "characters")
        return value

    def _concat(self, *parts: Any) -> str:
        b = _budget()
        if b is not None:
            b.refuse_size(sum(weigh(p, b.max_chars, b.limits.max_depth) for p in parts), "a joined text")
        out = "".join(map(str, parts))
        if b is not None:
            b.check(out, "a joined text")
        return out

    def _list(self, *items: Any) -> list:
        return self._checked(list(items))

    def _tuple(self, *items: Any) -> tuple:
        return self._checked(items)

    def _dict(self, *pairs: Any) -> dict:
        return self._checked(dict(zip(pairs[::2], pairs[1::2], strict=True)))

    @staticmethod
    def _checked(value: Any) -> Any:
        b = _budget()
        return b.check(value, "a list or dict") if b is not None else value


_GUARDS_ID = f"{_Guards.__module__}.{_Guards.__name__}"


class _Rewriter(NodeTransformer):
    """Routes every loop, output, ``~`` and list/dict literal of a parsed template through
    :class:`_Guards`, so nothing a template does escapes the budget."""

    @staticmethod
    def _call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
        attr = nodes.ExtensionAttribute(_GUARDS_ID, name, lineno=lineno)
        return nodes.Call(attr, args, [], None, None, lineno=lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:  # noqa: N802 - NodeTransformer naming
        node = self.generic_visit(node)
        node.iter = self._call("_loop", [node.iter], node.lineno)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:  # noqa: N802
        node = self.generic_visit(node)
        node.nodes = [self._call("_emit", [nodes.Const(c.data, lineno=c.lineno)
                                           if isinstance(c, nodes.TemplateData) else c], node.lineno)
                      for c in node.nodes]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:  # noqa: N802
        node = self.generic_visit(node)
        return self._call("_concat", list(node.nodes), node.lineno)

    def visit_List(self, node: nodes.List) -> nodes.Node:  # noqa: N802
        node = self.generic_visit(node)
        return self._call("_list", list(node.items), node.lineno)

    def visit_Tuple(self, node: nodes.Tuple) -> nodes.Node:  # noqa: N802
        node = self.generic_visit(node)
        return self._call("_tuple", list(node.items), node.lineno) if node.ctx == "load" else node

    def visit_Dict(self, node: nodes.Dict) -> nodes.Node:  # noqa: N802
        node = self.generic_visit(node)
        return self._call("_dict", [x for pair in node.items for x in (pair.key, pair.value)], node.lineno)


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """HF's sandbox plus the budget checks (operators, calls, attribute access)."""

    intercepted_binops = frozenset({"*", "**", "+", "%", "//"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _Rewriter().visit(super()._parse(source, name, filename))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        b = _budget()
        if b is not None:
            _check_binop(b, operator, left, right)
        result = super().call_binop(context, operator, left, right)
        return b.check(result, "the result of an operator") if b is not None else result

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        if isinstance(getattr(__obj, "__self__", None), _Guards):  # the rewriter's own hooks
            return __obj(*args)  # (kwargs: only the _loop_vars/_block_vars Jinja adds in loops)
        b = _budget()
        if b is not None:
            args = _check_method(b, __obj, args, kwargs)
            b.check((args, kwargs), "call arguments", count=False)
        result = ImmutableSandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs)
        if b is not None and not isinstance(result, Iterator):
            b.check(result, "a call result")
        return result

    def getattr(self, obj: Any, attribute: str) -> Any:
        _budget()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        b = _budget()
        result = super().getitem(obj, argument)
        if b is not None and isinstance(argument, slice):
            b.check(result, "a slice", count=False)
        return result


def _check_binop(b: _Budget, op: str, left: Any, right: Any) -> None:
    ints = isinstance(left, int) and isinstance(right, int)
    if op == "*":
        if ints:
            if abs(left).bit_length() + abs(right).bit_length() > b.limits.max_int_bits:
                raise _LimitExceeded("size", f"it computes a number of more than {b.limits.max_int_bits} bits")
            return
        seq, n = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(n, int) and isinstance(seq, str | bytes | list | tuple):
            b.refuse_size(weigh(seq, b.max_chars, b.limits.max_depth) * max(n, 0), "a repeated text or list")
    elif op == "**":
        if ints and right > 0 and abs(left) > 1:
            bits = abs(left).bit_length() * right
            if bits > b.limits.max_int_bits:
                raise _LimitExceeded("size", f"it computes a number of more than {b.limits.max_int_bits} bits")
    elif op == "+":
        if isinstance(left, str | bytes | list | tuple) and isinstance(right, str | bytes | list | tuple):
            b.refuse_size(weigh(left, b.max_chars) + weigh(right, b.max_chars), "a joined text or list")
    elif op == "%" and isinstance(left, str):
        _check_printf(b, left, right)


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = _BoundedEnvironment(trim_blocks=True, lstrip_blocks=True,
                              extensions=[_GenerationTag, jinja2.ext.loopcontrols, _Guards])
    env.filters = {name: _guard_filter(name, f) for name, f in env.filters.items()}
    env.filters["tojson"] = _guard_filter("tojson", _tojson)
    env.globals["range"] = _bounded_range
    env.globals["lipsum"] = _bounded_lipsum
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env.from_string(template)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    b = _budget()
    if b is not None and isinstance(fmt, str):
        b.refuse_size(len(fmt) * 16, "a date text")
    return datetime.now().strftime(fmt)


class _TemplateDict:
    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """``namespace()`` that refuses underscore attributes (no reaching into CPython internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - same trick as jinja2.Namespace
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        b = _budget()
        if b is not None:
            b.check(value, "a namespace value")
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set underscore attribute {name!r}")


# -- inputs ---------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """Rebuild inputs from plain JSON types (the sandbox only knows those are harmless)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


def _normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if not isinstance(message, dict):
            raise ChatTemplateError(f"chat messages must be dicts, got {type(message).__name__}")
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(_plain(message))
    return out


# -- the hard deadline ----------------------------------------------------------------------------
class _Watchdog:
    """Raises :class:`_Deadline` in the rendering thread when the time is up.

    Why a thread: the budget's checks run at every template operation, but one filter call (say
    ``wordwrap`` over a long text) is pure Python that never returns to the template; an
    asynchronous exception interrupts it at its next bytecode. C calls are bounded by the size
    checks instead, so they always end quickly.
    """

    def __init__(self, seconds: float) -> None:
        self._thread_id = threading.get_ident()
        self._lock = threading.Lock()
        self._done = False
        self._fired = False
        self._timer = threading.Timer(seconds + 0.5, self._fire)  # the budget's own check usually wins
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            if not self._done:
                self._fired = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id),
                                                           ctypes.py_object(_Deadline))

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
            if self._fired:  # fired but maybe not delivered yet: take it back
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), None)


# -- rendering ------------------------------------------------------------------------------------
def render_chat(template: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                tools: list[dict[str, Any]] | None = None, documents: list[dict[str, Any]] | None = None,
                special_tokens: dict[str, str] | None = None, source: str = "",
                limits: RenderLimits = DEFAULT_LIMITS, **kwargs: Any) -> str:
    """The prompt text for ``messages``; ``kwargs`` (e.g. ``enable_thinking``) reach the template.

    Keyword arguments whose value is ``None`` are not passed, so the template's own default
    (``enable_thinking is defined`` checks) applies. ``source`` names where the template came
    from (the model) in error messages. Raises :class:`ChatTemplateError` for a broken template
    and for one that hits a :class:`RenderLimits` limit; never hangs, never exhausts memory.
    """
    who = f"the chat template of {source}" if source else "the model's chat template"
    if not isinstance(template, str):
        raise ChatTemplateError(f"{who} is not text", "template")
    if len(template) > limits.max_template_chars:
        raise ChatTemplateError(f"{who} is {len(template)} characters long; at most {limits.max_template_chars} "
                                "are accepted", "template")
    template_kwargs = {**(special_tokens or {}), **{k: v for k, v in kwargs.items() if v is not None}}
    inputs = dict(messages=_normalize_messages(messages), tools=_plain(tools), documents=_plain(documents),
                  add_generation_prompt=add_generation_prompt, **_plain(template_kwargs))
    budget = _Budget(limits, weigh(inputs, 2**62))
    token = _BUDGET.set(budget)
    try:
        try:
            with _Watchdog(limits.seconds):
                compiled = _compile(template)
                out = compiled.render(**inputs)
        except _Deadline:
            raise _LimitExceeded("time", f"it ran longer than {limits.seconds:g} s") from None
        budget.refuse_size(len(out), "a prompt")
        return out
    except _LimitExceeded as exc:
        raise ChatTemplateError(f"{who} was stopped: {exc} (a safety limit for templates)", exc.kind) from None
    except jinja2.exceptions.TemplateError as exc:
        raise ChatTemplateError(f"{who} failed: {exc}") from exc
    except RecursionError:
        raise ChatTemplateError(f"{who} was stopped: it nests or recurses too deeply "
                                "(a safety limit for templates)", "depth") from None
    except MemoryError:
        raise ChatTemplateError(f"{who} was stopped: it ran out of memory", "memory") from None
    except Exception as exc:  # noqa: BLE001 - template code may raise anything (1/0, bad types)
        raise ChatTemplateError(f"{who} failed: {type(exc).__name__.lower()}: {exc}") from None
    finally:
        _BUDGET.reset(token)

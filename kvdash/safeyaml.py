"""YAML for untrusted documents: PyYAML's SafeLoader with bounds on depth, size and aliases.

A grid file arrives in a pull request from anyone.  PyYAML's ``SafeLoader`` builds no objects, but
it still (a) shares an anchored node between its aliases, so nine nested levels of ten aliases (the
"billion laughs") expand to 10^9 values when walked, (b) follows ``a: &a [*a]`` into a cycle, (c)
recurses once per nesting level (``[[[[...]]]]`` ends in RecursionError) and (d) keeps the last of two
equal keys silently.  :class:`BoundedLoader` refuses all four while composing, with one line that names
``file:line:col``:

* ``MAX_DEPTH`` = 64 levels of nesting (kvdash's grid files use 5);
* ``MAX_NODES`` = 200,000 values after alias expansion (each use of an alias counts the values it
  stands for; the largest shipped grid has under 500);
* an alias used inside the value it names (a cycle) is refused;
* a key that appears twice in one mapping is refused;
* strings have their control, bidi-override, zero-width and BOM characters written as escapes
  (``\u202e``, ``\x1b``: :func:`kvdash.errors.visible`), so no report shows text other than it holds;
* integers longer than ``MAX_INT_DIGITS`` = 40 digits (far beyond any byte count kvdash accepts:
  2^60 has 19 digits) are refused before Python parses them, so a 5,000-digit number is one line,
  not Python's 4,300-digit ``ValueError``.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
import yaml.composer
import yaml.constructor
import yaml.resolver

from kvdash.errors import InputError

MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_INT_DIGITS = 40
_DIGITS = re.compile(r"[0-9]")


class YAMLLimit(InputError):
    """A document that breaks one of the bounds (or is not YAML at all)."""


_Parser: Any
try:  # libyaml's event parser (C), when PyYAML was built with it
    from yaml.cyaml import CParser as _Parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - pure-Python PyYAML: the same bounds, slower
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, _PyParser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _PyParser.__init__(self)


class BoundedLoader(yaml.composer.Composer, _Parser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """PyYAML's safe loader, counting while it composes.  ``name`` is the file name used in errors.

    Events come from libyaml's parser (C) when available; composing stays in Python (this class's
    :meth:`compose_node`), which is where the bounds are kept.
    """

    def __init__(self, stream: str, name: str = "<yaml>") -> None:
        _Parser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self.name = name
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}  # id(node) -> values it stands for, once complete

    def _where(self, mark: Any) -> str:
        return f"{self.name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else self.name

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                size = self._sizes.get(id(node))
                if size is None:
                    raise YAMLLimit(self._where(event.start_mark), f"*{event.anchor}",
                                    "an alias may not be used inside the value it names (a cycle)")
                self._count(size, event.start_mark)
            node = super().compose_node(parent, index)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YAMLLimit(self._where(self.peek_event().start_mark), f"{self._depth} levels",
                            f"at most {MAX_DEPTH} levels of nesting")
        before = self._nodes
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(1, node.start_mark)  # type: ignore[union-attr]
        self._sizes[id(node)] = self._nodes - before
        return node

    def _count(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > MAX_NODES:
            raise YAMLLimit(self._where(mark), f"{self._nodes:,} values",
                            f"at most {MAX_NODES:,} values after expanding aliases")

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        seen: dict[object, Any] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise YAMLLimit(self._where(key_node.start_mark), key_node.value,
                                    "each key may appear once in a mapping")
                seen[key] = key_node
        return node

    def construct_yaml_int(self, node: Any) -> int:
        digits = len(_DIGITS.findall(str(node.value)))
        if digits > MAX_INT_DIGITS:
            raise YAMLLimit(self._where(node.start_mark), f"an integer of {digits:,} digits",
                            f"at most {MAX_INT_DIGITS} digits")
        return super().construct_yaml_int(node)


    def construct_visible_str(self, node: Any) -> str:
        """Strings with control, bidi and zero-width characters made visible (:func:`kvdash.errors.visible`):
        a name in a grid shows in every report as what it holds."""
        from kvdash.errors import visible

        return visible(str(self.construct_scalar(node)))


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor("tag:yaml.org,2002:str", BoundedLoader.construct_visible_str)


def _line_at(text: str, mark: Any) -> str:
    """The text of the line a YAML error points at (the last non-blank one before it when that line is blank,
    as at the end of the file): the value an error line shows."""
    lines = text.splitlines()
    at = min(mark.line, len(lines) - 1) if mark is not None else len(lines) - 1
    while at > 0 and not lines[at].strip():
        at -= 1
    return lines[at].strip() if lines else ""


def compose(text: str, name: str) -> Any:
    """The node tree of ``text`` (None for an empty document), within the bounds, or one YAMLLimit line."""
    loader = BoundedLoader(text, name)
    try:
        return loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise YAMLLimit(loader._where(mark), _line_at(text, mark), f"the file is not valid YAML: {exc.problem}") \
            from exc
    except yaml.YAMLError as exc:  # ReaderError: a control character such as NUL
        problem = " ".join(str(getattr(exc, "reason", "") or exc).split())
        raise YAMLLimit(name, "YAML", f"the file is not valid YAML: {problem}") from exc
    finally:
        loader.dispose()


def load(text: str, name: str) -> Any:
    """Python values of ``text`` within the same bounds."""
    loader = BoundedLoader(text, name)
    try:
        return loader.get_single_data()
    except YAMLLimit:
        raise
    except yaml.MarkedYAMLError as exc:
        raise YAMLLimit(loader._where(exc.problem_mark), _line_at(text, exc.problem_mark),
                        f"the file is not valid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        problem = " ".join(str(getattr(exc, "reason", "") or exc).split())
        raise YAMLLimit(name, "YAML", f"the file is not valid YAML: {problem}") from exc
    finally:
        loader.dispose()

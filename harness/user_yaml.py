"""The one YAML loader for files users write (scenarios, published figures): PyYAML's safe loader that also
refuses a key written twice in one mapping, where PyYAML would keep the last one without a word.

Every problem is one `InputError` line naming the file and the line: a syntax error, bytes that are not UTF-8,
or a duplicate key (with its key path, e.g. `line 9: workload.batch_size`).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from models.schema import join

from .errors import InputError

__all__ = ["DocumentTooLarge", "DuplicateKeyError", "UniqueKeyLoader", "load_yaml"]

MERGE_TAG = "tag:yaml.org,2002:merge"
# A document as a reader sees it, every alias counted as a copy of what it names: a billion-laughs document
# (aliases of aliases) is refused before anything is built from it, as is nesting no configuration needs.
MAX_NODES = 200_000
MAX_DEPTH = 64


class DocumentTooLarge(yaml.YAMLError):
    def __init__(self, line: int, expected: str, got: str):
        self.line, self.expected, self.got = line, expected, got
        super().__init__(f"line {line}: expected {expected}, got {got}")


_FLOW = re.compile(r"""[\[\]{}]|"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|(?<!\S)#[^\n]*""")


def _flow_depth_past_bound(text: str) -> int | None:
    """The line where flow brackets (`[`, `{`) first nest past MAX_DEPTH, outside quotes and comments; None if
    they never do. Checked before parsing: PyYAML's scanner takes quadratic time over deep flow nesting."""
    depth = 0
    for m in _FLOW.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return text.count("\n", 0, m.start()) + 1
        elif c in "]}":
            depth = max(depth - 1, 0)
    return None


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _measure(node, depth: int, memo: dict) -> tuple[int, int]:
    """(nodes, height) of `node` with every alias expanded; refuses a document past MAX_NODES or MAX_DEPTH."""
    if id(node) not in memo:
        if depth > MAX_DEPTH:
            raise DocumentTooLarge(node.start_mark.line + 1, f"nesting at most {MAX_DEPTH} deep", "deeper nesting")
        sizes = [_measure(child, depth + 1, memo) for child in _children(node)]
        memo[id(node)] = (1 + sum(n for n, _ in sizes), 1 + max((h for _, h in sizes), default=0))
    nodes, height = memo[id(node)]
    if depth + height > MAX_DEPTH + 1:
        raise DocumentTooLarge(node.start_mark.line + 1, f"nesting at most {MAX_DEPTH} deep", "deeper nesting")
    if nodes > MAX_NODES:
        got = f"{nodes:,} or more values once its aliases are expanded"
        raise DocumentTooLarge(node.start_mark.line + 1, f"at most {MAX_NODES:,} values (aliases expanded)", got)
    return nodes, height


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, path: str, key: str, line: int, first_line: int):
        self.path, self.key, self.line, self.first_line = path, key, line, first_line
        super().__init__(f"line {line}: {path}: duplicate key {key!r} (first at line {first_line})")


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that raises DuplicateKeyError for a key written twice in one mapping. Keys brought in
    by a merge (`<<: *anchor`) may still be overridden, as YAML intends."""

    def construct_document(self, node):
        _measure(node, 0, {})
        self._refuse_duplicates(node, "", set())
        return super().construct_document(node)

    def _refuse_duplicates(self, node, path: str, seen_nodes: set) -> None:
        if id(node) in seen_nodes:  # an alias: its node was checked where it was anchored
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._refuse_duplicates(item, f"{path}[{i}]", seen_nodes)
        elif isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG:
                    self._refuse_duplicates(value_node, path, seen_nodes)
                    continue
                key = self.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
                child = join(path, key if key is not None else key_node.start_mark.line + 1)
                try:
                    earlier = first.setdefault(key, key_node) if key is not None else key_node
                except TypeError:  # an unhashable key: the safe loader's own error names it
                    earlier = key_node
                if earlier is not key_node:
                    raise DuplicateKeyError(
                        child, key_node.value, key_node.start_mark.line + 1, earlier.start_mark.line + 1
                    )
                self._refuse_duplicates(value_node, child, seen_nodes)


def load_yaml(data: bytes | str, file: str, error: type[InputError] = InputError) -> Any:
    """The YAML document in `data` (the bytes or text of `file`), loaded with UniqueKeyLoader; any problem
    raises `error` (InputError or a subclass) on one line."""
    file = str(file)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(file, None, "UTF-8 text", f"undecodable byte at offset {e.start}") from None
    deep = _flow_depth_past_bound(data)
    if deep is not None:
        raise error(file, f"line {deep}", f"nesting at most {MAX_DEPTH} deep", "deeper nesting")
    try:
        return yaml.load(data, Loader=UniqueKeyLoader)  # noqa: S506 - a subclass of the safe loader
    except DocumentTooLarge as e:
        raise error(file, f"line {e.line}", e.expected, e.got) from None
    except RecursionError:  # the composer recurses once per level: nesting far past MAX_DEPTH
        raise error(file, None, f"nesting at most {MAX_DEPTH} deep", "deeper nesting") from None
    except DuplicateKeyError as e:
        raise error(
            file,
            f"line {e.line}: {e.path}",
            "each key once per mapping",
            f"{e.key!r} again (first at line {e.first_line})",
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise error(file, where, "valid YAML", getattr(e, "problem", None) or str(e)) from None

"""The one YAML loader for files users write (scenarios, published figures): PyYAML's safe loader that also
refuses a key written twice in one mapping, where PyYAML would keep the last one without a word.

Every problem is one `InputError` line naming the file and the line: a syntax error, bytes that are not UTF-8,
or a duplicate key (with its key path, e.g. `line 9: workload.batch_size`).
"""

from __future__ import annotations

from typing import Any

import yaml

from models.schema import join

from .errors import InputError

__all__ = ["DuplicateKeyError", "UniqueKeyLoader", "load_yaml"]

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, path: str, key: str, line: int, first_line: int):
        self.path, self.key, self.line, self.first_line = path, key, line, first_line
        super().__init__(f"line {line}: {path}: duplicate key {key!r} (first at line {first_line})")


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that raises DuplicateKeyError for a key written twice in one mapping. Keys brought in
    by a merge (`<<: *anchor`) may still be overridden, as YAML intends."""

    def construct_document(self, node):
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
    try:
        return yaml.load(data, Loader=UniqueKeyLoader)  # noqa: S506 - a subclass of the safe loader
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

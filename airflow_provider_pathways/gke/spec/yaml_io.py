"""YAML in and out for job specs: safe, bounded loading, and manifests written with block strings.

Only YAML's safe types are built (``SafeLoader``, or its C twin when PyYAML has libyaml). On top:
duplicate keys are an error (not last-wins), and before anything is built the document's node graph
is measured with aliases expanded: a document over :data:`MAX_YAML_BYTES`, :data:`MAX_NODES`
expanded nodes or :data:`MAX_DEPTH` levels, or with a recursive alias, is refused. So a
"billion laughs" document is refused in milliseconds instead of exhausting memory later.
"""

from __future__ import annotations

from typing import Any

import yaml

from airflow_provider_pathways.gke.spec.checks import PathwaysSpecError, SpecProblem

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_YAML_BYTES", "BlockDumper", "load_documents"]

#: Largest YAML text accepted (a PathwaysJob manifest is a few kB; the API server stores < 1.5 MB).
MAX_YAML_BYTES = 256 * 1024
#: Most nodes (mappings, lists, scalars) a document may have once its aliases are expanded.
MAX_NODES = 50_000
#: Deepest nesting accepted (a pod template needs about 15 levels).
MAX_DEPTH = 64

_WHERE = "<yaml>"
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int, first: int) -> None:
        super().__init__(f"duplicate key {key!r} on line {line} (first on line {first})")


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """Safe loader that refuses duplicate mapping keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise _DuplicateKey(key, line, seen[key])
                seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _measure(root: yaml.Node) -> tuple[int, int]:
    """(expanded node count, depth) of a node graph, each alias counted as often as it is used.

    Iterative, linear in the graph's size; raises ValueError for a recursive alias.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        if leaving:
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            visiting.discard(key)
            continue
        if key in size:
            continue
        if key in visiting:
            raise ValueError("an alias refers to a node that contains it (a recursive structure)")
        visiting.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)
    return size[id(root)], depth[id(root)]


def _refuse(problem: str, fix: str) -> PathwaysSpecError:
    return PathwaysSpecError([SpecProblem(_WHERE, problem, fix)])


def _text(source: object) -> str:
    if isinstance(source, bytes):
        try:
            return source.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _refuse(f"is not UTF-8 text ({err.reason} at byte {err.start})", "pass UTF-8 YAML") from err
    if not isinstance(source, str):
        shown = "None" if source is None else f"a {type(source).__name__} ({source!r:.40})"
        raise _refuse(
            f"is {shown}, not YAML text",
            "pass the YAML document as a str (or load a dict with PathwaysJobSpec.from_dict)",
        )
    return source


def load_documents(source: object) -> list[Any]:
    """The non-empty documents of ``source`` (YAML text), each checked before it is built.

    Raises PathwaysSpecError for non-text input, invalid YAML, duplicate keys, and documents that
    are too large, too deep or expand too much through aliases.
    """
    text = _text(source)
    size = len(text.encode("utf-8"))
    if size > MAX_YAML_BYTES:
        raise _refuse(
            f"is {size} bytes, more than the {MAX_YAML_BYTES} this loader accepts",
            "pass a job spec of ordinary size (a PathwaysJob manifest is a few kB)",
        )
    documents: list[Any] = []
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            try:
                nodes, depth = _measure(node)
            except ValueError as err:
                raise _refuse(str(err), "remove the recursive alias") from err
            if nodes > MAX_NODES:
                raise _refuse(
                    f"expands to {nodes} nodes through its aliases (at most {MAX_NODES})",
                    "write the document without anchors and aliases (&x / *x) that multiply its size",
                )
            if depth > MAX_DEPTH:
                raise _refuse(f"is nested {depth} levels deep (at most {MAX_DEPTH})", "flatten the document")
            value = loader.construct_document(node)
            if value is not None:
                documents.append(value)
    except yaml.YAMLError as err:
        reason = " ".join(str(err).split())
        fix = "remove or rename one of the keys" if isinstance(err, _DuplicateKey) else "fix the YAML syntax"
        raise _refuse(f"is not valid YAML ({reason})", fix) from err
    except RecursionError as err:
        raise _refuse("is nested too deeply to parse", "flatten the document") from err
    finally:
        loader.dispose()
    return documents


class BlockDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


BlockDumper.add_representer(str, _represent_str)

"""The README's op list is a contract: every op it names is registered (a
graph file may name it) and docs/GRAPH_FORMAT.md gives its signature (a
table row), as the README says ("docs/GRAPH_FORMAT.md lists their
attrs"). Op names are the README's CamelCase words that the library loads
as ops."""

import json
import pathlib
import re

import ringflow as rf

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_op_words():
    text = (ROOT / "README.md").read_text()
    start = text.index("- **Ops**")
    end = text.index("docs/GRAPH_FORMAT.md lists their attrs", start)
    return sorted(set(re.findall(r"\b[A-Z][A-Za-z0-9]+\b", text[start:end])))


def is_op(word):
    """Whether the library has an op of that name: loading a node of it
    fails on its inputs or attrs, not with 'unknown op'."""
    node = {"name": "n", "op": word, "device": "", "inputs": [],
            "control_inputs": [], "attrs": {}}
    doc = {"format": "ringflow-graph", "version": 1, "nodes": [node]}
    try:
        rf.Graph.from_json(json.dumps(doc))
    except rf.errors.NotFoundError as e:
        assert "unknown op" in e.message
        return False
    except rf.errors.InvalidArgumentError:
        pass
    return True


def test_every_readme_op_has_a_graph_format_row():
    ops = [w for w in readme_op_words() if is_op(w)]
    assert len(ops) >= 55, ops
    doc = (ROOT / "docs" / "GRAPH_FORMAT.md").read_text()
    missing = [op for op in ops if f"| `{op}` |" not in doc]
    assert not missing, f"docs/GRAPH_FORMAT.md has no row for {missing}"

"""Hooks of the GraphQL passes of scripts/fuzz-api.sh, loaded by `hooks` in
scripts/schemathesis-graphql.toml.

Route 7's schema has one custom scalar, JSON (any JSON value: record fields,
scalar_eq, column declarations; docs/graphql.md), which schemathesis cannot
generate on its own. Its strategy writes JSON values as GraphQL literals:
nested objects and lists of strings, numbers, booleans and null, with many
object keys and values taken from the data the script writes first (the
`docs` columns, the keys and types of a column declaration), so that writes,
filters and declare_table reach the engine's real paths and not only its
invalid_record answers.
"""

import graphql
from hypothesis import strategies as st

import schemathesis
from schemathesis.graphql import nodes

# the columns of the `docs` records the script writes, and the keys and
# values of a declare_table column declaration
KNOWN_KEYS = ["title", "lang", "year", "embedding", "links", "type", "dim", "metric", "text", "scalar"]
KNOWN_STRINGS = ["solar", "en", "de", "d1", "d2", "string", "number", "bool", "vector", "edges", "json", "cosine", "dot", "l2"]

keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}\Z"))
leaves = st.one_of(
    st.none().map(lambda _: nodes.Null),
    st.booleans().map(nodes.Boolean),
    st.integers(min_value=-(2**53), max_value=2**53).map(nodes.Int),
    st.floats(allow_nan=False, allow_infinity=False).map(nodes.Float),
    st.one_of(st.sampled_from(KNOWN_STRINGS), st.text(max_size=20)).map(nodes.String),
)


def field(pair):
    name, value = pair
    return graphql.ObjectFieldNode(name=graphql.NameNode(value=name), value=value)


def objects(children):
    return st.dictionaries(keys, children, max_size=5).map(lambda d: nodes.Object([field(p) for p in d.items()]))


json_values = st.recursive(
    leaves,
    lambda children: st.one_of(st.lists(children, max_size=5).map(nodes.List), objects(children)),
    max_leaves=20,
)

schemathesis.graphql.scalar("JSON", json_values)

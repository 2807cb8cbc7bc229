"""The `schema` value of an A/B's ab.json: written by harness/judge/ab.py, recognised by harness/kinds/ab.py (and
kept out of the ladder kind, which also has no `kind` key). A module of its own so that the writer and the reader
share it without importing each other."""

AB_SCHEMA = "vlabench.ab/1"

"""The chart's documentation agrees with its schema: every key values.schema.json knows is in
values.yaml (where each is documented), and every chart value the README's Kubernetes section
or NOTES.txt names is a key of the schema. Run by check-deploy.sh with kubernetes-validate's
Python (which has PyYAML). Prints what disagrees; exits 1 if anything does."""

import json
import re
import sys

import yaml

CHART = "helm/browserpool"


def schema_paths(node, prefix=""):
    """Every key path of the schema's objects, `a`, `a.b`, ... (free-form maps end a path)."""
    for key, sub in (node.get("properties") or {}).items():
        path = f"{prefix}{key}"
        yield path
        if "$ref" in sub:
            sub = schema["definitions"][sub["$ref"].rsplit("/", 1)[1]]
        if sub.get("type") == "object" and sub.get("properties"):
            yield from schema_paths(sub, path + ".")


def has(values, path):
    for part in path.split("."):
        if not isinstance(values, dict) or part not in values:
            return False
        values = values[part]
    return True


schema = json.load(open(f"{CHART}/values.schema.json"))
values = yaml.safe_load(open(f"{CHART}/values.yaml"))
known = set(schema_paths(schema))
wrong = [f"values.yaml lacks {p} (in values.schema.json)" for p in sorted(known) if not has(values, p)]

readme = open("README.md").read()
section = readme[readme.index("## Kubernetes"):]
section = section[: section.index("\n## ", 1)]
roots = {p.split(".")[0] for p in known}
for name in sorted(set(re.findall(r"`([a-zA-Z]+(?:\.[a-zA-Z]+)+)(?:[:`= ])", section))):
    # A Secret's keys (`tls.crt`) are not values.
    if name.split(".")[0] in roots and name not in known and not re.search(r"\.(crt|key)$", name):
        wrong.append(f"README's Kubernetes section names {name}, which values.schema.json does not know")
notes = open(f"{CHART}/templates/NOTES.txt").read()
for name in sorted(set(re.findall(r"\.Values\.([a-zA-Z.]+)", notes))):
    if name not in known:
        wrong.append(f"NOTES.txt uses .Values.{name}, which values.schema.json does not know")

for line in wrong:
    print(line)
print(f"{len(known)} schema keys, all in values.yaml; README and NOTES.txt name only those" if not wrong else "")
sys.exit(1 if wrong else 0)

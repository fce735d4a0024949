#!/usr/bin/env bash
# The test control plane's binaries, built from pinned Go modules (tools/kube/*/go.mod + go.sum):
#   kube-apiserver  k8s.io/kubernetes (staging modules pinned by replace lines)
#   etcd            go.etcd.io/etcd/server/v3
#   kwok            sigs.k8s.io/kwok (makes nodes Ready and bound pods Running, no kubelet),
#                   with its default stages (kwok-stages.yaml) from the same module
#   helm            helm.sh/helm/v3
# into a cache outside the repo keyed by those versions, so a second run finds them at once.
#
#   scripts/kube-stack.sh build   build what is missing (a lock serialises concurrent builds);
#                                 prints the binary directory on the last line
#   scripts/kube-stack.sh dir     print the binary directory (nothing is built)
#
# The stack itself (etcd + kube-apiserver + kwok on loopback ports) is started by the pytest
# fixture in tests/kubernetes/stack.py, or by hand: .venv/bin/python -m tests.kubernetes.stack
# Cache root: TESSERA_KUBE_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/tessera/kube.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=tools/kube

version() {  # version MODULE_DIR MODULE_PATH: the pinned version from that tool's go.mod
  awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$tools/$1/go.mod"
}

K8S=$(version apiserver k8s.io/kubernetes)
ETCD=$(version etcd go.etcd.io/etcd/server/v3)
KWOK=$(version kwok sigs.k8s.io/kwok)
HELM=$(version helm helm.sh/helm/v3)
[ -n "$K8S" ] && [ -n "$ETCD" ] && [ -n "$KWOK" ] && [ -n "$HELM" ] || {
  echo "kube-stack: cannot read the pinned versions from $tools/*/go.mod" >&2
  exit 2
}
# The go.sum files are part of the key: a change of any dependency rebuilds.
sums=$(cat "$tools"/*/go.mod "$tools"/*/go.sum | sha256sum | cut -c1-12)
root=${TESSERA_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/kube}
dir="$root/k8s-$K8S-etcd-$ETCD-kwok-$KWOK-helm-$HELM-$sums"

# build NAME MODULE_DIR PACKAGE [LDFLAGS]: go build into $dir/NAME unless it is there
build() {
  local name=$1 module=$2 package=$3 ldflags=${4:-}
  [ -x "$dir/$name" ] && return 0
  local started
  started=$(date +%s)
  echo "kube-stack: building $name ($package) ..." >&2
  (cd "$tools/$module" && go build -mod=readonly -trimpath \
    -ldflags "-s -w $ldflags" -o "$dir/$name.tmp" "$package")
  mv "$dir/$name.tmp" "$dir/$name"
  echo "kube-stack: built $name in $(( $(date +%s) - started ))s" >&2
}

# KWOK's default stages (what kwokctl gives it): nodes become Ready and keep a heartbeat, bound pods
# Running, finished pods Succeeded/Failed, deleted pods go. Taken from the pinned module's source.
stages() {
  [ -s "$dir/kwok-stages.yaml" ] && return 0
  local src
  src=$(cd "$tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  for stage in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready \
    pod/fast/pod-complete pod/fast/pod-delete; do
    echo "---"
    cat "$src/kustomize/stage/$stage.yaml"
  done >"$dir/kwok-stages.yaml.tmp"
  mv "$dir/kwok-stages.yaml.tmp" "$dir/kwok-stages.yaml"
}

case "${1:-}" in
  dir)
    echo "$dir"
    ;;
  build)
    # Go's own install location, for shells whose PATH lacks it
    command -v go >/dev/null 2>&1 || [ ! -x /usr/local/go/bin/go ] || PATH="$PATH:/usr/local/go/bin"
    command -v go >/dev/null 2>&1 || { echo "kube-stack: no Go toolchain on PATH" >&2; exit 3; }
    mkdir -p "$dir"
    exec 9>"$dir/.lock"
    flock 9
    started=$(date +%s)
    minor=${K8S#v1.}; minor=${minor%%.*}
    build kube-apiserver apiserver k8s.io/kubernetes/cmd/kube-apiserver \
      "-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
    build etcd etcd go.etcd.io/etcd/server/v3
    build kwok kwok sigs.k8s.io/kwok/cmd/kwok
    stages
    build helm helm helm.sh/helm/v3/cmd/helm \
      "-X helm.sh/helm/v3/internal/version.version=$HELM"
    echo "kube-stack: binaries ready in $(( $(date +%s) - started ))s" >&2
    echo "$dir"
    ;;
  *)
    echo "usage: $0 build|dir" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, for the test suite and for trying the chart.
#
#   cluster.sh build    install the Debian packages (containerd, runc, CNI plugins, socat, iptables,
#                       conntrack) if missing; build etcd, kube-apiserver, the node binaries and
#                       CoreDNS (kube-tools.sh), MinIO (services.sh) and the pause, CoreDNS, kubectl
#                       and MinIO images (kube-node/images.py)
#   cluster.sh start    start the cluster (needs root); prints KEY=VALUE lines (KUBECONFIG, ...)
#   cluster.sh stop     stop everything it started: pods, containerd shims, daemons, mounts,
#                       cgroups, the network namespace; idempotent (also cleans a crashed run)
#   cluster.sh status   exit 0 if the cluster is running (the node is Ready), else 1
#   cluster.sh import ARCHIVE...   load docker-archive image tarballs into the node's containerd
#   cluster.sh tag IMAGE NAME      give an image of the node's containerd another name (a registry's)
#   cluster.sh env      print the KEY=VALUE lines of the running cluster
#
# Layout (one cluster per machine; state in $ICEBERGSYNC_CLUSTER_DIR, default
# /tmp/icebergsync-cluster, removed by stop):
#   host, 127.0.0.1 only    etcd :16379, kube-apiserver :16443, kube-controller-manager,
#                           kube-scheduler, a socat relay from a unix socket to the API server
#   netns icebergsync-node  containerd, kubelet, kube-proxy (iptables), a socat relay that serves
#                           the API server on :16443 (pods reach it as the `kubernetes` Service);
#                           the CNI bridge isync0 with the pod network 10.214.0.0/24
#   veth isync-host 10.213.0.1 <-> isync-node 10.213.0.2 (the node IP); the host routes the pod
#   and Service networks to the node so tests can reach Services; the netns has no default
#   route, so nothing is routed off the machine.
# Every daemon runs under `timeout` (ICEBERGSYNC_CLUSTER_MAX_LIFETIME seconds, default 7200).
# Images are imported into containerd from docker-archive tarballs (no registry): pause, CoreDNS,
# kubectl and MinIO at start, anything else with `cluster.sh import` (pods use imagePullPolicy: Never).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

INFRA_DIR="$REPO_ROOT/scripts/infra"
CLUSTER_DIR="${ICEBERGSYNC_CLUSTER_DIR:-/tmp/icebergsync-cluster}"
LIFETIME="${ICEBERGSYNC_CLUSTER_MAX_LIFETIME:-7200}"
IMAGES_DIR="$ICEBERGSYNC_CACHE/cluster-images"
NETNS=icebergsync-node
NODE_NAME=icebergsync-node
HOST_VETH=isync-host
NODE_VETH=isync-node
HOST_IP=10.213.0.1
NODE_IP=10.213.0.2
POD_CIDR=10.214.0.0/24
SERVICE_CIDR=10.96.0.0/24
API_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
ETCD_PORT=16379
ETCD_PEER_PORT=16380
API_PORT=16443
CNI_BIN_DIR=/usr/lib/cni
PAUSE_IMAGE=icebergsync.local/pause:3.10
COREDNS_IMAGE=icebergsync.local/coredns:v1.14.7
KUBECTL_IMAGE=icebergsync.local/kubectl:v1.35.4
MINIO_IMAGE=icebergsync.local/minio:test
DEBIAN_PACKAGES=(containerd runc containernetworking-plugins socat iptables conntrack)

run_dir="$CLUSTER_DIR/run"
pki="$CLUSTER_DIR/pki"
logs="$CLUSTER_DIR/logs"
containerd_sock="$run_dir/containerd.sock"
api_sock="$run_dir/apiserver.sock"

die() { log "cluster.sh: $*"; exit 1; }
in_node() { nsenter --net="/run/netns/$NETNS" "$@"; }
ctr_k8s() { in_node ctr --address "$containerd_sock" --namespace k8s.io "$@"; }
kubectl_() { "$ICEBERGSYNC_CACHE/bin/kubectl" --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }

tools_env() { bash "$INFRA_DIR/kube-tools.sh" --env etcd kube-apiserver kube-node coredns; }
TOOLS=""   # tools_env output, set by start
tool() { sed -n "s/^$1=//p" <<<"$TOOLS"; }

# ---------------------------------------------------------------------------------------- build

ensure_packages() {
  local missing=() p
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  [[ $EUID -eq 0 ]] || die "Debian packages missing (${missing[*]}); install them as root: apt-get install ${missing[*]}"
  log "installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=900 \
    --no-install-recommends "${missing[@]}" >&2 \
    || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
           -o DPkg::Lock::Timeout=900 --no-install-recommends "${missing[@]}" >&2; } \
    || die "apt-get install ${missing[*]} failed"
}

build() {
  ensure_packages
  TOOLS="$(tools_env)"
  bash "$INFRA_DIR/services.sh" minio rest
  python3 "$INFRA_DIR/kube-node/images.py" cluster-images --out "$IMAGES_DIR" \
    --kubernetes-module "$(tool KUBERNETES_MODULE_DIR)" --pause-image "$PAUSE_IMAGE" \
    --coredns-image "$COREDNS_IMAGE" --coredns-bin "$(tool COREDNS_BIN)" \
    --kubectl-image "$KUBECTL_IMAGE" --kubectl-bin "$(tool KUBECTL_BIN)" \
    --minio-image "$MINIO_IMAGE" --minio-bin "$ICEBERGSYNC_CACHE/bin/minio"
}

# ---------------------------------------------------------------------------------------- start

# spawn NAME [--node] CMD...: start a daemon in its own session under `timeout`, log to
# $logs/NAME.log, pid in $run_dir/NAME.pid (the pid of `timeout`, which is the group leader).
spawn() {
  local name="$1"; shift
  local prefix=()
  if [[ "$1" == --node ]]; then prefix=(nsenter --net="/run/netns/$NETNS"); shift; fi
  setsid "${prefix[@]}" timeout --kill-after=15 "$LIFETIME" "$@" \
    </dev/null >>"$logs/$name.log" 2>&1 &
  echo $! >"$run_dir/$name.pid"
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds; fail with the daemons' log tails.
wait_for() {
  local what="$1" seconds="$2"; shift 2
  local deadline=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    local f
    for f in "$run_dir"/*.pid; do
      kill -0 "$(cat "$f")" 2>/dev/null && continue
      die "$(basename "$f" .pid) exited while waiting for $what; last lines of its log:
$(tail -n 30 "$logs/$(basename "$f" .pid).log")"
    done
    if (( $(date +%s) > deadline )); then
      local tails="" l
      for l in "$logs"/*.log; do tails+=$'\n'"--- $l"$'\n'"$(tail -n 15 "$l")"; done
      die "timed out after ${seconds}s waiting for $what$tails"
    fi
    sleep 1
  done
}

make_pki() {
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -key ca.key -sha256 -days 2 -subj /CN=icebergsync-cluster-ca -out ca.crt
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" \
      "subjectAltName=IP:127.0.0.1,IP:$NODE_IP,IP:$API_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      >serving.ext
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" >client.ext
    local name subj ext
    while read -r name subj ext; do
      openssl genrsa -out "$name.key" 2048 2>/dev/null
      openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr"
      openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -sha256 \
        -extfile "$ext" -out "$name.crt" 2>/dev/null
    done <<EOF
apiserver /CN=kube-apiserver serving.ext
admin /O=system:masters/CN=icebergsync-admin client.ext
node /O=system:nodes/CN=system:node:$NODE_NAME client.ext
controller-manager /CN=system:kube-controller-manager client.ext
scheduler /CN=system:kube-scheduler client.ext
proxy /CN=system:kube-proxy client.ext
EOF
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

# kubeconfig FILE SERVER CERT_NAME
write_kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: icebergsync
  cluster: {server: "$2", certificate-authority: "$pki/ca.crt"}
users:
- name: $3
  user: {client-certificate: "$pki/$3.crt", client-key: "$pki/$3.key"}
contexts:
- name: icebergsync
  context: {cluster: icebergsync, user: $3, namespace: default}
current-context: icebergsync
EOF
  chmod 600 "$1"
}

setup_network() {
  ip netns add "$NETNS"
  ip link add "$HOST_VETH" type veth peer name "$NODE_VETH"
  ip link set "$NODE_VETH" netns "$NETNS"
  ip addr add "$HOST_IP/30" dev "$HOST_VETH"
  ip link set "$HOST_VETH" up
  in_node ip link set lo up
  in_node ip addr add "$NODE_IP/30" dev "$NODE_VETH"
  in_node ip link set "$NODE_VETH" up
  in_node sysctl -qw net.ipv4.ip_forward=1
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  # The host reaches Services and pods through the node (tests read tables on MinIO pods).
  ip route add "$POD_CIDR" via "$NODE_IP" dev "$HOST_VETH"
  ip route add "$SERVICE_CIDR" via "$NODE_IP" dev "$HOST_VETH"
}

write_configs() {
  mkdir -p "$CLUSTER_DIR/cni" "$CLUSTER_DIR/containerd"
  cat >"$CLUSTER_DIR/cni/10-icebergsync.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "icebergsync",
  "plugins": [
    {"type": "bridge", "bridge": "isync0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$CLUSTER_DIR/cni-ipam",
              "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # containerd 1.6: no CAP_SYS_RESOURCE here, so the CRI must not raise oom_score_adj; network
  # namespaces of pods live under its state dir (removed by stop), not in /run/netns.
  cat >"$CLUSTER_DIR/containerd/config.toml" <<EOF
version = 2
root = "$CLUSTER_DIR/containerd/root"
state = "$CLUSTER_DIR/containerd/state"
[grpc]
  address = "$containerd_sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CLUSTER_DIR/cni"
EOF
  : >"$CLUSTER_DIR/resolv.conf"   # pods get cluster DNS only; nothing resolves off the machine
  cat >"$CLUSTER_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$pki/apiserver.crt"
tlsPrivateKeyFile: "$pki/apiserver.key"
containerRuntimeEndpoint: unix://$containerd_sock
cgroupDriver: cgroupfs
cgroupRoot: /icebergsync
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_SERVICE_IP]
clusterDomain: cluster.local
resolvConf: "$CLUSTER_DIR/resolv.conf"
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
protectKernelDefaults: false
makeIPTablesUtilChains: false
rotateCertificates: false
EOF
  cat >"$CLUSTER_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection: {kubeconfig: "$CLUSTER_DIR/kubeconfig-proxy"}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

start_control_plane() {
  spawn etcd "$(tool ETCD_BIN)" --name=icebergsync-cluster --data-dir="$CLUSTER_DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="icebergsync-cluster=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state=new \
    --unsafe-no-fsync --log-level=warn
  wait_for "etcd" 120 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
  spawn kube-apiserver "$(tool KUBE_APISERVER_BIN)" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address="$NODE_IP" --secure-port="$API_PORT" \
    --cert-dir="$pki" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --kubelet-client-certificate="$pki/admin.crt" \
    --kubelet-client-key="$pki/admin.key" --kubelet-preferred-address-types=InternalIP \
    --authorization-mode=Node,RBAC --anonymous-auth=false \
    --enable-admission-plugins=NodeRestriction --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --allow-privileged=true --profiling=false --v=1
  wait_for "kube-apiserver /readyz" 180 kubectl_ get --raw /readyz
  spawn apiserver-relay-host socat "UNIX-LISTEN:$api_sock,fork,unlink-early,mode=600" "TCP:127.0.0.1:$API_PORT"
  spawn kube-controller-manager "$(tool KUBE_CONTROLLER_MANAGER_BIN)" \
    --kubeconfig="$CLUSTER_DIR/kubeconfig-controller-manager" \
    --authentication-kubeconfig="$CLUSTER_DIR/kubeconfig-controller-manager" \
    --authorization-kubeconfig="$CLUSTER_DIR/kubeconfig-controller-manager" \
    --bind-address=127.0.0.1 --secure-port=0 --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --leader-elect=false --v=1
  spawn kube-scheduler "$(tool KUBE_SCHEDULER_BIN)" --kubeconfig="$CLUSTER_DIR/kubeconfig-scheduler" \
    --authentication-kubeconfig="$CLUSTER_DIR/kubeconfig-scheduler" \
    --authorization-kubeconfig="$CLUSTER_DIR/kubeconfig-scheduler" \
    --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false --v=1
}

import_images() {
  local image
  for image in "$@"; do
    [[ -s "$image" ]] || die "image archive $image is missing (run: cluster.sh build)"
    ctr_k8s images import "$image" >/dev/null 2>"$logs/import.log" \
      || die "importing $image into containerd failed: $(tail -n 20 "$logs/import.log")"
  done
}

# The kubelet's cgroupRoot must exist in every hierarchy (cgroup v1); cpuset needs its cpus/mems.
make_pod_cgroup_root() {
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    mkdir -p "$hierarchy/icebergsync"
  done
  if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/icebergsync/cpuset.cpus
    cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/icebergsync/cpuset.mems
  fi
}

start_node() {
  make_pod_cgroup_root
  spawn apiserver-relay-node --node socat "TCP-LISTEN:$API_PORT,fork,reuseaddr" "UNIX-CONNECT:$api_sock"
  spawn containerd --node containerd --config "$CLUSTER_DIR/containerd/config.toml" --log-level warn
  wait_for "containerd" 60 ctr_k8s version
  import_images "$IMAGES_DIR/pause.tar" "$IMAGES_DIR/coredns.tar" "$IMAGES_DIR/kubectl.tar" "$IMAGES_DIR/minio.tar"
  spawn kubelet --node "$(tool KUBELET_BIN)" --config="$CLUSTER_DIR/kubelet.yaml" \
    --kubeconfig="$CLUSTER_DIR/kubeconfig-node" --root-dir="$CLUSTER_DIR/kubelet" \
    --cert-dir="$CLUSTER_DIR/kubelet-pki" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME" --v=1
  spawn kube-proxy --node "$(tool KUBE_PROXY_BIN)" --config="$CLUSTER_DIR/kube-proxy.yaml" --v=1
  wait_for "node $NODE_NAME to be Ready" 180 \
    kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s
}

start_coredns() {
  sed -e "s|@IMAGE@|$COREDNS_IMAGE|" -e "s|@DNS_SERVICE_IP@|$DNS_SERVICE_IP|" \
    "$INFRA_DIR/kube-node/coredns.yaml" | kubectl_ apply -f - >/dev/null
  wait_for "CoreDNS to be available" 180 \
    kubectl_ -n kube-system wait --for=condition=Available deployment/coredns --timeout=5s
}

print_env() {
  cat <<EOF
CLUSTER_DIR=$CLUSTER_DIR
KUBECONFIG=$CLUSTER_DIR/kubeconfig
KUBECTL=$ICEBERGSYNC_CACHE/bin/kubectl
KUBECTL_IMAGE=$KUBECTL_IMAGE
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
NETNS=$NETNS
CONTAINERD_ADDRESS=$containerd_sock
API_SERVER=https://127.0.0.1:$API_PORT
EOF
}

start() {
  [[ $EUID -eq 0 ]] || die "starting the cluster needs root (network namespace, containerd, kubelet)"
  [[ -e "/run/netns/$NETNS" ]] && die "a cluster is already running (netns $NETNS exists); run: cluster.sh stop"
  TOOLS="$(tools_env)"
  rm -rf "$CLUSTER_DIR"
  mkdir -p "$run_dir" "$logs"
  make_pki
  write_kubeconfig "$CLUSTER_DIR/kubeconfig" "https://127.0.0.1:$API_PORT" admin
  write_kubeconfig "$CLUSTER_DIR/kubeconfig-controller-manager" "https://127.0.0.1:$API_PORT" controller-manager
  write_kubeconfig "$CLUSTER_DIR/kubeconfig-scheduler" "https://127.0.0.1:$API_PORT" scheduler
  write_kubeconfig "$CLUSTER_DIR/kubeconfig-node" "https://127.0.0.1:$API_PORT" node
  write_kubeconfig "$CLUSTER_DIR/kubeconfig-proxy" "https://127.0.0.1:$API_PORT" proxy
  setup_network
  write_configs
  start_control_plane
  start_node
  start_coredns
  print_env
}

# ----------------------------------------------------------------------------------------- stop

kill_pidfile() { # pidfile: SIGTERM the daemon's process group, SIGKILL after 15 s
  local pid; pid="$(cat "$1" 2>/dev/null)" || return 0
  kill -TERM -- "-$pid" 2>/dev/null || return 0
  local i
  for i in $(seq 30); do kill -0 -- "-$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
}

# Kill every process in the pod cgroups (containers, shims live outside them) and remove them.
kill_pod_cgroups() {
  local dirs d round
  for round in 1 2 3; do
    dirs="$(find /sys/fs/cgroup/*/icebergsync -depth -type d 2>/dev/null || true)"
    [[ -n "$dirs" ]] || return 0
    while read -r d; do
      xargs -r kill -KILL 2>/dev/null <"$d/cgroup.procs" || true
    done <<<"$dirs"
    sleep 1
    while read -r d; do rmdir "$d" 2>/dev/null || true; done <<<"$dirs"
  done
}

kill_shims() { # containerd shims started for this cluster (they outlive containerd)
  local pid
  for pid in $(pgrep -f "containerd-shim.*-address $containerd_sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
}

unmount_under() { # every mount point below $1, deepest first
  local m
  for m in $(awk -v p="$1/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
}

stop() {
  [[ $EUID -eq 0 ]] || die "stopping the cluster needs root"
  local name
  # Pods first (kubelet would restart them), then the node, then the control plane.
  for name in kubelet kube-proxy; do kill_pidfile "$run_dir/$name.pid"; done
  if [[ -S "$containerd_sock" && -e "/run/netns/$NETNS" ]]; then
    local task
    for task in $(ctr_k8s tasks ls -q 2>/dev/null || true); do
      ctr_k8s tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
  fi
  kill_pod_cgroups
  for name in containerd apiserver-relay-node kube-scheduler kube-controller-manager \
      apiserver-relay-host kube-apiserver etcd; do
    kill_pidfile "$run_dir/$name.pid"
  done
  kill_shims
  kill_pod_cgroups
  unmount_under "$CLUSTER_DIR"
  ip route del "$POD_CIDR" 2>/dev/null || true
  ip route del "$SERVICE_CIDR" 2>/dev/null || true
  ip link del "$HOST_VETH" 2>/dev/null || true
  [[ -e "/run/netns/$NETNS" ]] && ip netns del "$NETNS"
  rm -rf "$CLUSTER_DIR"
}

status() {
  [[ -e "/run/netns/$NETNS" && -s "$CLUSTER_DIR/kubeconfig" ]] || return 1
  kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=10s >/dev/null
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) status && print_env ;;
  import) shift; status || die "no cluster is running"; import_images "$@" ;;
  tag) shift; status || die "no cluster is running"; ctr_k8s images tag --force "$1" "$2" >/dev/null ;;
  -h|--help|"") sed -n '2,29p' "${BASH_SOURCE[0]}"; [[ -n "${1:-}" ]] ;;
  *) die "unknown command '$1' (build|start|stop|status|env|import|tag)" ;;
esac

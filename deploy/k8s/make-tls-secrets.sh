#!/usr/bin/env bash
# Makes the Secrets the manifests mount for mutual TLS between the services (docs/security.md):
# one CA and one certificate per role (spiffe://glimpse/<role>/*, DNS glimpse.internal), each
# Secret glimpse-tls-<role> holding tls.pem, tls.key and ca.pem; and etcd's (glimpse-tls-etcd,
# glimpse-etcd-client for the coordinators, glimpse-etcd-node for the cache nodes and workers,
# which announce and watch the live cache nodes there). DIR keeps the CA (reused on the
# next run, so certificates can be renewed without restarting every pod at once) and an operator
# certificate (admin-operator.pem) for tools that call internal services; keep it private.
#
#   GLIMPSE_NAMESPACE=glimpse deploy/k8s/make-tls-secrets.sh DIR [kubectl flags, e.g. -n glimpse]
# GLIMPSE names the glimpse CLI (default: glimpse on PATH).
set -euo pipefail
dir="${1:?usage: make-tls-secrets.sh DIR [kubectl flags]}"
shift
"${GLIMPSE:-glimpse}" certs --dir "$dir" --dns glimpse.internal
# etcd has a CA of its own (DIR/etcd): only its members, the coordinators and the nodes hold
# certificates it signed, so no other pod (the frontends) can reach the cluster's state or join as
# a member. A member
# checks a peer's certificate against the peer's address, which resolves to
# glimpse-etcd-N.glimpse-etcd.<namespace>.svc.<cluster domain>: set GLIMPSE_NAMESPACE (default
# "default") and GLIMPSE_CLUSTER_DOMAIN (default "cluster.local") to where the manifests go.
ns="${GLIMPSE_NAMESPACE:-default}"
domain="${GLIMPSE_CLUSTER_DOMAIN:-cluster.local}"
"${GLIMPSE:-glimpse}" certs --dir "$dir/etcd" --members 'etcd/*' \
  --dns "*.glimpse-etcd,*.glimpse-etcd.$ns.svc,*.glimpse-etcd.$ns.svc.$domain"
# Its clients' certificates, from the same CA without the members' names (a client's certificate
# must not pass for a member's).
"${GLIMPSE:-glimpse}" certs --dir "$dir/etcd" --members 'coordinator/*,node/*'
kubectl_flags=("$@")
secret() {  # NAME PEM KEY CA
  kubectl create secret generic "$1" ${kubectl_flags[@]+"${kubectl_flags[@]}"} \
    --from-file=tls.pem="$2" --from-file=tls.key="$3" --from-file=ca.pem="$4" \
    --dry-run=client -o yaml | kubectl apply ${kubectl_flags[@]+"${kubectl_flags[@]}"} -f -
}
for role in coordinator cache decode prefill frontend; do
  secret "glimpse-tls-$role" "$dir/$role.pem" "$dir/$role.key" "$dir/ca.pem"
done
secret glimpse-tls-etcd "$dir/etcd/etcd.pem" "$dir/etcd/etcd.key" "$dir/etcd/ca.pem"
secret glimpse-etcd-client "$dir/etcd/coordinator.pem" "$dir/etcd/coordinator.key" \
  "$dir/etcd/ca.pem"
secret glimpse-etcd-node "$dir/etcd/node.pem" "$dir/etcd/node.key" "$dir/etcd/ca.pem"

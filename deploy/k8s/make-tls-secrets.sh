#!/usr/bin/env bash
# Makes the Secrets the manifests mount for mutual TLS between the services (docs/security.md):
# one CA and one certificate per role (spiffe://glimpse/<role>/*, DNS glimpse.internal), each
# Secret glimpse-tls-<role> holding tls.pem, tls.key and ca.pem. DIR keeps the CA (reused on the
# next run, so certificates can be renewed without restarting every pod at once) and an operator
# certificate (admin-operator.pem) for tools that call internal services; keep it private.
#
#   deploy/k8s/make-tls-secrets.sh DIR [kubectl flags, e.g. -n glimpse]
# GLIMPSE names the glimpse CLI (default: glimpse on PATH).
set -euo pipefail
dir="${1:?usage: make-tls-secrets.sh DIR [kubectl flags]}"
shift
"${GLIMPSE:-glimpse}" certs --dir "$dir" --dns glimpse.internal
for role in coordinator cache decode prefill frontend; do
  kubectl create secret generic "glimpse-tls-$role" "$@" \
    --from-file=tls.pem="$dir/$role.pem" --from-file=tls.key="$dir/$role.key" \
    --from-file=ca.pem="$dir/ca.pem" --dry-run=client -o yaml | kubectl apply "$@" -f -
done

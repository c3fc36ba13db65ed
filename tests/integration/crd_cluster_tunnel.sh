#!/usr/bin/env bash
# tests/integration/crd_cluster_tunnel.sh - crd_cluster.sh (three nodes, no
# etcd, the ipcache from CiliumEndpoint objects, cross-node policy by
# label) in routing-mode tunnel.
CRD_ROUTING=tunnel
. "$top_srcdir/tests/integration/crd_cluster.sh"

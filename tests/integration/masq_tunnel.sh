#!/usr/bin/env bash
# tests/integration/masq_tunnel.sh - tests/integration/masq.sh in routing
# mode tunnel: the same promises (every pod reaches the world's TCP, UDP
# and ICMP server as its node's address; the non-masquerade set and the
# other nodes' pods see the pod's own address) with the pod CIDRs behind
# VXLAN.
MASQ_MODE=tunnel
. "$top_srcdir/tests/integration/masq.sh"

#!/usr/bin/env bash
# tests/integration/egress_gateway_tunnel.sh - tests/integration/egress_gateway.sh
# in routing mode tunnel: the same promises (a selected pod leaves with its
# gateway's egress IP, sent to the gateway in VXLAN with its own addresses;
# others leave through their own node; a dead gateway's flows move to the
# live one within the bound, never leaked) with the pod CIDRs behind VXLAN.
EGW_MODE=tunnel
. "$top_srcdir/tests/integration/egress_gateway.sh"

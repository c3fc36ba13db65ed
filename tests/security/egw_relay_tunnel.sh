#!/usr/bin/env bash
# tests/security/egw_relay_tunnel.sh - tests/security/egw_relay.sh in
# routing mode tunnel. The attack: forged packets with a selected pod's
# source address sent to the egress gateway from the underlay, from another
# node in plain frames and from another (known) node in VXLAN with the
# pod's identity as the VNI. The promise: only what the pod's own node
# tunnelled is SNATed to the egress IP; the rest is dropped
# (drop:egress-gateway-relay) and never reaches the world.
EGW_MODE=tunnel
. "$top_srcdir/tests/security/egw_relay.sh"

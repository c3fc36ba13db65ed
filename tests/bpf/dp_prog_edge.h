/* tests/bpf/dp_prog_edge.h - BPF_PROG_RUN cases of the datapath's edges
 * (issue 22), included once by dp_prog_test.c after its helpers (frames,
 * maps, run()): a later IPv6 fragment is not walked as headers, the FIB's
 * tot_len is the L3 length (GSO: the device's check), fibril_from_netdev
 * drops what claims this node's or a local pod's address, and ICMPv6 of
 * the ND / MLD types is ND / MLD only when it stays on the link.
 * Kept apart so dp_prog_test.c does not grow further. */
#ifndef FIBRIL_TESTS_BPF_DP_PROG_EDGE_H
#define FIBRIL_TESTS_BPF_DP_PROG_EDGE_H

/* An IPv6 fragment header: next header, offset in 8-byte units, M flag. */
static void frag6(struct frame *f, uint8_t next, uint16_t offset8, bool more, uint32_t id)
{
	put_u8(f, next);
	put_u8(f, 0);
	put_be16(f, (uint16_t)(offset8 << 3 | (more ? 1 : 0)));
	put_be32(f, id);
}

/* A later fragment (offset 8) whose fragment header names a destination
 * options header: its data is not headers. Read as headers, the data
 * below (length 255 units) points past the packet: malformed. */
static void later_fragment6(struct frame *f, const uint8_t *src_mac, const char *src,
			    const char *dst)
{
	eth(f, src_mac, 0x86dd);
	ipv6(f, src, dst, 44 /* FRAGMENT */, 8 + 16);
	frag6(f, 60 /* DSTOPTS */, 1, false, 0x5151);
	put_u8(f, 60);
	put_u8(f, 0xff);
	put_zero(f, 14);
}

static void test_ipv6_later_fragment_walk(void)
{
	struct frame f;
	reset();
	uint64_t inv0 = metric(DP_REASON_DROP_INVALID, DP_DIR_TO_ENDPOINT);
	later_fragment6(&f, HOST_MAC, FAR6, POD6);
	int rc = run(g_to, &f);
	check(rc == TC_ACT_OK && metric(DP_REASON_DROP_INVALID, DP_DIR_TO_ENDPOINT) == inv0,
	      "later IPv6 fragment: its data is not walked as extension headers, to-endpoint "
	      "delivers it (verdict %d)", rc);
	/* from the pod: its protocol is the fragment header's next header
	 * (no ports to carry), which the policy judges like any other */
	inv0 = metric(DP_REASON_DROP_INVALID, DP_DIR_FROM_ENDPOINT);
	later_fragment6(&f, POD_MAC, POD6, FAR6);
	rc = run(g_from, &f);
	check(rc == TC_ACT_OK && metric(DP_REASON_DROP_INVALID, DP_DIR_FROM_ENDPOINT) == inv0,
	      "later IPv6 fragment from the pod: not malformed, to the stack (verdict %d)", rc);
	reset(); /* no flow either way in conntrack (the one above would be its reply) */
	enforce(10, false, true);
	uint64_t pol0 = metric(DP_REASON_DROP_POLICY, DP_DIR_FROM_ENDPOINT);
	later_fragment6(&f, POD_MAC, POD6, FAR6);
	rc = run(g_from, &f);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_POLICY, DP_DIR_FROM_ENDPOINT) == pol0 + 1,
	      "  and judged by the pod's egress policy (deny-all drops it: %d)", rc);
	enforce(10, false, false);
	/* a first fragment with UDP, then its later one: the later one's
	 * walk stops at the fragment header and it takes the first's ports */
	eth(&f, POD_MAC, 0x86dd);
	ipv6(&f, POD6, FAR6, 44, 8 + 8 + 8);
	frag6(&f, 17, 0, true, 0x5252);
	udp(&f, 3333, 4444, 16);
	put_zero(&f, 8);
	check(run(g_from, &f) == TC_ACT_OK, "first IPv6 fragment (UDP) goes to the stack");
	eth(&f, POD_MAC, 0x86dd);
	ipv6(&f, POD6, FAR6, 44, 8 + 16);
	frag6(&f, 17, 2, false, 0x5252);
	put_u8(&f, 0); /* data, whatever it looks like */
	put_u8(&f, 0xff);
	put_zero(&f, 14);
	struct dp_ct_value v = {0};
	rc = run(g_from, &f);
	check(rc == TC_ACT_OK && ct_get(g_skel->maps.dp_ct_any, 6, POD6, FAR6, 3333, 4444, 17, &v) &&
		      v.packets == 2,
	      "its later fragment counts in the same UDP flow (verdict %d, %llu packets)", rc,
	      (unsigned long long)v.packets);
}

/* ---- bpf_fib_lookup's tot_len ---------------------------------------------------------
 * A veth of MTU 300 in the test's netns and a route through it: the FIB
 * forwards 10.77.0.0/24 out of it. */
static bool g_fib_dev;

static void fib_dev_setup(void)
{
	if (g_fib_dev)
		return;
	FILE *fw = fopen("/proc/sys/net/ipv4/ip_forward", "w");
	if (fw) {
		fputs("1\n", fw);
		fclose(fw);
	}
	g_fib_dev = system("ip link add fbt0 mtu 300 type veth peer name fbt1 mtu 300 && "
			   "ip link set fbt1 up && ip link set fbt0 up && "
			   "ip addr add 10.77.1.1/24 dev fbt0 && "
			   "ip route add 10.77.0.0/24 dev fbt0") == 0;
}

/* A UDP frame from the pod to 10.77.0.9 whose L3 length is l3 */
static void udp_frame(struct frame *f, uint16_t l3)
{
	eth(f, POD_MAC, 0x0800);
	ipv4(f, POD4, "10.77.0.9", 17, (uint16_t)(l3 - 20), 9, 0);
	udp(f, 5000, 6000, (uint16_t)(l3 - 20));
	put_zero(f, (size_t)l3 - 28);
}

static int run_gso(int prog, struct frame *f, uint32_t gso_size, uint32_t gso_segs)
{
	struct __sk_buff ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.gso_size = gso_size;
	ctx.gso_segs = gso_segs;
	return run_ctx(prog, f, &ctx);
}

static void test_fib_tot_len(void)
{
	fib_dev_setup();
	check(g_fib_dev, "tot_len: a veth of MTU 300 routes 10.77.0.0/24 in the test's netns");
	if (!g_fib_dev)
		return;
	policy_reset();
	put_ipcache4("10.77.0.0", 24, 4545); /* another node's pods */
	uint32_t zero = 0;
	struct dp_config c = {.flags = DP_CFG_F_HOST_ROUTING, .ct_refresh_s = 1};
	bpf_map_update_elem(map_fd(g_skel->maps.dp_config), &zero, &c, BPF_ANY);
	struct frame f;
	udp_frame(&f, 300); /* exactly the MTU: 314 bytes with Ethernet */
	int rc = run(g_from, &f);
	check(rc == TC_ACT_REDIRECT && metric(DP_REASON_TO_FIB, DP_DIR_FROM_ENDPOINT) == 1,
	      "tot_len: a packet of exactly the route's MTU (L3 300) leaves by the FIB (verdict %d)",
	      rc);
	udp_frame(&f, 301);
	uint64_t stack0 = metric(DP_REASON_TO_STACK, DP_DIR_FROM_ENDPOINT);
	rc = run(g_from, &f);
	check(rc == TC_ACT_OK && metric(DP_REASON_TO_STACK, DP_DIR_FROM_ENDPOINT) == stack0 + 1,
	      "tot_len: one byte more than the MTU goes to the stack, which fragments or "
	      "answers it (verdict %d)", rc);
	/* a GSO packet (TSO from the pod): 400 bytes of segments of 200 */
	udp_frame(&f, 400);
	rc = run_gso(g_from, &f, 200, 2);
	check(rc == TC_ACT_REDIRECT && metric(DP_REASON_TO_FIB, DP_DIR_FROM_ENDPOINT) == 2,
	      "tot_len: a GSO packet longer than the MTU (segments of 200) leaves by the FIB "
	      "(verdict %d)", rc);
	/* the forwarded mark (to-netdev passes such a packet untouched) only
	 * for a destination inside the cluster: one outside it (a CIDR
	 * identity, as 4545 here) is still to-netdev's to masquerade */
	uint32_t mark = 0;
	udp_frame(&f, 100);
	rc = run_mark_io(g_from, &f, &mark);
	check(rc == TC_ACT_REDIRECT && mark == 0,
	      "forwarded: a packet the FIB sends to a destination outside the cluster is not "
	      "marked (verdict %d, mark %#x)", rc, mark);
	struct dp_ipcache_key k = {.prefixlen = DP_IPCACHE_PREFIX_HDR + 24, .family = DP_FAMILY_IPV4};
	inet_pton(AF_INET, "10.77.0.0", k.addr);
	struct dp_ipcache_value v = {.identity = 4545, .flags = DP_IPCACHE_F_CLUSTER};
	bpf_map_update_elem(map_fd(g_skel->maps.dp_ipcache), &k, &v, BPF_ANY);
	mark = 0;
	udp_frame(&f, 100);
	rc = run_mark_io(g_from, &f, &mark);
	check(rc == TC_ACT_REDIRECT && mark == DP_MARK_MAGIC_FORWARDED,
	      "forwarded: one to another node's pod (inside the cluster) is (verdict %d, mark "
	      "%#x)", rc, mark);
	set_config(1, 0, 0);
	policy_reset();
}

/* ---- fibril_from_netdev's source check --------------------------------------------------- */

/* A UDP packet from the network (PACKET_HOST) to fibril_from_netdev. */
static int netdev_udp_run(const char *src, const char *dst, uint16_t dport)
{
	struct frame f;
	eth(&f, HOST_MAC, 0x0800);
	memset(f.b, 0, 6); /* lo's own MAC: the frame is PACKET_HOST */
	ipv4(&f, src, dst, 17, 8 + 8, 7, 0);
	udp(&f, 41000, dport, 8 + 8);
	put_zero(&f, 8);
	return run(g_netdev, &f);
}

static void test_netdev_source_check(void)
{
	policy_reset();
	drain_events();
	put_ipcache4("10.76.0.0", 24, 4343);         /* another node's pods */
	put_ipcache4("10.9.0.1", 32, DP_IDENTITY_HOST); /* the gateway */
	put_ipcache4("172.16.5.11", 32, DP_IDENTITY_HOST); /* this node's IP */
	put_ipcache4("172.16.5.12", 32, DP_IDENTITY_REMOTE_NODE);
	uint32_t zero = 0;
	struct dp_config c = {.flags = DP_CFG_F_HOST_ROUTING, .ct_refresh_s = 1};
	bpf_map_update_elem(map_fd(g_skel->maps.dp_config), &zero, &c, BPF_ANY);
	struct dp_event e;
	int rc = netdev_run(POD4B, POD4, 43000, 80, 0x02, NULL);
	bool got = last_event(&e);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV) == 1 &&
		      got && e.reason == DP_REASON_DROP_SPOOFED_NETWORK,
	      "netdev: a local pod's address as source from the network is dropped, "
	      "spoofed-from-network, with a drop event (%d)", rc);
	rc = netdev_run("172.16.5.11", POD4, 43001, 80, 0x02, NULL);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV) == 2,
	      "netdev: this node's IP (identity host) as source is dropped (%d)", rc);
	rc = netdev_run("10.9.0.1", FAR4, 43002, 80, 0x02, NULL);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV) == 3,
	      "netdev: a gateway address as source is dropped, whatever the destination (%d)", rc);
	rc = netdev_run("10.76.0.9", POD4, 43003, 80, 0x02, NULL);
	check(rc == TC_ACT_REDIRECT, "netdev: another node's pod still gets in (%d)", rc);
	rc = netdev_run("172.16.5.12", POD4, 43004, 80, 0x02, NULL);
	check(rc == TC_ACT_REDIRECT, "netdev: a remote node still gets in (%d)", rc);
	rc = netdev_run("198.51.100.7", POD4, 43005, 80, 0x02, NULL);
	check(rc == TC_ACT_REDIRECT, "netdev: the world still gets in (%d)", rc);
	rc = netdev_run("198.51.100.7", FAR4, 43006, 80, 0x02, NULL);
	check(rc == TC_ACT_UNSPEC, "netdev: what is not for a pod passes on (TC_ACT_UNSPEC: the "
				   "next filter runs) (%d)", rc);

	/* tunnel mode: the node's own VXLAN traffic goes to the stack before
	 * any check (fibril_from_overlay checks the outer source); so does
	 * the port to a local pod (the stack's: fibril_to_endpoint drops a
	 * local pod's address that did not come by its veth,
	 * test_to_endpoint_local_source_device), nothing else */
	uint64_t spoofed = metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV);
	rc = netdev_udp_run(POD4B, "172.16.5.11", 8472);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV) == spoofed + 1,
	      "netdev: without a tunnel port in dp_config, UDP 8472 from a local pod's address is "
	      "dropped as spoofed (%d)", rc);
	c.tunnel_ifindex = 77;
	c.tunnel_port = htons(8472);
	bpf_map_update_elem(map_fd(g_skel->maps.dp_config), &zero, &c, BPF_ANY);
	rc = netdev_udp_run(POD4B, "172.16.5.11", 8472);
	check(rc == TC_ACT_UNSPEC && metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV) == spoofed + 1,
	      "netdev: with the tunnel port, UDP 8472 to the node goes to the stack unchecked (the "
	      "overlay checks the outer source) (%d)", rc);
	rc = netdev_udp_run(POD4B, POD4, 8472);
	check(rc == TC_ACT_UNSPEC && metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV) == spoofed + 1,
	      "netdev: UDP 8472 to a local pod goes to the stack too, not redirected (%d)", rc);
	rc = netdev_udp_run(POD4B, "172.16.5.11", 8473);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_FROM_NETDEV) == spoofed + 2,
	      "netdev: another UDP port to the node from a local pod's address is still dropped "
	      "(%d)", rc);
	set_config(1, 0, 0);
	policy_reset();
	drain_events();
}

/* ---- from-netdev: the egress gateway's link-source mark, on a gateway only ------------------ */

static void test_netdev_relay_mark_gateway_only(void)
{
	policy_reset();
	put_ipcache4("10.76.0.0", 24, 4343); /* another node's pods */
	uint32_t zero = 0;
	struct dp_config c = {.flags = DP_CFG_F_MASQUERADE, .ct_refresh_s = 1,
			      .nat_port_min = 61000, .nat_port_max = 65535};
	bpf_map_update_elem(map_fd(g_skel->maps.dp_config), &zero, &c, BPF_ANY);
	struct frame f;
	eth(&f, HOST_MAC, 0x0800);
	memset(f.b, 0, 6);                       /* PACKET_HOST on lo */
	memcpy(f.b + 6, "\x02\x00\x00\xab\xcd\xef", 6); /* the sender's MAC */
	ipv4(&f, "10.76.0.9", FAR4, 6, 20, 7, 0);
	tcp(&f, 43100, 443, 0x02);
	struct frame g = f;
	uint32_t mark = 0;
	int rc = run_mark_io(g_netdev, &f, &mark);
	check(rc == TC_ACT_UNSPEC && mark == 0,
	      "netdev: on a node that is no egress gateway another node's pod's packet to the "
	      "world is not marked (no ipcache walk for it) (%d, mark %#x)", rc, mark);
	c.flags |= DP_CFG_F_EGW_GATEWAY;
	bpf_map_update_elem(map_fd(g_skel->maps.dp_config), &zero, &c, BPF_ANY);
	mark = 0;
	rc = run_mark_io(g_netdev, &g, &mark);
	check(rc == TC_ACT_UNSPEC &&
		      mark == ((0xabcdefu << DP_MARK_IDENTITY_SHIFT) | DP_MARK_MAGIC_LINK_SOURCE),
	      "netdev: on a gateway it carries the sender MAC's low 24 bits for to-netdev's "
	      "relay check (%d, mark %#x)", rc, mark);
	set_config(1, 0, 0);
	policy_reset();
}

/* ---- to-endpoint: a local endpoint's address from elsewhere than its veth ------------------ */

/* Run prog with skb->ingress_ifindex set: the device the packet came in by. */
static int run_iif(int prog, struct frame *f, uint32_t ingress_ifindex)
{
	struct __sk_buff ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.ingress_ifindex = ingress_ifindex;
	return run_ctx(prog, f, &ctx);
}

static int to_ep_iif_run(const char *src, uint16_t sport, uint32_t ingress_ifindex)
{
	struct frame f;
	eth(&f, HOST_MAC, 0x0800);
	ipv4(&f, src, POD4, 6, 20, 7, 0);
	tcp(&f, sport, 6379, 0x02);
	return run_iif(g_to, &f, ingress_ifindex);
}

static void test_to_endpoint_local_source_device(void)
{
	policy_reset();
	drain_events();
	enforce(10, true, false); /* POD4 lets in POD4B's identity on 6379 */
	put_policy(10, DP_POLICY_INGRESS, 300, 6, 6379, 16, false);
	uint64_t spoofed = metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_TO_ENDPOINT);
	int rc = to_ep_iif_run(POD4B, 4400, EP_IFINDEX);
	check(rc == TC_ACT_OK, "to-endpoint: the local pod's packet that came in by its own veth is "
			       "delivered (%d)", rc);
	rc = to_ep_iif_run(POD4B, 4401, 0);
	check(rc == TC_ACT_OK, "to-endpoint: one the node itself sent (no ingress device) is "
			       "delivered (%d)", rc);
	rc = to_ep_iif_run(POD4B, 4402, EP_IFINDEX + 41);
	check(rc == TC_ACT_SHOT &&
		      metric(DP_REASON_DROP_SPOOFED_NETWORK, DP_DIR_TO_ENDPOINT) == spoofed + 1,
	      "to-endpoint: the local pod's address from another device (the network through "
	      "the stack, host-routing legacy) is dropped as spoofed-from-network (%d)", rc);
	policy_reset();
	drain_events();
}

/* ---- ICMPv6 of the ND / MLD types --------------------------------------------------------- */

/* An ICMPv6 message: type, code 0, checksum 0 (not checked), 4 bytes,
 * an address (the ND target, the MLD group), 16 bytes of payload. */
static void icmp6_msg(struct frame *f, const uint8_t *src_mac, const char *src, const char *dst,
		      uint8_t type, uint8_t hop_limit, const char *addr)
{
	struct in6_addr a;
	inet_pton(AF_INET6, addr, &a);
	eth(f, src_mac, 0x86dd);
	ipv6(f, src, dst, 58, 8 + 16 + 16);
	f->b[14 + 7] = hop_limit;
	put_u8(f, type);
	put_u8(f, 0);
	put_be16(f, 0);
	put_zero(f, 4);
	put(f, &a, 16);
	put(f, "exfiltrated data", 16);
}

static void put_ipcache6(const char *addr, unsigned plen, uint32_t identity)
{
	struct dp_ipcache_key k;
	memset(&k, 0, sizeof(k));
	k.prefixlen = DP_IPCACHE_PREFIX_HDR + plen;
	k.family = DP_FAMILY_IPV6;
	inet_pton(AF_INET6, addr, k.addr);
	struct dp_ipcache_value v = {.identity = identity};
	if (bpf_map_update_elem(map_fd(g_skel->maps.dp_ipcache), &k, &v, BPF_ANY) != 0) {
		perror("dp_ipcache");
		exit(1);
	}
}

static void test_icmp6_nd_only_on_link(void)
{
	policy_reset();
	put_ipcache6("fd00:9::1", 128, DP_IDENTITY_HOST); /* the IPv6 gateway */
	enforce(10, true, true);                          /* deny-all both ways */
	struct frame f;
	uint64_t pol0 = metric(DP_REASON_DROP_POLICY, DP_DIR_FROM_ENDPOINT);
	icmp6_msg(&f, POD_MAC, POD6, FAR6, 135, 255, FAR6);
	int rc = run(g_from, &f);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_POLICY, DP_DIR_FROM_ENDPOINT) == pol0 + 1,
	      "ND: a solicitation with a payload to a global address is policy's: deny-all "
	      "egress drops it (%d)", rc);
	icmp6_msg(&f, POD_MAC, POD6, FAR6, 131, 1, "ff0e::1");
	rc = run(g_from, &f);
	check(rc == TC_ACT_SHOT, "MLD: a report to a global unicast address (hop limit 1) is "
				 "dropped by deny-all egress (%d)", rc);
	icmp6_msg(&f, POD_MAC, POD6, "ff02::16", 143, 64, "ff02::16");
	rc = run(g_from, &f);
	check(rc == TC_ACT_SHOT, "MLD: a report with hop limit 64 is not MLD (%d)", rc);
	icmp6_msg(&f, POD_MAC, POD6, "ff02::1:ff00:7", 135, 64, FAR6);
	rc = run(g_from, &f);
	check(rc == TC_ACT_SHOT, "ND: a solicitation with hop limit 64 is not ND (%d)", rc);
	/* genuine: to the stack under deny-all */
	uint64_t st0 = metric(DP_REASON_TO_STACK, DP_DIR_FROM_ENDPOINT);
	icmp6_msg(&f, POD_MAC, POD6, "ff02::1:ff00:7", 135, 255, "fd00:9::7");
	rc = run(g_from, &f);
	icmp6_msg(&f, POD_MAC, "::", "ff02::1:ff00:10", 135, 255, POD6); /* DAD */
	int rc2 = run(g_from, &f);
	icmp6_msg(&f, POD_MAC, "fe80::10", "ff02::16", 143, 1, "ff02::16");
	int rc3 = run(g_from, &f);
	icmp6_msg(&f, POD_MAC, POD6, "fe80::1", 136, 255, POD6);
	int rc4 = run(g_from, &f);
	check(rc == TC_ACT_OK && rc2 == TC_ACT_OK && rc3 == TC_ACT_OK && rc4 == TC_ACT_OK &&
		      metric(DP_REASON_TO_STACK, DP_DIR_FROM_ENDPOINT) == st0 + 4,
	      "ND / MLD on the link (solicited-node, DAD, an MLDv2 report, an advertisement to "
	      "a link-local address) goes to the stack under deny-all (%d %d %d %d)", rc, rc2, rc3,
	      rc4);
	/* the pod's solicitation of its gateway is answered, to the
	 * solicited-node address and as a unicast probe */
	uint64_t nd0 = metric(DP_REASON_ND_ANSWERED, DP_DIR_FROM_ENDPOINT);
	icmp6_msg(&f, POD_MAC, POD6, "ff02::1:ff00:1", 135, 255, "fd00:9::1");
	rc = run(g_from, &f);
	check(rc == TC_ACT_REDIRECT && metric(DP_REASON_ND_ANSWERED, DP_DIR_FROM_ENDPOINT) == nd0 + 1,
	      "ND: the pod's solicitation of its gateway (solicited-node) is answered (%d)", rc);
	nd0 = metric(DP_REASON_ND_ANSWERED, DP_DIR_FROM_ENDPOINT);
	icmp6_msg(&f, POD_MAC, POD6, "fd00:9::1", 135, 255, "fd00:9::1");
	rc = run(g_from, &f);
	check(rc == TC_ACT_REDIRECT && metric(DP_REASON_ND_ANSWERED, DP_DIR_FROM_ENDPOINT) == nd0 + 1,
	      "ND: the pod's unicast solicitation of its gateway is answered (%d)", rc);
	/* to the pod */
	uint64_t tp0 = metric(DP_REASON_DROP_POLICY, DP_DIR_TO_ENDPOINT);
	icmp6_msg(&f, HOST_MAC, FAR6, POD6, 135, 254, POD6);
	rc = run(g_to, &f);
	check(rc == TC_ACT_SHOT && metric(DP_REASON_DROP_POLICY, DP_DIR_TO_ENDPOINT) == tp0 + 1,
	      "ND: a forwarded solicitation to the pod's global address meets its deny-all "
	      "ingress (%d)", rc);
	icmp6_msg(&f, HOST_MAC, "fe80::1", POD6, 135, 255, POD6);
	rc = run(g_to, &f);
	check(rc == TC_ACT_OK, "ND: the node's unicast probe of the pod (from the host veth's "
			       "link-local address) is delivered (%d)", rc);
	enforce(10, false, false);
	policy_reset();
}

/* What fibril_from_endpoint sends out itself (here: into the tunnel) it
 * marks DP_MARK_MAGIC_FORWARDED, and fibril_to_netdev passes such a packet
 * at once, untouched, the mark cleared; the same packet without the mark
 * is masqueraded (the device: lo, ifindex 1, in BPF_PROG_RUN). */
static void test_to_netdev_forwarded(void)
{
	int to_netdev = bpf_program__fd(g_skel->progs.fibril_to_netdev);
	policy_reset();
	put_ipcache4_tunnel(REMOTE_CIDR, 24, DP_IDENTITY_WORLD, REMOTE_NODE);
	g_tunnel_ifindex = EP_IFINDEX;
	set_config(1, 0, 0);
	struct frame f;
	eth(&f, POD_MAC, 0x0800);
	ipv4(&f, POD4, REMOTE_POD, 6, 20, 7, 0);
	tcp(&f, 4401, 80, 0x02);
	uint32_t mark = 0;
	int rc = run_mark_io(g_from, &f, &mark);
	check(rc == TC_ACT_REDIRECT && mark == DP_MARK_MAGIC_FORWARDED,
	      "forwarded: from-endpoint marks what it sends into the tunnel itself (%d, mark "
	      "%#x)", rc, mark);
	g_tunnel_ifindex = 0;

	uint32_t zero = 0, lo = 1;
	struct dp_config c = {.flags = DP_CFG_F_MASQUERADE, .ct_refresh_s = 1,
			      .nat_port_min = 32768, .nat_port_max = 60999};
	bpf_map_update_elem(map_fd(g_skel->maps.dp_config), &zero, &c, BPF_ANY);
	struct dp_nat_dev dev = {.addr4 = {10, 99, 0, 1}, .flags = DP_NAT_DEV_F_IPV4};
	bpf_map_update_elem(map_fd(g_skel->maps.dp_nat_devs), &lo, &dev, BPF_ANY);
	const uint8_t pod[4] = {10, 9, 0, 10}, node[4] = {10, 99, 0, 1};
	eth(&f, POD_MAC, 0x0800);
	ipv4(&f, POD4, FAR4, 6, 20, 7, 0);
	tcp(&f, 4402, 80, 0x02);
	mark = DP_MARK_MAGIC_FORWARDED;
	rc = run_mark_io(to_netdev, &f, &mark);
	check(rc == TC_ACT_UNSPEC && mark == 0 && !memcmp(f.b + 26, pod, 4),
	      "forwarded: to-netdev passes a marked packet untouched and clears the mark (%d, "
	      "mark %#x)", rc, mark);
	eth(&f, POD_MAC, 0x0800);
	ipv4(&f, POD4, FAR4, 6, 20, 7, 0);
	tcp(&f, 4402, 80, 0x02);
	mark = 0;
	rc = run_mark_io(to_netdev, &f, &mark);
	check(rc == TC_ACT_OK && !memcmp(f.b + 26, node, 4),
	      "forwarded: the same packet unmarked is masqueraded to the device's address (%d)",
	      rc);

	/* host-routing legacy with masquerading: what from-endpoint hands to
	 * the stack for another node (its pods, its IP) is marked; the world
	 * and this node's own addresses are not */
	struct dp_ipcache_key k = {.prefixlen = DP_IPCACHE_PREFIX_HDR + 24, .family = DP_FAMILY_IPV4};
	inet_pton(AF_INET, "10.77.0.0", k.addr);
	struct dp_ipcache_value v = {.identity = 4545, .flags = DP_IPCACHE_F_CLUSTER};
	bpf_map_update_elem(map_fd(g_skel->maps.dp_ipcache), &k, &v, BPF_ANY);
	put_ipcache4("172.16.5.12", 32, DP_IDENTITY_REMOTE_NODE);
	put_ipcache4("10.9.0.1", 32, DP_IDENTITY_HOST);
	const struct {
		const char *dst, *what;
		uint32_t want;
	} to_stack[] = {
		{"10.77.0.5", "another node's pod", DP_MARK_MAGIC_FORWARDED},
		{"172.16.5.12", "another node", DP_MARK_MAGIC_FORWARDED},
		{FAR4, "the world", 0},
		{"10.9.0.1", "this node's gateway address", 0},
	};
	for (size_t i = 0; i < sizeof(to_stack) / sizeof(to_stack[0]); i++) {
		eth(&f, POD_MAC, 0x0800);
		ipv4(&f, POD4, to_stack[i].dst, 6, 20, 7, 0);
		tcp(&f, (uint16_t)(4410 + i), 80, 0x02);
		mark = 0;
		rc = run_mark_io(g_from, &f, &mark);
		check(rc == TC_ACT_OK && mark == to_stack[i].want,
		      "forwarded: host-routing legacy, masquerading on: to %s through the stack, "
		      "mark %#x (verdict %d, mark %#x)", to_stack[i].what, to_stack[i].want, rc, mark);
	}
	c.flags = 0; /* masquerading off: no mark, no ipcache walk */
	bpf_map_update_elem(map_fd(g_skel->maps.dp_config), &zero, &c, BPF_ANY);
	eth(&f, POD_MAC, 0x0800);
	ipv4(&f, POD4, "10.77.0.5", 6, 20, 7, 0);
	tcp(&f, 4420, 80, 0x02);
	mark = 0;
	rc = run_mark_io(g_from, &f, &mark);
	check(rc == TC_ACT_OK && mark == 0,
	      "forwarded: masquerading off, another node's pod's packet is not marked (%d, mark "
	      "%#x)", rc, mark);
	bpf_map_delete_elem(map_fd(g_skel->maps.dp_nat_devs), &lo);
	set_config(1, 0, 0);
	policy_reset();
}

#endif /* FIBRIL_TESTS_BPF_DP_PROG_EDGE_H */

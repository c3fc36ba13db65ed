/* modules/common/icmp_names.h - gopacket's names of the ICMP types, as
 * Hubble's Summary says them ("ICMPv4 EchoRequest"): one table for
 * hubble-lite's Hubble JSON and gRPC and the CLI's compact output.
 * Header-only; NULL for a type without a name (then "ICMPv4" alone). */
#ifndef FIBRIL_COMMON_ICMP_NAMES_H
#define FIBRIL_COMMON_ICMP_NAMES_H

#include <stdint.h>

/* proto 1 is ICMPv4, anything else ICMPv6. */
static inline const char *icmp_type_name(uint8_t proto, uint8_t type)
{
	if (proto == 1)
		switch (type) {
		case 0: return "EchoReply";
		case 3: return "DestinationUnreachable";
		case 5: return "Redirect";
		case 8: return "EchoRequest";
		case 11: return "TimeExceeded";
		case 12: return "ParameterProblem";
		default: return NULL;
		}
	switch (type) {
	case 1: return "DestinationUnreachable";
	case 2: return "PacketTooBig";
	case 3: return "TimeExceeded";
	case 4: return "ParameterProblem";
	case 128: return "EchoRequest";
	case 129: return "EchoReply";
	case 133: return "RouterSolicitation";
	case 134: return "RouterAdvertisement";
	case 135: return "NeighborSolicitation";
	case 136: return "NeighborAdvertisement";
	case 143: return "MLDv2MulticastListenerReport";
	default: return NULL;
	}
}

#endif

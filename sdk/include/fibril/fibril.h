/* fibril/fibril.h - the whole SDK in one include. A module needs only this. */
#ifndef FIBRIL_FIBRIL_H
#define FIBRIL_FIBRIL_H

#include <fibril/version.h>
#include <fibril/compat.h>
#include <fibril/config.h>
#include <fibril/module.h>
#include <fibril/log.h>
#include <fibril/loop.h>
#include <fibril/bus.h>
#include <fibril/service.h>
#include <fibril/health.h>
#include <fibril/bpfmap.h>
#include <fibril/api.h>
#include <fibril/ipalloc.h>
#include <fibril/ipam.h>
#include <fibril/ipamstore.h>
#include <fibril/kvstore.h>
#include <fibril/k8s.h>
#include <fibril/endpoint.h>
#include <fibril/datapath.h>
#include <fibril/journal.h>
#include <fibril/metrics.h>

#endif

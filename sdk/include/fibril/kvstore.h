/* fibril/kvstore.h - the "kvstore" capability: a generic, asynchronous
 * key-value store shared by every node of the cluster (etcd v3 semantics:
 * revisions, leases, transactions, prefix watches). The kvstore-etcd module
 * provides it; IPAM, identities, the ipcache and the node registry use it.
 *
 * Keys are relative to the provider's configured prefix. Every call returns
 * 0 when the request was queued (or a negative errno) and later runs its
 * callback once, on the loop thread, with err 0 or a negative errno
 * (-ENOTCONN: the store is unreachable; -ETIMEDOUT; -EIO a bad answer).
 * Pointers handed to callbacks are valid only during the callback.
 * Interface version 1. */
#ifndef FIBRIL_KVSTORE_H
#define FIBRIL_KVSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <fibril/service.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIBRIL_KVSTORE_CAPABILITY "kvstore"
/* Interface versions: 1 (SDK 1.2); 2 (SDK 1.4) appends `txn`, whose arrays
 * are in the 1.4 layout (the 1.2 slot is now named txn_v1); 3 (SDK 1.6)
 * appends `get_paged`; 4 (SDK 1.7) appends `get_range`. */
#define FIBRIL_KVSTORE_VERSION 4

struct fibril_kv {
	const char *key;
	const char *value; /* NUL-terminated copy; value_len bytes */
	size_t value_len;
	int64_t create_revision;
	int64_t mod_revision;
	int64_t version;
	int64_t lease;
};

/* Compare (all must hold for the success branch), as etcd's Compare. */
enum fibril_kv_target {
	FIBRIL_KV_TARGET_VERSION = 0,
	FIBRIL_KV_TARGET_CREATE,
	FIBRIL_KV_TARGET_MOD,
	FIBRIL_KV_TARGET_VALUE,
	FIBRIL_KV_TARGET_LEASE,
};
enum fibril_kv_result { FIBRIL_KV_EQUAL = 0, FIBRIL_KV_GREATER, FIBRIL_KV_LESS, FIBRIL_KV_NOT_EQUAL };

/* Arrays of compares and ops are laid out as the txn slot they are passed
 * to defines (txn_v1: the 1.2 layout, up to `value` / `prefix`; txn: this
 * header's). Zero-initialise them: a field you do not set reads as 0. */
struct fibril_kv_compare {
	const char *key;
	enum fibril_kv_target target;
	enum fibril_kv_result result;
	int64_t number;    /* VERSION, CREATE, MOD, LEASE */
	const char *value; /* VALUE */
	/* --- SDK 1.4 (interface 2) --- */
	bool prefix;       /* compare every key under key (etcd's range_end) */
};

enum fibril_kv_op_type { FIBRIL_KV_OP_PUT = 0, FIBRIL_KV_OP_DELETE, FIBRIL_KV_OP_GET };

struct fibril_kv_op {
	enum fibril_kv_op_type type;
	const char *key;
	const char *value; /* PUT */
	size_t value_len;  /* PUT; 0 with value set means strlen(value) */
	int64_t lease;     /* PUT: attach to this lease (0: none) */
	bool prefix;       /* DELETE/GET: every key under key */
	/* --- SDK 1.4 (interface 2) --- */
	bool ignore_lease; /* PUT: keep the key's current lease (lease must be 0) */
};

enum fibril_kv_event_type { FIBRIL_KV_EVENT_PUT = 0, FIBRIL_KV_EVENT_DELETE };

/* err, the pairs found, and the store's revision at the answer. */
typedef void (*fibril_kv_get_fn)(void *ud, int err, const struct fibril_kv *kvs, size_t n,
				 int64_t revision);
typedef void (*fibril_kv_done_fn)(void *ud, int err, int64_t revision);
/* succeeded: whether the compares held. kvs/n: what the executed branch's
 * GET ops returned (all of them, in order). */
typedef void (*fibril_kv_txn_fn)(void *ud, int err, bool succeeded, const struct fibril_kv *kvs,
				 size_t n, int64_t revision);
/* One page of a get_paged read: its pairs (valid during the call), whether
 * another page follows, and the revision every page is read at. After an
 * err != 0 (kvs NULL, more false) or a page with more false, no more calls. */
typedef void (*fibril_kv_page_fn)(void *ud, int err, const struct fibril_kv *kvs, size_t n,
				  bool more, int64_t revision);
typedef void (*fibril_kv_lease_fn)(void *ud, int err, int64_t lease, int64_t ttl_seconds);
/* One event of a watch, in revision order. err != 0 (with kv NULL) reports
 * that the watch broke and is being re-established from the last revision
 * seen; -ERANGE means that revision was compacted away: the caller must
 * re-read (get) and the watch continues from the current revision. */
typedef void (*fibril_kv_watch_fn)(void *ud, int err, enum fibril_kv_event_type type,
				   const struct fibril_kv *kv, int64_t revision);

struct fibril_kv_watch;

struct fibril_kvstore_ops {
	struct fibril_service_header hdr; /* .version = FIBRIL_KVSTORE_VERSION */
	int (*get)(void *ctx, const char *key, bool prefix, fibril_kv_get_fn cb, void *ud);
	int (*put)(void *ctx, const char *key, const char *value, size_t value_len, int64_t lease,
		   fibril_kv_done_fn cb, void *ud);
	int (*del)(void *ctx, const char *key, bool prefix, fibril_kv_done_fn cb, void *ud);
	/* Interface 1's txn (SDK 1.2 - 1.3 callers): cmp and the ops are arrays in
	 * the 1.2 layout (struct fibril_kv_compare up to `value`, struct
	 * fibril_kv_op up to `prefix`). Callers built against this header use
	 * `txn` below, which the same source code reaches by name. */
	int (*txn_v1)(void *ctx, const void *cmp_v1, size_t ncmp, const void *success_v1,
		      size_t nsuccess, const void *failure_v1, size_t nfailure, fibril_kv_txn_fn cb,
		      void *ud);
	/* Events for keys under prefix from start_revision (0: from now). */
	struct fibril_kv_watch *(*watch)(void *ctx, const char *prefix, int64_t start_revision,
					 fibril_kv_watch_fn cb, void *ud);
	void (*unwatch)(void *ctx, struct fibril_kv_watch *w);
	/* A lease the provider keeps alive until revoked (or the agent stops).
	 * If it is lost anyway (the store was unreachable past its TTL), the
	 * provider publishes FIBRIL_KVSTORE_TOPIC_LEASE_LOST on the bus. */
	int (*lease_grant)(void *ctx, int64_t ttl_seconds, fibril_kv_lease_fn cb, void *ud);
	int (*lease_revoke)(void *ctx, int64_t lease, fibril_kv_done_fn cb, void *ud);
	/* Whether the store is reachable right now. */
	bool (*connected)(void *ctx);
	/* --- interface 2 (SDK 1.4) --- */
	/* A transaction: if every compare holds, run success, else failure.
	 * cmp and the ops are arrays of this header's structs. */
	int (*txn)(void *ctx, const struct fibril_kv_compare *cmp, size_t ncmp,
		   const struct fibril_kv_op *success, size_t nsuccess,
		   const struct fibril_kv_op *failure, size_t nfailure, fibril_kv_txn_fn cb, void *ud);
	/* --- interface 3 (SDK 1.6) --- */
	/* Every key under prefix, in pages of up to `limit` keys (0: the
	 * provider's default), all at the revision of the first page, one
	 * request at a time: a large prefix is never held whole, by the store's
	 * answer or by the caller. cb runs once per page (see fibril_kv_page_fn);
	 * watch from its revision + 1 to follow what changes after. A revision
	 * compacted away between pages ends the read with -ERANGE: read again. */
	int (*get_paged)(void *ctx, const char *prefix, size_t limit, fibril_kv_page_fn cb,
			 void *ud);
	/* --- interface 4 (SDK 1.7) --- */
	/* Every key in [start, end) (both relative to the provider's prefix;
	 * end NULL or "": every key from start to the end of the provider's
	 * prefix), in pages as get_paged, at `revision` (0: the store's
	 * current one; the revision handed to cb tells which). Several disjoint
	 * ranges read at one revision (the first answer's) are one consistent
	 * snapshot, each on its own connection, so the store serves them in
	 * parallel. A revision compacted away ends the read with -ERANGE. */
	int (*get_range)(void *ctx, const char *start, const char *end, int64_t revision,
			 size_t limit, fibril_kv_page_fn cb, void *ud);
};

/* Bus topics of the kvstore provider (payload: struct fibril_kvstore_event,
 * type version 1). */
#define FIBRIL_KVSTORE_TOPIC_CONNECTED "kvstore.connected"
#define FIBRIL_KVSTORE_TOPIC_DISCONNECTED "kvstore.disconnected"
#define FIBRIL_KVSTORE_TOPIC_LEASE_LOST "kvstore.lease-lost"

struct fibril_kvstore_event {
	uint32_t sz;
	int64_t lease; /* LEASE_LOST: which lease */
};

#ifdef __cplusplus
}
#endif
#endif

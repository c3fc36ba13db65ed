/* modules/common/curl_loop.h - libcurl's multi interface driven by the
 * agent's loop, shared by the modules that speak HTTP (kvstore-etcd, k8s):
 * curl's sockets are fibril_io watches, its timeout a fibril timer, and
 * after every curl_multi_socket_action the owner's process function runs
 * (never inside a curl callback), so completions may start new requests.
 * Internal to the modules (a convenience library built with
 * -fvisibility=hidden), not part of the SDK. */
#ifndef FIBRIL_MODULES_CURL_LOOP_H
#define FIBRIL_MODULES_CURL_LOOP_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include <fibril/fibril.h>

struct mod_curl_loop {
	struct fibril_module *m;
	CURLM *multi;               /* NULL when closed */
	struct fibril_timer *timer; /* curl's timeout */
	/* the owner's flag: true once the host released the module's timers
	 * and fds (they must not be touched then); NULL when the owner only
	 * touches them before the host releases them (stop, fini) */
	const bool *released;
	void (*process)(void *ud); /* hand stream data and completions over */
	void *ud;
};

/* The multi handle wired to the loop. 0, or -ENOMEM. */
int mod_curl_loop_open(struct mod_curl_loop *l, struct fibril_module *m, const bool *released,
		       void (*process)(void *ud), void *ud);
/* curl_multi_cleanup (every easy handle must be removed first) and the
 * timer cancelled; safe on a closed loop. */
void mod_curl_loop_close(struct mod_curl_loop *l);
/* Call finish(private, result) for each transfer curl has finished (its
 * CURLOPT_PRIVATE); finish may remove the handle and start others. */
void mod_curl_loop_each_done(struct mod_curl_loop *l, void (*finish)(void *priv, CURLcode cc));

/* Options every request of these modules takes: no signals, http/https
 * only, a connect timeout and TCP keepalive (idle, interval in seconds). */
void mod_curl_easy_defaults(CURL *c, long connect_timeout_ms, long keepidle_s, long keepintvl_s);

/* Append n bytes to a NUL-terminated growing buffer (first size
 * first_cap, doubled), refusing to grow past max bytes. 0, or -1 (too big
 * or out of memory: curl's write callback then returns 0). */
int mod_curl_buf_append(char **buf, size_t *len, size_t *cap, size_t first_cap, size_t max,
			const char *data, size_t n);

#endif

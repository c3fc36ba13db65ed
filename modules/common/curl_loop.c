/* modules/common/curl_loop.c - libcurl's multi interface on the agent's
 * loop (see curl_loop.h): the socket and timer callbacks, the walk over
 * finished transfers, the options every request takes and the response
 * buffer. Shared by kvstore-etcd and k8s; everything runs on the loop
 * thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "curl_loop.h"

static void on_io(struct fibril_io *io, int fd, uint32_t revents, void *ud)
{
	struct mod_curl_loop *l = ud;
	int flags = 0, running = 0;
	(void)io;
	if (revents & FIBRIL_IO_READ)
		flags |= CURL_CSELECT_IN;
	if (revents & FIBRIL_IO_WRITE)
		flags |= CURL_CSELECT_OUT;
	if (revents & FIBRIL_IO_ERROR)
		flags |= CURL_CSELECT_ERR;
	curl_multi_socket_action(l->multi, fd, flags, &running);
	l->process(l->ud);
}

/* A NULL flag: the host calls the owner's fini before it releases the
 * module's handles, so the handles are always live here. */
static bool mod_curl_loop_released(const struct mod_curl_loop *l)
{
	return l->released && *l->released;
}

static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct mod_curl_loop *l = userp;
	struct fibril_io *io = socketp;
	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (io && !mod_curl_loop_released(l))
			fibril_io_remove(io);
		curl_multi_assign(l->multi, s, NULL);
		return 0;
	}
	if (mod_curl_loop_released(l))
		return -1;
	uint32_t events = 0;
	if (what & CURL_POLL_IN)
		events |= FIBRIL_IO_READ;
	if (what & CURL_POLL_OUT)
		events |= FIBRIL_IO_WRITE;
	if (io)
		return fibril_io_update(io, events) ? -1 : 0;
	io = fibril_io_watch(l->m, s, events, on_io, l);
	if (!io)
		return -1;
	curl_multi_assign(l->multi, s, io);
	return 0;
}

static void on_curl_timeout(struct fibril_timer *t, void *ud)
{
	struct mod_curl_loop *l = ud;
	int running = 0;
	(void)t;
	l->timer = NULL; /* a one-shot: the host frees it after this call */
	curl_multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	l->process(l->ud);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct mod_curl_loop *l = userp;
	(void)multi;
	if (mod_curl_loop_released(l))
		return 0;
	if (timeout_ms < 0) {
		fibril_timer_cancel(l->timer);
		l->timer = NULL;
		return 0;
	}
	if (l->timer)
		return fibril_timer_rearm(l->timer, (uint64_t)timeout_ms, 0) ? -1 : 0;
	l->timer = fibril_timer_add(l->m, (uint64_t)timeout_ms, 0, on_curl_timeout, l);
	return l->timer ? 0 : -1;
}

int mod_curl_loop_open(struct mod_curl_loop *l, struct fibril_module *m, const bool *released,
		       void (*process)(void *ud), void *ud)
{
	l->m = m;
	l->released = released;
	l->process = process;
	l->ud = ud;
	l->timer = NULL;
	l->multi = curl_multi_init();
	if (!l->multi)
		return -ENOMEM;
	curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
	curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
	return 0;
}

void mod_curl_loop_close(struct mod_curl_loop *l)
{
	if (!l->multi)
		return;
	curl_multi_cleanup(l->multi);
	l->multi = NULL;
	if (!mod_curl_loop_released(l))
		fibril_timer_cancel(l->timer);
	l->timer = NULL;
}

void mod_curl_loop_each_done(struct mod_curl_loop *l, void (*finish)(void *priv, CURLcode cc))
{
	CURLMsg *msg;
	int left;
	while (l->multi && (msg = curl_multi_info_read(l->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		CURLcode cc = msg->data.result;
		char *priv = NULL;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
		if (priv)
			finish(priv, cc);
	}
}

void mod_curl_easy_defaults(CURL *c, long connect_timeout_ms, long keepidle_s, long keepintvl_s)
{
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, keepidle_s);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, keepintvl_s);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
}

int mod_curl_buf_append(char **buf, size_t *len, size_t *cap, size_t first_cap, size_t max,
			const char *data, size_t n)
{
	if (*len + n + 1 > max)
		return -1;
	if (*len + n + 1 > *cap) {
		size_t want = *cap ? *cap : first_cap;
		while (want < *len + n + 1)
			want *= 2;
		char *p = realloc(*buf, want);
		if (!p)
			return -1;
		*buf = p;
		*cap = want;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

/* host/api_server.c - the agent's API server: HTTP/1.1 + JSON on a unix
 * socket (and optional TCP listeners: one on loopback for probes and
 * scrapers, one with TLS and client certificates for remote readers), served by
 * libwebsockets on the agent's own libuv loop: the listeners, each
 * connection's life (reading a request, writing its answer in chunks,
 * closing them all at shutdown) and the websocket upgrades. A new
 * connection's every request head is read and checked by api_accept.c
 * before lws parses it (the TLS listener's: lws alone). What a request
 * means (routes, responses) is api_http.c's; what a stream sends,
 * api_stream.c's. */
#include "api_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define WRITE_CHUNK 16384
/* how long the unix socket waits for a request (lws's keepalive timeout there) */
#define API_UNIX_IDLE_S 30
static struct lws_context *g_ctx;
static unsigned g_tcp_idle_s = 10;
static struct lws_vhost *g_unix_vhost, *g_tcp_vhost, *g_remote_vhost;
static char *g_socket_path;
static struct session *g_live; /* the connections lws has bound to our protocol */
static char *g_ifaces[API_LISTENERS];       /* the TCP listeners' addresses, which lws keeps */
static size_t g_nifaces;

struct listen_addr {
	char host[INET6_ADDRSTRLEN];
	int port;
	bool v6;
};

/* ---- connections ------------------------------------------------------------ */

static void session_link(struct session *s, struct lws *wsi)
{
	if (s->live)
		return;
	s->live = true;
	s->live_wsi = wsi;
	s->live_prev = NULL;
	s->live_next = g_live;
	if (g_live)
		g_live->live_prev = s;
	g_live = s;
}

static void session_unlink(struct session *s)
{
	if (!s->live)
		return;
	if (s->live_prev)
		s->live_prev->live_next = s->live_next;
	else
		g_live = s->live_next;
	if (s->live_next)
		s->live_next->live_prev = s->live_prev;
	s->live = false;
	s->live_prev = s->live_next = NULL;
	s->live_wsi = NULL;
}

static const struct {
	enum lws_token_indexes token;
	const char *name;
	bool has_body;
} http_methods[] = {
	{WSI_TOKEN_GET_URI, "GET", false},	   {WSI_TOKEN_POST_URI, "POST", true},
	{WSI_TOKEN_PUT_URI, "PUT", true},	   {WSI_TOKEN_PATCH_URI, "PATCH", true},
	{WSI_TOKEN_DELETE_URI, "DELETE", true},	   {WSI_TOKEN_OPTIONS_URI, "OPTIONS", false},
	{WSI_TOKEN_HEAD_URI, "HEAD", false},
};

bool api_method_has_body(const char *method)
{
	for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++)
		if (strcmp(http_methods[i].name, method) == 0)
			return http_methods[i].has_body;
	return false;
}

const char *api_method_name(const char *method)
{
	for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++)
		if (strcmp(http_methods[i].name, method) == 0)
			return http_methods[i].name;
	return "GET"; /* what parse_request_line falls back to */
}

static void parse_request_line(struct lws *wsi, struct session *s, const char *uri)
{
	s->req.method = "GET";
	for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++) {
		if (lws_hdr_total_length(wsi, http_methods[i].token) > 0) {
			s->req.method = http_methods[i].name;
			break;
		}
	}
	snprintf(s->req.path, sizeof(s->req.path), "%s", uri ? uri : "/");
	char frag[1024];
	for (int i = 0; s->req.nquery < MAX_QUERY; i++) {
		int n = lws_hdr_copy_fragment(wsi, frag, sizeof(frag), WSI_TOKEN_HTTP_URI_ARGS, i);
		if (n < 0)
			break;
		char *eq = strchr(frag, '=');
		if (eq)
			*eq = '\0';
		s->req.query[s->req.nquery][0] = xstrdup(frag);
		s->req.query[s->req.nquery][1] = xstrdup(eq ? eq + 1 : "");
		s->req.nquery++;
	}
	char cl[32];
	if (lws_hdr_copy(wsi, cl, sizeof(cl), WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0)
		s->content_length = strtoull(cl, NULL, 10);
}

void api_session_wake(struct session *s)
{
	s->deferred_ready = true;
	lws_callback_on_writable(s->wsi);
}

/* Queue the response: headers now, the body from the writeable callback. */
static int queue_response(struct lws *wsi, struct session *s)
{
	unsigned char hdr[LWS_PRE + 512];
	unsigned char *start = hdr + LWS_PRE, *p = start, *end = hdr + sizeof(hdr) - 1;
	/* a next request lws may already hold is never read (api_accept.c) */
	if (lws_get_vhost(wsi) != g_remote_vhost && api_keepalive_pipelined(wsi))
		s->close_after = true;
	if (lws_add_http_common_headers(wsi, (unsigned)s->resp.status, s->resp.content_type,
					s->resp.len, &p, end))
		return -1;
	if (s->close_after &&
	    lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close", 5, &p, end))
		return -1;
	if (lws_finalize_write_http_header(wsi, start, &p, end))
		return -1;
	s->out = malloc(LWS_PRE + s->resp.len + 1);
	if (!s->out)
		return -1;
	memcpy(s->out + LWS_PRE, s->resp.body, s->resp.len);
	s->out_len = s->resp.len;
	s->out_off = 0;
	s->responded = true;
	metrics_api_request(s->req.method, s->metric_route, s->resp.status, mono_ms() - s->metric_t0);
	lws_callback_on_writable(wsi);
	return 0;
}

static int send_response(struct lws *wsi, struct session *s)
{
	if (s->pending)
		return 0; /* the handler deferred its answer */
	int rc = queue_response(wsi, s);
	api_request_free(s);
	return rc;
}

static int write_body(struct lws *wsi, struct session *s)
{
	if (!s->out)
		return 0;
	size_t left = s->out_len - s->out_off;
	size_t chunk = left > WRITE_CHUNK ? WRITE_CHUNK : left;
	bool last = chunk == left;
	/* The LWS_PRE bytes before each chunk are already-sent body: lws may
	 * scribble there. */
	if (lws_write(wsi, s->out + LWS_PRE + s->out_off, chunk,
		      last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != (int)chunk)
		return -1;
	s->out_off += chunk;
	if (!last) {
		lws_callback_on_writable(wsi);
		return 0;
	}
	free(s->out);
	s->out = NULL;
	if (s->close_after)
		return -1;
	if (lws_http_transaction_completed(wsi))
		return -1;
	/* the next request's head is read and checked before lws parses it
	 * (the remote listener's is encrypted: lws's alone) */
	struct lws_vhost *vh = lws_get_vhost(wsi);
	if (vh != g_remote_vhost)
		api_keepalive_pause(wsi, vh == g_tcp_vhost ? g_tcp_idle_s : API_UNIX_IDLE_S);
	return 0;
}

/* ---- the lws callback --------------------------------------------------- */

/* lws's header buffer per connection: a head within api_head.c's limits
 * (API_MAX_HEAD, API_MAX_HEADER_FIELDS) fits with
 * room to spare, so lws never runs out of it ("Ran out of header data
 * space" dropped the connection without an answer). */
#define API_HEADER_BUFFER 32768

/* What a browser may reach on the TCP listener: a module's routes and
 * streams there carry flows, so a page of another site must not read
 * them. The Host must be an address or localhost (a name could be a DNS
 * rebinding of the attacker's own name to 127.0.0.1), and a websocket's
 * Origin, when a browser sends one, must be that same host (websockets are
 * not bound by the same-origin policy). */
static bool host_is_foreign(struct lws *wsi)
{
	char host[256];
	if (lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) <= 0)
		return false; /* HTTP/1.0 without Host: not a browser */
	char *name = host, *end;
	if (*name == '[') { /* [v6]:port */
		end = strchr(name, ']');
		if (!end)
			return true;
		*end = '\0';
		name++;
	} else if ((end = strrchr(name, ':')) != NULL) {
		*end = '\0';
	}
	unsigned char addr[16];
	return strcmp(name, "localhost") != 0 && inet_pton(AF_INET, name, addr) != 1 &&
	       inet_pton(AF_INET6, name, addr) != 1;
}

static bool origin_is_foreign(struct lws *wsi)
{
	char origin[300], host[256];
	if (lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) <= 0)
		return false; /* not a browser */
	if (lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) <= 0)
		return true;
	const char *o = strstr(origin, "://");
	o = o ? o + 3 : origin;
	return strcmp(o, host) != 0;
}

/* A request line that is not HTTP, where lws parses it before
 * api_accept.c could (a pipelined request lws read with the one before
 * it): lws hands the connection to this raw protocol
 * (LWS_SERVER_OPTION_FALLBACK_TO_APPLY_LISTEN_ACCEPT_CONFIG) instead of
 * answering its own HTML page. (Not on the remote listener: after TLS,
 * lws 4.1 answers its 403 page and falls back for nothing.) */
static int raw_fallback_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
				 void *in, size_t len)
{
	(void)user, (void)in, (void)len;
	if (reason == LWS_CALLBACK_RAW_CLOSE || reason == LWS_CALLBACK_WSI_DESTROY)
		api_keepalive_forget(wsi); /* a kept-alive connection's reader goes with it */
	if (reason == LWS_CALLBACK_RAW_RX) {
		api_send_error_now(lws_get_socket_fd(wsi), 400,
				   "malformed request line: expected METHOD /path HTTP/1.1");
		return -1;
	}
	return 0;
}

static int api_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			size_t len)
{
	struct session *s = user;
	struct lws_vhost *vh = lws_get_vhost(wsi);
	bool remote = vh == g_remote_vhost && g_remote_vhost;
	/* the remote listener serves what the TCP one does (flows, /metrics),
	 * GET only */
	bool tcp = (vh == g_tcp_vhost && g_tcp_vhost) || remote;
	if (reason == LWS_CALLBACK_FILTER_NETWORK_CONNECTION) {
		/* accepted (wsi is the listener): the unix socket's and the TCP
		 * listener's are read and checked by api_accept.c first, within
		 * the limits; the remote listener's (TLS) by lws, within them */
		if (!remote) {
			int taken = api_accept_take(vh, (int)(intptr_t)in, tcp ? API_LISTENER_TCP : -1,
						    tcp ? g_tcp_idle_s : API_UNIX_IDLE_S);
			return taken ? 1 : 0; /* taken or refused: lws closes its descriptor */
		}
		return api_conn_admit(remote ? API_LISTENER_REMOTE : API_LISTENER_TCP,
				      remote ? "api-remote-listen" : "api-tcp-listen", (int)(intptr_t)in)
			       ? 0
			       : 1;
	}
	if (reason == LWS_CALLBACK_CLOSED_HTTP || reason == LWS_CALLBACK_WSI_DESTROY)
		api_keepalive_forget(wsi); /* its next head is no longer read */
	if (reason == LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION)
		/* OpenSSL's verdict on the client's chain (len: preverify_ok) is
		 * the answer; lws takes 0 as "accept" whatever it was */
		return len ? 0 : 1;
	if (!s) /* a connection that never got as far as a request */
		return lws_callback_http_dummy(wsi, reason, user, in, len);
	switch (reason) {
	case LWS_CALLBACK_HTTP_BIND_PROTOCOL:
		session_link(s, wsi);
		break;
	case LWS_CALLBACK_WSI_DESTROY:
		api_session_reset(s);
		session_unlink(s);
		break;
	case LWS_CALLBACK_HTTP: {
		session_link(s, wsi);
		api_session_reset(s);
		s->wsi = wsi;
		s->foreign_host = tcp && host_is_foreign(wsi);
		int big = api_oversized(wsi, in);
		parse_request_line(wsi, s, big == 414 ? "/" : in);
		if (big) {
			s->close_after = true;
			fibril_resp_error(&s->resp, big, "%s longer than %d bytes",
					  big == 414 ? "request target" : "request header fields",
					  big == 414 ? API_MAX_REQUEST_LINE : API_MAX_HEADERS);
			return send_response(wsi, s);
		}
		char bad[160];
		if (api_version_refused(wsi, bad, sizeof(bad))) {
			s->close_after = true;
			fibril_resp_error(&s->resp, 505, "%s", bad);
			return send_response(wsi, s);
		}
		if (api_target_refused(wsi, s, bad, sizeof(bad))) {
			s->close_after = true; /* what followed the cut is not a request */
			fibril_resp_error(&s->resp, 400, "%s", bad);
			return send_response(wsi, s);
		}
		if (remote && strcmp(s->req.method, "GET") && strcmp(s->req.method, "HEAD")) {
			s->close_after = true;
			fibril_resp_error(&s->resp, 405, "method %s not allowed on the remote listener "
					  "(read-only: GET)", s->req.method);
			return send_response(wsi, s);
		}
		if (s->content_length > api_max_body) {
			/* Answer now and close: the body is never read. */
			s->too_big = true;
			s->close_after = true;
			api_dispatch(s, tcp);
			return send_response(wsi, s);
		}
		if (api_method_has_body(s->req.method) && s->content_length > 0)
			return 0; /* wait for LWS_CALLBACK_HTTP_BODY_COMPLETION */
		api_dispatch(s, tcp);
		return send_response(wsi, s);
	}
	case LWS_CALLBACK_HTTP_BODY:
		if (s->responded)
			return 0;
		if (s->too_big || s->req.body_len + len > api_max_body) {
			s->too_big = true;
			return 0;
		}
		if (s->req.body_len + len + 1 > s->body_cap) {
			s->body_cap = (s->req.body_len + len + 1) * 2;
			if (s->body_cap > api_max_body + 1)
				s->body_cap = api_max_body + 1;
			char *grown = realloc(s->req.body, s->body_cap);
			if (!grown)
				return -1;
			s->req.body = grown;
		}
		if (len) /* lws may call with no data (in NULL) */
			memcpy(s->req.body + s->req.body_len, in, len);
		s->req.body_len += len;
		s->req.body[s->req.body_len] = '\0';
		return 0;
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		if (s->responded)
			return 0;
		api_dispatch(s, tcp);
		return send_response(wsi, s);
	case LWS_CALLBACK_HTTP_WRITEABLE:
		if (s->deferred_ready) {
			s->deferred_ready = false;
			return send_response(wsi, s);
		}
		return write_body(wsi, s);
	case LWS_CALLBACK_CLOSED_HTTP:
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
		api_session_reset(s);
		session_unlink(s);
		break;
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
		char uri[256];
		if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0 ||
		    !api_stream_accepts(uri, tcp))
			return 1; /* refuse the upgrade */
		if (tcp && (host_is_foreign(wsi) || origin_is_foreign(wsi))) {
			host_log(FIBRIL_LOG_WARN, "api: websocket %s on the TCP listener refused: "
				 "a host name or another site's origin", uri);
			return 1;
		}
		return 0;
	}
	case LWS_CALLBACK_ESTABLISHED: {
		/* the stream's module reads the path and query like a request's */
		char uri[256];
		session_link(s, wsi);
		if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0)
			return -1;
		api_session_reset(s);
		parse_request_line(wsi, s, uri);
		char bad[160];
		if (api_target_refused(wsi, s, bad, sizeof(bad))) {
			host_log(FIBRIL_LOG_WARN, "api: websocket refused: %s", bad);
			api_request_free(s);
			return -1;
		}
		int rc = api_stream_established(wsi, s, tcp);
		api_request_free(s);
		return rc;
	}
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return api_stream_writeable(wsi, s);
	case LWS_CALLBACK_CLOSED:
		api_stream_closed(s);
		session_unlink(s);
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* What one send() may carry (lws_protocols.tx_packet_size): without it
 * libwebsockets cuts every write into rx_buffer_size pieces - 4 KiB - and
 * sends one piece per POLLOUT, so a stream's 128 KiB frame took some 32
 * trips round the loop, 32 send()s and as many wake-ups of the reader.
 * Room for a whole frame (STREAM_FRAME_MAX, host/api_stream.c, 1 MiB) and
 * its header; what the socket does not take is kept by lws and sent when
 * it has room, as before. */
#define API_TX_PACKET ((1 << 20) + 4096)

static const struct lws_protocols api_protocols[] = {
	{"fibril-api", api_callback, sizeof(struct session), 4096, 0, NULL, API_TX_PACKET},
	{"fibril-raw", raw_fallback_callback, 0, 0, 0, NULL, 0},
	{NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- setup and teardown ------------------------------------------------------ */

static void lws_log_to_host(int level, const char *line)
{
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	host_log(level == LLL_ERR ? FIBRIL_LOG_ERROR : FIBRIL_LOG_WARN, "api: %.*s", (int)n, line);
}

int api_init(void)
{
	lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_to_host);
	return 0;
}

/* Refuse to take over a socket a live agent is serving; remove a stale one. */
static int claim_socket_path(const char *path, char *err)
{
	struct stat st;
	if (lstat(path, &st))
		return 0;
	if (!S_ISSOCK(st.st_mode)) {
		errbuf_set(err, "[agent] socket %s exists and is not a socket", path);
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int rc = fd >= 0 ? connect(fd, (struct sockaddr *)&sa, sizeof(sa)) : -1;
	if (fd >= 0)
		close(fd);
	if (rc == 0) {
		errbuf_set(err, "[agent] socket %s is in use: another fibril-agent is running", path);
		return -1;
	}
	unlink(path);
	return 0;
}

/* "ADDR:PORT" or "[ADDR6]:PORT", ADDR an IP literal: a name (an interface,
 * a host name) is refused, since libwebsockets binds whatever it resolves
 * to, and an IPv4 address on its IPv6 socket became every address. */
static int parse_listen(const char *setting, const char *spec, struct listen_addr *out, char *err)
{
	const char *colon = strrchr(spec, ':');
	char *end = NULL;
	long p = colon ? strtol(colon + 1, &end, 10) : -1;
	const char *host = spec;
	size_t len = colon ? (size_t)(colon - spec) : 0;
	if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
		host++;
		len -= 2;
	}
	unsigned char addr[16];
	if (colon && len < sizeof(out->host)) {
		memcpy(out->host, host, len);
		out->host[len] = '\0';
	}
	out->v6 = colon && len < sizeof(out->host) && host != spec &&
		  inet_pton(AF_INET6, out->host, addr) == 1;
	bool v4 = colon && len < sizeof(out->host) && host == spec &&
		  inet_pton(AF_INET, out->host, addr) == 1;
	if (!colon || !end || *end || p <= 0 || p > 65535 || (!v4 && !out->v6)) {
		errbuf_set(err, "[agent] %s '%s': expected ADDRESS:PORT with an IP address, e.g. "
			   "127.0.0.1:9876 or [::1]:9876", setting, spec);
		return -1;
	}
	out->port = (int)p;
	return 0;
}

/* A TCP listener's vhost bound to exactly the address of spec: an IPv4
 * address on an IPv4 socket, an IPv6 one on an IPV6_V6ONLY socket. */
static struct lws_vhost *tcp_vhost(struct lws_context_creation_info *info, const char *name,
				   const char *setting, const char *spec, char *err)
{
	struct listen_addr la;
	if (parse_listen(setting, spec, &la, err))
		return NULL;
	/* lws logs an address that is not on this host and goes on without
	 * a listener: find out first */
	int fd = socket(la.v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
	struct sockaddr_in sa4 = {.sin_family = AF_INET};
	inet_pton(la.v6 ? AF_INET6 : AF_INET, la.host, la.v6 ? (void *)&sa6.sin6_addr : (void *)&sa4.sin_addr);
	int rc = fd < 0 ? -1 : la.v6 ? bind(fd, (struct sockaddr *)&sa6, sizeof(sa6))
				     : bind(fd, (struct sockaddr *)&sa4, sizeof(sa4));
	int bind_errno = errno;
	if (fd >= 0)
		close(fd);
	if (rc) {
		errbuf_set(err, "[agent] %s %s: cannot bind %s: %s", setting, spec, la.host,
			   strerror(bind_errno));
		return NULL;
	}
	char *iface = xstrdup(la.host); /* lws keeps the pointer */
	info->iface = iface;
	info->port = la.port;
	info->options |= la.v6 ? LWS_SERVER_OPTION_IPV6_V6ONLY_MODIFY | LWS_SERVER_OPTION_IPV6_V6ONLY_VALUE
			       : LWS_SERVER_OPTION_DISABLE_IPV6;
	info->vhost_name = name;
	struct lws_vhost *vh = lws_create_vhost(g_ctx, info);
	if (!vh) {
		free(iface);
		errbuf_set(err, "[agent] %s %s: cannot listen (see the log above)", setting, spec);
		return NULL;
	}
	g_ifaces[g_nifaces++] = iface;
	return vh;
}

/* A TCP listener's timeouts: a connection that sends no request, or not
 * all of its headers, or sits idle between requests, is closed after
 * [agent] api-idle-timeout. */
static void raw_fallback(struct lws_context_creation_info *info)
{
	info->options |= LWS_SERVER_OPTION_FALLBACK_TO_APPLY_LISTEN_ACCEPT_CONFIG;
	info->listen_accept_role = "raw-skt";
	info->listen_accept_protocol = "fibril-raw";
}

static void tcp_timeouts(struct lws_context_creation_info *info, const struct api_options *opts)
{
	raw_fallback(info);
	unsigned idle = opts->idle_timeout_s ? opts->idle_timeout_s : 10;
	g_tcp_idle_s = idle;
	info->timeout_secs = idle;
	info->timeout_secs_ah_idle = idle;
	info->keepalive_timeout = (int)idle;
}

/* The remote listener's certificate, key and client CA: each set and
 * readable, else the line names the first that is not. */
static int remote_files_missing(const struct api_options *opts, char *err)
{
	const struct {
		const char *key, *path;
	} files[] = {{"api-remote-cert", opts->remote_cert},
		     {"api-remote-key", opts->remote_key},
		     {"api-remote-client-ca", opts->remote_client_ca}};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		if (!files[i].path || !*files[i].path) {
			errbuf_set(err, "[agent] api-remote-listen %s needs %s (its clients must show a "
				   "certificate: the listener has no other authentication)",
				   opts->remote_listen, files[i].key);
			return -1;
		}
		if (access(files[i].path, R_OK)) {
			errbuf_set(err, "[agent] %s %s: %s", files[i].key, files[i].path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* The unauthenticated listener belongs on loopback: say so otherwise. */
static void warn_unless_loopback(const char *spec)
{
	if (!strncmp(spec, "127.", 4) || !strncmp(spec, "[::1]:", 6))
		return;
	host_log(FIBRIL_LOG_WARN, "[agent] api-tcp-listen %s is not a loopback address: whoever "
		 "reaches it reads every flow of this node and its metrics without authentication; "
		 "serve remote readers with api-remote-listen (TLS, client certificates)", spec);
}

int api_listen(const struct api_options *opts, char *err)
{
	api_limits_set(opts->max_connections ? opts->max_connections : 256,
		       opts->max_per_source ? opts->max_per_source : 32);
	api_max_body = opts->max_body ? opts->max_body : api_max_body;
	api_accept_open();
	if (strlen(opts->socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		errbuf_set(err, "[agent] socket %s: path too long for a unix socket", opts->socket_path);
		return -1;
	}
	if (claim_socket_path(opts->socket_path, err))
		return -1;
	void *loops[1] = {loop_uv()};
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS |
		       LWS_SERVER_OPTION_UV_NO_SIGSEGV_SIGFPE_SPIN;
	info.foreign_loops = loops;
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.max_http_header_data = API_HEADER_BUFFER;
	info.protocols = api_protocols;
	bool remote = opts->remote_listen && *opts->remote_listen;
	if (remote && remote_files_missing(opts, err))
		return -1;
	if (remote)
		info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	g_ctx = lws_create_context(&info);
	if (!g_ctx) {
		errbuf_set(err, "api: cannot create the server context");
		return -1;
	}
	memset(&info, 0, sizeof(info));
	info.options = LWS_SERVER_OPTION_UNIX_SOCK;
	raw_fallback(&info);
	info.iface = opts->socket_path;
	info.port = 0;
	info.protocols = api_protocols;
	info.vhost_name = "unix";
	info.keepalive_timeout = API_UNIX_IDLE_S;
	g_unix_vhost = lws_create_vhost(g_ctx, &info);
	if (!g_unix_vhost) {
		errbuf_set(err, "[agent] socket %s: cannot listen (see the log above)", opts->socket_path);
		return -1;
	}
	g_socket_path = xstrdup(opts->socket_path);
	if (chmod(opts->socket_path, opts->socket_mode)) {
		errbuf_set(err, "[agent] socket %s: chmod %04o: %s", opts->socket_path,
			   opts->socket_mode, strerror(errno));
		return -1;
	}
	if (opts->tcp_listen && *opts->tcp_listen) {
		memset(&info, 0, sizeof(info));
		info.protocols = api_protocols;
		tcp_timeouts(&info, opts);
		g_tcp_vhost = tcp_vhost(&info, "tcp", "api-tcp-listen", opts->tcp_listen, err);
		if (!g_tcp_vhost)
			return -1;
		warn_unless_loopback(opts->tcp_listen);
	}
	if (remote) {
		memset(&info, 0, sizeof(info));
		info.protocols = api_protocols;
		tcp_timeouts(&info, opts);
		info.options = LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT;
		info.ssl_cert_filepath = opts->remote_cert;
		info.ssl_private_key_filepath = opts->remote_key;
		info.ssl_ca_filepath = opts->remote_client_ca;
		info.alpn = "http/1.1"; /* the request checks above are HTTP/1.1's */
		g_remote_vhost = tcp_vhost(&info, "remote", "api-remote-listen", opts->remote_listen, err);
		if (!g_remote_vhost)
			return -1;
	}
	return 0;
}

/* Close every client connection ourselves, each synchronously, before
 * the context is destroyed: a deferred answer still pending is detached
 * (its fibril_resp_send then only frees it), and the destroy finds only
 * its listeners. Connections accepted meanwhile are closed on the next
 * pass. */
static void close_connections(void)
{
	for (int pass = 0; pass < 3 && g_live; pass++) {
		while (g_live) {
			struct session *s = g_live;
			struct lws *wsi = s->live_wsi;
			if (s->pending) {
				s->pending->sess = NULL;
				s->pending = NULL;
			}
			session_unlink(s);
			/* lws calls CLOSED_HTTP (or CLOSED) and frees s */
			lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
		}
		for (int i = 0; i < 5; i++)
			loop_run_once(false);
	}
}

void api_close(void)
{
	if (!g_ctx)
		return;
	/* Let lws see what already happened on its connections (a client
	 * that just hung up) before the destroy tears them down: libuv aborts
	 * if a connection's fd is closed while a change to its watch is still
	 * queued, and a half-closed connection is where lws does that. */
	api_accept_close_all();
	for (int i = 0; i < 5; i++)
		loop_run_once(false);
	close_connections();
	/* On a foreign loop the destroy is in two steps: lws closes its
	 * handles on our loop, and once those closes completed a second call
	 * frees the context. */
	lws_context_destroy(g_ctx);
	for (int i = 0; i < 10; i++)
		loop_run_once(false);
	lws_context_destroy(g_ctx);
	g_ctx = NULL;
	g_unix_vhost = g_tcp_vhost = g_remote_vhost = NULL;
	while (g_nifaces)
		free(g_ifaces[--g_nifaces]);
	api_limits_free();
	if (g_socket_path) {
		unlink(g_socket_path);
		free(g_socket_path);
		g_socket_path = NULL;
	}
}
void api_release_owner(struct fibril_module *owner)
{
	api_routes_release_owner(owner);
	api_streams_release_owner(owner);
}

void api_fini(void)
{
	api_close();
	api_release_owner(NULL);
	api_routes_free();
	api_streams_free();
}

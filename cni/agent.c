/* cni/agent.c - fibril-cni's client of the agent API: HTTP/1.1 + JSON over
 * the agent's unix socket, one connection per request (Connection: close),
 * every step under a deadline, blocking I/O with poll. The request head is
 * written and the reply read with the tree's common HTTP/1.1 code
 * (modules/common/http_parse.c, compiled in), not with libcurl: the plugin
 * is exec'd for every ADD/DEL, and loading libcurl's 35 shared libraries
 * costs ~10 ms per exec on the test machine, a third of the ADD latency
 * budget. An agent that cannot be reached is CNI error 11 (try again
 * later); an answer with any status is handed to the caller. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fibril_cni.h"
#include "http_parse.h"

#define REQUEST_TIMEOUT_MS 60000 /* the endpoint PUT waits for the datapath */
#define MAX_REPLY ((size_t)64 << 20)
#define CONNECT_ATTEMPTS 20 /* on EAGAIN (backlog full): about 2 s in all */

static char g_socket[108];

int agent_open(const char *socket_path)
{
	snprintf(g_socket, sizeof(g_socket), "%s", socket_path);
	return 0;
}

void agent_close(void)
{
}

char *agent_escape(const char *s)
{
	return mod_http_escape_keep(s, ":");
}

void agent_reply_free(struct agent_reply *reply)
{
	json_object_put(reply->json);
	reply->json = NULL;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Connects to the agent; -1 with errno set. A full backlog (EAGAIN) is
 * retried shortly: the agent is there but busy. */
static int agent_connect(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_socket);
	for (int attempt = 1;; attempt++) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		int e = errno;
		close(fd);
		errno = e;
		if (e != EAGAIN || attempt >= CONNECT_ATTEMPTS)
			return -1;
		struct timespec pause = {0, 10000000L * attempt};
		nanosleep(&pause, NULL);
	}
}

/* Waits until FD is ready for EVENTS before DEADLINE; -1 with errno. */
static int wait_fd(int fd, short events, long deadline)
{
	for (;;) {
		long left = deadline - now_ms();
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
	}
}

static int send_all(int fd, const char *buf, size_t len, long deadline)
{
	while (len) {
		if (wait_fd(fd, POLLOUT, deadline) < 0)
			return -1;
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The reply's body as the parser decodes it. */
struct reply_body {
	char *data;
	size_t len, cap;
};

static int on_body(void *ud, const char *data, size_t n)
{
	struct reply_body *b = ud;
	if (b->len + n > MAX_REPLY) {
		errno = EMSGSIZE;
		return -1;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 8192;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *grown = realloc(b->data, cap);
		if (!grown)
			return -1;
		b->data = grown;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

/* Reads the reply with the common HTTP/1.1 parser (modules/common/
 * http_parse.c): done once the answer is whole (by its Content-Length, its
 * last chunk, or the end of the stream; the request said Connection:
 * close, but a whole answer is not waited on for the close). 0; -1 with
 * errno set on an error, ECONNRESET when the agent closed the connection
 * before a whole reply (it died mid-request), EPROTO when the reply is not
 * HTTP. */
static int recv_reply(int fd, struct mod_http_parser *p, struct reply_body *body, long deadline)
{
	char buf[16384];
	mod_http_parser_init(p);
	for (;;) {
		if (wait_fd(fd, POLLIN, deadline) < 0)
			return -1;
		ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		if (r == 0) {
			if (mod_http_parser_eof(p) == 1)
				return 0;
			errno = ECONNRESET; /* closed without a whole answer */
			return -1;
		}
		size_t used = 0;
		errno = 0;
		int rc = mod_http_parser_feed(p, buf, (size_t)r, &used, on_body, body);
		if (rc == 1)
			return 0;
		if (rc < 0) {
			if (errno != EMSGSIZE && errno != ENOMEM)
				errno = EPROTO;
			return -1;
		}
	}
}

static int unreachable(int err, const char *method, const char *path)
{
	if (err == ECONNRESET || err == EPIPE)
		return cni_error(CNI_ERR_TRY_AGAIN, g_socket,
				 "the agent at %s closed the connection without answering %s %s "
				 "(it stopped or restarted): try again",
				 g_socket, method, path);
	return cni_error(CNI_ERR_TRY_AGAIN, g_socket, "the agent is not reachable at %s: %s (%s %s)", g_socket,
			 strerror(err), method, path);
}

int agent_request(const char *method, const char *path, struct json_object *body,
		  struct agent_reply *reply)
{
	memset(reply, 0, sizeof(*reply));
	long deadline = now_ms() + REQUEST_TIMEOUT_MS;
	const char *text = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN |
									       JSON_C_TO_STRING_NOSLASHESCAPE)
				: "";
	size_t body_len = strlen(text);
	const char *headers[] = {"User-Agent: fibril-cni", "Accept: application/json",
				 "Connection: close", body ? "Content-Type: application/json" : NULL,
				 NULL};
	char *head = NULL;
	size_t head_len = 0;
	if (mod_http_write_head(&head, &head_len, method, path, "localhost", headers, true, body_len))
		return cni_error(CNI_ERR_IO, path, "cannot write the request %s %s", method, path);

	int fd = agent_connect();
	if (fd < 0) {
		int e = errno;
		free(head);
		return unreachable(e, method, path);
	}
	static struct mod_http_parser parser; /* an 8 KB line buffer: not on the stack */
	struct reply_body reply_body = {0};
	int rc = -1;
	if (send_all(fd, head, head_len, deadline) == 0 && send_all(fd, text, body_len, deadline) == 0)
		rc = recv_reply(fd, &parser, &reply_body, deadline);
	int e = errno;
	close(fd);
	free(head);
	if (rc < 0 && e == EPROTO) {
		free(reply_body.data);
		return cni_error(FCNI_ERR_AGENT, g_socket, "the agent's reply to %s %s is not HTTP (%s)",
				 method, path, parser.error ? parser.error : "malformed");
	}
	if (rc < 0) {
		free(reply_body.data);
		return unreachable(e, method, path);
	}
	reply->status = parser.status;
	if (reply_body.len)
		reply->json = json_tokener_parse(reply_body.data);
	const char *err = json_str(reply->json, "error");
	if (err)
		snprintf(reply->error, sizeof(reply->error), "%s", err);
	else if (reply->status >= 400)
		snprintf(reply->error, sizeof(reply->error), "HTTP %ld", reply->status);
	free(reply_body.data);
	return 0;
}

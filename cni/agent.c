/* cni/agent.c - fibril-cni's client of the agent API: HTTP/1.1 + JSON over
 * the agent's unix socket, one connection per request (Connection: close),
 * every step under a deadline. Written out rather than with libcurl: the
 * plugin is exec'd for every ADD/DEL, and loading libcurl's 35 shared
 * libraries costs ~10 ms per exec on the test machine, a third of the ADD
 * latency budget. An agent that cannot be reached is CNI error 11 (try
 * again later); an answer with any status is handed to the caller. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fibril_cni.h"

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
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;
	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '.' || *p == '_' || *p == '~' || *p == ':') {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return out;
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

/* The value of Content-Length in the header block HEAD (HEAD_LEN bytes, up to
 * and with its blank line), any spaces or tabs around the colon; -1 when it
 * has none or it is not a number. */
static long content_length(const char *head, size_t head_len)
{
	static const char name[] = "Content-Length";
	const char *end = head + head_len;
	for (const char *h = memmem(head, head_len, "\r\n", 2); h && h + 2 < end;
	     h = memmem(h + 2, (size_t)(end - h - 2), "\r\n", 2)) {
		const char *p = h + 2;
		if ((size_t)(end - p) <= sizeof(name) || strncasecmp(p, name, sizeof(name) - 1) != 0)
			continue;
		p += sizeof(name) - 1;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (p >= end || *p++ != ':')
			continue;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (p >= end || *p < '0' || *p > '9')
			return -1;
		char *stop;
		unsigned long v = strtoul(p, &stop, 10);
		return v > MAX_REPLY ? -1 : (long)v;
	}
	return -1;
}

/* Reads the whole reply (the request said Connection: close): done once
 * Content-Length bytes of body are in, or at the end of the stream. Each
 * read scans only the new bytes for the end of the headers. NULL with errno
 * set on an error; ECONNRESET when the agent closed the connection before a
 * whole reply (it died mid-request). */
static char *recv_all(int fd, size_t *len, long deadline)
{
	size_t cap = 8192, n = 0, head_len = 0;
	long body_len = -1;
	char *buf = malloc(cap);
	while (buf) {
		if (n + 1 >= cap) {
			if (cap >= MAX_REPLY) {
				errno = EMSGSIZE;
				break;
			}
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
		if (wait_fd(fd, POLLIN, deadline) < 0)
			break;
		ssize_t r = recv(fd, buf + n, cap - n - 1, MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			break;
		}
		if (r == 0) {
			if (!head_len || (body_len >= 0 && n < head_len + (size_t)body_len)) {
				errno = ECONNRESET; /* closed without a whole answer */
				break;
			}
			buf[n] = '\0';
			*len = n;
			return buf;
		}
		size_t from = n > 3 ? n - 3 : 0; /* the blank line may straddle two reads */
		n += (size_t)r;
		buf[n] = '\0';
		if (!head_len) {
			char *end = memmem(buf + from, n - from, "\r\n\r\n", 4);
			if (end) {
				head_len = (size_t)(end + 4 - buf);
				body_len = content_length(buf, head_len);
			}
		}
		if (head_len && body_len >= 0 && n >= head_len + (size_t)body_len) {
			*len = n;
			return buf;
		}
	}
	int e = errno;
	free(buf);
	errno = e;
	return NULL;
}

/* Decodes a chunked body in place; returns its length. */
static size_t dechunk(char *body)
{
	char *in = body, *out = body;
	for (;;) {
		char *endp;
		unsigned long size = strtoul(in, &endp, 16);
		char *line = strstr(endp, "\r\n");
		if (!line || size == 0)
			break;
		in = line + 2;
		if (strlen(in) < size)
			size = strlen(in);
		memmove(out, in, size);
		out += size;
		in += size;
		if (strncmp(in, "\r\n", 2) == 0)
			in += 2;
	}
	*out = '\0';
	return (size_t)(out - body);
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
	char head[2560];
	int hlen = snprintf(head, sizeof(head),
			    "%s %s HTTP/1.1\r\nHost: localhost\r\nUser-Agent: fibril-cni\r\n"
			    "Accept: application/json\r\nConnection: close\r\n%s"
			    "Content-Length: %zu\r\n\r\n",
			    method, path, body ? "Content-Type: application/json\r\n" : "", body_len);
	if (hlen < 0 || (size_t)hlen >= sizeof(head))
		return cni_error(CNI_ERR_IO, path, "request path too long: %s", path);

	int fd = agent_connect();
	if (fd < 0)
		return unreachable(errno, method, path);
	size_t len = 0;
	char *resp = NULL;
	if (send_all(fd, head, (size_t)hlen, deadline) == 0 && send_all(fd, text, body_len, deadline) == 0)
		resp = recv_all(fd, &len, deadline);
	int e = errno;
	close(fd);
	if (!resp)
		return unreachable(e, method, path);

	char *sep = strstr(resp, "\r\n\r\n");
	if (strncmp(resp, "HTTP/1.", 7) != 0 || strlen(resp) < 12 || !sep) {
		free(resp);
		return cni_error(FCNI_ERR_AGENT, g_socket, "the agent's reply to %s %s is not HTTP", method, path);
	}
	reply->status = strtol(resp + 9, NULL, 10);
	*sep = '\0';
	char *payload = sep + 4;
	bool chunked = false;
	for (char *line = strstr(resp, "\r\n"); line; line = strstr(line, "\r\n")) {
		line += 2;
		char *eol = strstr(line, "\r\n");
		size_t n = eol ? (size_t)(eol - line) : strlen(line);
		if (n > 18 && strncasecmp(line, "Transfer-Encoding:", 18) == 0 && memmem(line, n, "chunked", 7))
			chunked = true;
	}
	if (chunked)
		dechunk(payload);
	if (*payload)
		reply->json = json_tokener_parse(payload);
	const char *err = json_str(reply->json, "error");
	if (err)
		snprintf(reply->error, sizeof(reply->error), "%s", err);
	else if (reply->status >= 400)
		snprintf(reply->error, sizeof(reply->error), "HTTP %ld", reply->status);
	free(resp);
	return 0;
}

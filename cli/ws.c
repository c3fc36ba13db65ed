/* cli/ws.c - a small websocket client (RFC 6455) for the agent's streams
 * on its unix socket: the upgrade request, then text messages handed to a
 * callback until the agent closes the stream. Client frames are masked as
 * the RFC asks; pings are answered. Enough for `fibril observe -f`. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"

#define WS_MAX_MESSAGE (16u << 20)

/* The whole buffer written (out) or read, across short transfers and
 * signals: 0, or -1 on an error or the end of the stream. */
static int transfer_all(int fd, void *buf, size_t len, bool out)
{
	char *p = buf;
	while (len) {
		ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	return transfer_all(fd, (void *)buf, len, true);
}

static int read_full(int fd, void *buf, size_t len)
{
	return transfer_all(fd, buf, len, false);
}

/* One masked client frame (the mask need not be secret on a unix socket,
 * but the server must see one). */
static int send_frame(int fd, int opcode, const unsigned char *data, size_t len)
{
	unsigned char hdr[14];
	size_t h = 0;
	hdr[h++] = (unsigned char)(0x80 | opcode);
	if (len < 126) {
		hdr[h++] = (unsigned char)(0x80 | len);
	} else {
		hdr[h++] = 0x80 | 126;
		hdr[h++] = (unsigned char)(len >> 8);
		hdr[h++] = (unsigned char)len;
	}
	const unsigned char mask[4] = {0x12, 0x34, 0x56, 0x78};
	memcpy(hdr + h, mask, 4);
	h += 4;
	unsigned char body[125];
	if (len > sizeof(body))
		len = sizeof(body);
	for (size_t i = 0; i < len; i++)
		body[i] = data[i] ^ mask[i % 4];
	return write_all(fd, hdr, h) || write_all(fd, body, len) ? -1 : 0;
}

int ws_connect(const char *socket_path, const char *path_and_query)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", socket_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		print_error("cannot reach the agent at %s: %s", socket_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char *req = xasprintf("GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
			      "Connection: Upgrade\r\nSec-WebSocket-Key: ZmlicmlsLW9ic2VydmUtZg==\r\n"
			      "Sec-WebSocket-Version: 13\r\n\r\n",
			      path_and_query);
	int rc = write_all(fd, req, strlen(req));
	free(req);
	/* the answer's head, byte by byte so no frame byte is read with it */
	char head[4096];
	size_t n = 0;
	while (rc == 0 && n < sizeof(head) - 1) {
		if (read_full(fd, head + n, 1)) {
			rc = -1;
			break;
		}
		n++;
		if (n >= 4 && !memcmp(head + n - 4, "\r\n\r\n", 4))
			break;
	}
	head[n] = '\0';
	if (rc || strncmp(head, "HTTP/1.1 101", 12) != 0) {
		char *line = clean_ndup(head, strcspn(head, "\r\n"));
		print_error("the agent refused the stream %s: %s", path_and_query,
			    *line ? line : "no answer");
		free(line);
		close(fd);
		return -1;
	}
	return fd;
}

int ws_read(int fd, const char *what, int (*on_message)(const char *text, size_t len, void *ud),
	    void *ud)
{
	int rc = 0;
	unsigned char *msg = NULL;
	size_t msg_len = 0;
	for (;;) {
		unsigned char h2[2];
		if (read_full(fd, h2, 2))
			break; /* the agent went away */
		int opcode = h2[0] & 0x0f;
		bool fin = h2[0] & 0x80;
		uint64_t len = h2[1] & 0x7f;
		unsigned char ext[8];
		if (len == 126) {
			if (read_full(fd, ext, 2))
				break;
			len = (uint64_t)ext[0] << 8 | ext[1];
		} else if (len == 127) {
			if (read_full(fd, ext, 8))
				break;
			len = 0;
			for (int i = 0; i < 8; i++)
				len = len << 8 | ext[i];
		}
		unsigned char mask[4] = {0};
		if ((h2[1] & 0x80) && read_full(fd, mask, 4))
			break;
		if (msg_len + len > WS_MAX_MESSAGE) {
			print_error("stream %s: a message over %u bytes", what, WS_MAX_MESSAGE);
			rc = -1;
			break;
		}
		unsigned char *grown = xrealloc(msg, msg_len + len + 1);
		msg = grown;
		if (read_full(fd, msg + msg_len, len))
			break;
		if (h2[1] & 0x80)
			for (uint64_t i = 0; i < len; i++)
				msg[msg_len + i] ^= mask[i % 4];
		if (opcode == 0x8) { /* close */
			send_frame(fd, 0x8, msg + msg_len, len >= 2 ? 2 : 0);
			break;
		}
		if (opcode == 0x9) { /* ping */
			send_frame(fd, 0xA, msg + msg_len, len);
			continue;
		}
		if (opcode == 0xA)
			continue;
		msg_len += len;
		if (!fin)
			continue;
		msg[msg_len] = '\0';
		if (on_message((const char *)msg, msg_len, ud)) {
			rc = 1;
			break;
		}
		msg_len = 0;
	}
	free(msg);
	close(fd);
	return rc;
}

int ws_follow(const char *socket_path, const char *path_and_query,
	      int (*on_message)(const char *text, size_t len, void *ud), void *ud)
{
	int fd = ws_connect(socket_path, path_and_query);
	return fd < 0 ? -1 : ws_read(fd, path_and_query, on_message, ud);
}

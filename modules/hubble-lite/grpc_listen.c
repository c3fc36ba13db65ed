/* modules/hubble-lite/grpc_listen.c - the listeners of hubble-lite's gRPC
 * server: the unix socket (a stale socket of an earlier run replaced,
 * anything else at the path refused; mode 0660), the TCP listener, and
 * the TLS context it requires: the server's certificate and key, client
 * certificates verified against grpc-tls-client-ca and required, TLS 1.2
 * or newer, HTTP/2 only (ALPN "h2", which gRPC clients ask for). */
#include "grpc.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

int hl_listen_unix(const char *path, int *out, char *err, size_t errlen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "[hubble-lite] grpc-socket: path longer than %zu bytes: %s",
			 sizeof(sa.sun_path) - 1, path);
		return -1;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "[hubble-lite] grpc-socket: %s exists and is not a socket", path);
			return -1;
		}
		/* a stale socket of an earlier run goes; a live one is another
		 * agent's (a shared run-dir): not taken from it */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close(probe);
		if (live) {
			snprintf(err, errlen, "[hubble-lite] grpc-socket: %s is in use by another process", path);
			return -1;
		}
		unlink(path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || chmod(path, 0660) ||
	    listen(fd, 64)) {
		snprintf(err, errlen, "[hubble-lite] grpc-socket %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*out = fd;
	return 0;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned int inlen, void *arg)
{
	(void)ssl, (void)arg;
	static const unsigned char h2[] = "\x02h2";
	unsigned char *sel;
	if (SSL_select_next_proto(&sel, outlen, h2, 3, in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_ALERT_FATAL; /* HTTP/2 only */
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

SSL_CTX *hl_tls_server_ctx(const char *cert, const char *key, const char *ca, char *err,
			   size_t errlen)
{
	if (!*cert || !*key || !*ca) {
		snprintf(err, errlen,
			 "[hubble-lite] grpc-listen needs grpc-tls-cert, grpc-tls-key and "
			 "grpc-tls-client-ca (remote readers must show a client certificate); "
			 "missing: %s",
			 !*cert ? "grpc-tls-cert" : !*key ? "grpc-tls-key" : "grpc-tls-client-ca");
		return NULL;
	}
	SSL_CTX *tls = SSL_CTX_new(TLS_server_method());
	const char *what = "grpc-tls-cert";
	if (!tls || !SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION) ||
	    SSL_CTX_use_certificate_chain_file(tls, cert) != 1 ||
	    (what = "grpc-tls-key", SSL_CTX_use_PrivateKey_file(tls, key, SSL_FILETYPE_PEM) != 1) ||
	    (what = "grpc-tls-key (does not match grpc-tls-cert)", SSL_CTX_check_private_key(tls) != 1) ||
	    (what = "grpc-tls-client-ca", SSL_CTX_load_verify_locations(tls, ca, NULL) != 1)) {
		char e[160];
		ERR_error_string_n(ERR_get_error(), e, sizeof(e));
		snprintf(err, errlen, "[hubble-lite] %s: %s", what, e);
		SSL_CTX_free(tls);
		return NULL;
	}
	SSL_CTX_set_verify(tls, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	SSL_CTX_set_mode(tls, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
	SSL_CTX_set_alpn_select_cb(tls, alpn_select, NULL);
	return tls;
}

/* "host:port" or "[v6]:port" */
int hl_listen_tcp(const char *spec, int *out, char *err, size_t errlen)
{
	char host[128], *port;
	snprintf(host, sizeof(host), "%s", spec);
	char *h = host;
	if (*h == '[') {
		char *end = strchr(h, ']');
		port = end && end[1] == ':' ? end + 2 : NULL;
		if (end)
			*end = '\0';
		h++;
	} else {
		port = strrchr(h, ':');
		if (port)
			*port++ = '\0';
	}
	struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV,
				 .ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (!port || !*port || getaddrinfo(*h ? h : NULL, port, &hints, &ai) || !ai) {
		snprintf(err, errlen, "[hubble-lite] grpc-listen: not ADDRESS:PORT: \"%s\"", spec);
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
		snprintf(err, errlen, "[hubble-lite] grpc-listen %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	*out = fd;
	return 0;
}

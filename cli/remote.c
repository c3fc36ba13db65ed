/* cli/remote.c - the CLI's way to a remote agent, with Hubble's flags:
 * --server ADDRESS:PORT (the agent's api-tcp-listen, or with --tls its
 * api-remote-listen), --tls, --tls-ca-cert-files, --tls-client-cert-file,
 * --tls-client-key-file, --tls-server-name. It parses and checks those
 * options, sets up libcurl for one request (cli/client.c), and opens the
 * TCP (+ TLS, OpenSSL) connection a websocket stream reads (cli/ws.c):
 * the server's certificate verified against the CA files and the name,
 * every failure said in one line naming the server and what failed. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "cli.h"

#define REMOTE_TIMEOUT_S 10

enum { OPT_SERVER = REMOTE_OPT_BASE, OPT_TLS, OPT_TLS_CA, OPT_TLS_CERT, OPT_TLS_KEY, OPT_TLS_NAME };

static const struct option remote_opts[REMOTE_NOPTS] = {
	{"server", required_argument, NULL, OPT_SERVER},
	{"tls", no_argument, NULL, OPT_TLS},
	{"tls-ca-cert-files", required_argument, NULL, OPT_TLS_CA},
	{"tls-client-cert-file", required_argument, NULL, OPT_TLS_CERT},
	{"tls-client-key-file", required_argument, NULL, OPT_TLS_KEY},
	{"tls-server-name", required_argument, NULL, OPT_TLS_NAME},
};

const char remote_usage[] =
	"  --server ADDRESS:PORT        a remote agent's listener, not the socket\n"
	"                               (plain HTTP: its api-tcp-listen)\n"
	"  --tls                        TLS to --server (its api-remote-listen)\n"
	"  --tls-ca-cert-files FILE[,FILE]  CAs the server's certificate must chain to\n"
	"                               (default: the system's)\n"
	"  --tls-client-cert-file FILE, --tls-client-key-file FILE\n"
	"                               this reader's certificate and its key\n"
	"  --tls-server-name NAME       the name the server's certificate must carry\n"
	"                               (default: the address of --server)\n";

const struct option *remote_longopts(void)
{
	return remote_opts;
}

int remote_option(int c, char *arg)
{
	switch (c) {
	case OPT_SERVER:
		if (!*arg)
			return usage_error("--server: empty address (expected ADDRESS:PORT)");
		opt.server = arg;
		return 0;
	case OPT_TLS:
		opt.tls = true;
		return 0;
	case OPT_TLS_CA: /* repeatable, and comma-separated as Hubble's */
		for (char *save = NULL, *f = strtok_r(arg, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
			if (opt.n_tls_ca == REMOTE_MAX_CA)
				return usage_error("--tls-ca-cert-files: at most %d files", REMOTE_MAX_CA);
			opt.tls_ca_files[opt.n_tls_ca++] = f;
		}
		return 0;
	case OPT_TLS_CERT:
		opt.tls_cert = arg;
		return 0;
	case OPT_TLS_KEY:
		opt.tls_key = arg;
		return 0;
	case OPT_TLS_NAME:
		opt.tls_server_name = arg;
		return 0;
	}
	return usage_error("unknown remote option");
}

/* Splits ADDRESS:PORT ("[v6]:PORT" for an IPv6 address): 0, or -1. */
static int split_server(const char *server, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(server, ':');
	if (!colon || !colon[1] || colon == server)
		return -1;
	const char *h = server, *hend = colon;
	if (*h == '[') {
		if (hend[-1] != ']')
			return -1;
		h++, hend--;
	} else if (memchr(server, ':', (size_t)(colon - server))) {
		return -1; /* a bare IPv6 address: ambiguous */
	}
	size_t n = (size_t)(hend - h);
	if (!n || n >= hlen || strlen(colon + 1) >= plen)
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	strcpy(port, colon + 1);
	char *end;
	long p = strtol(port, &end, 10);
	return *end || p < 1 || p > 65535 ? -1 : 0;
}

int remote_check_options(void)
{
	const char *flag = opt.n_tls_ca ? "--tls-ca-cert-files" : opt.tls_cert ? "--tls-client-cert-file"
						 : opt.tls_key ? "--tls-client-key-file"
						 : opt.tls_server_name ? "--tls-server-name" : NULL;
	char host[256], port[8];
	if (flag && !opt.tls)
		return usage_error("%s goes with --tls", flag);
	if (opt.tls && !opt.server)
		return usage_error("--tls goes with --server ADDRESS:PORT");
	if (opt.server && split_server(opt.server, host, sizeof(host), port, sizeof(port)))
		return usage_error("--server '%s' is not ADDRESS:PORT ([ADDRESS]:PORT for IPv6)", opt.server);
	if (!opt.tls_cert != !opt.tls_key)
		return usage_error("%s needs %s", opt.tls_cert ? "--tls-client-cert-file" : "--tls-client-key-file",
				   opt.tls_cert ? "--tls-client-key-file" : "--tls-client-cert-file");
	return 0;
}

/* "ADDRESS:PORT", or "ADDRESS:PORT (as NAME)" with --tls-server-name. */
static const char *server_text(void)
{
	static char text[600];
	if (opt.tls_server_name)
		snprintf(text, sizeof(text), "%s (as %s)", opt.server, opt.tls_server_name);
	else
		snprintf(text, sizeof(text), "%s", opt.server);
	return text;
}

/* ---- one request through libcurl (cli/client.c) ----------------------------- */

char *remote_curl_setup(void *curl, const char *path, struct curl_slist **hdrs)
{
	char host[256], port[8];
	split_server(opt.server, host, sizeof(host), port, sizeof(port)); /* checked */
	if (!opt.tls)
		return xasprintf("http://%s/v1/%s", opt.server, path);
	if (opt.n_tls_ca == 1) {
		curl_easy_setopt(curl, CURLOPT_CAINFO, opt.tls_ca_files[0]);
	} else if (opt.n_tls_ca > 1) {
		/* several CA files: one bundle of them all */
		static char *bundle;
		size_t len = 0;
		for (size_t i = 0; i < opt.n_tls_ca; i++) {
			char *data;
			size_t n;
			if (read_input("--tls-ca-cert-files", opt.tls_ca_files[i], 1 << 20, &data, &n))
				return NULL;
			bundle = xrealloc(bundle, len + n + 2);
			memcpy(bundle + len, data, n);
			len += n;
			bundle[len++] = '\n';
			free(data);
		}
		struct curl_blob blob = {.data = bundle, .len = len, .flags = CURL_BLOB_COPY};
		curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &blob);
	}
	if (opt.tls_cert) {
		curl_easy_setopt(curl, CURLOPT_SSLCERT, opt.tls_cert);
		curl_easy_setopt(curl, CURLOPT_SSLKEY, opt.tls_key);
	}
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
	if (!opt.tls_server_name)
		return xasprintf("https://%s/v1/%s", opt.server, path);
	/* verify (and SNI) against NAME, connect to ADDRESS: the URL names
	 * NAME, CONNECT_TO sends it to the address, and Host stays the
	 * address (the agent answers a name in Host with 421) */
	static struct curl_slist *connect_to;
	char *map = xasprintf("%s:%s:%s:%s", opt.tls_server_name, port, host, port);
	curl_slist_free_all(connect_to);
	connect_to = curl_slist_append(NULL, map);
	free(map);
	curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect_to);
	char *h = xasprintf("Host: %s", opt.server);
	*hdrs = curl_slist_append(*hdrs, h);
	free(h);
	return xasprintf("https://%s:%s/v1/%s", opt.tls_server_name, port, path);
}

void remote_report_curl_error(int curl_code, const char *errbuf, long os_errno)
{
	CURLcode rc = (CURLcode)curl_code;
	const char *why = *errbuf ? errbuf : curl_easy_strerror(rc);
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		print_error("cannot connect to the agent at %s: %s", opt.server,
			    os_errno ? strerror((int)os_errno) : why);
		break;
	case CURLE_OPERATION_TIMEDOUT:
		print_error("the agent at %s did not answer within %d s", opt.server, REMOTE_TIMEOUT_S);
		break;
	case CURLE_PEER_FAILED_VERIFICATION:
		print_error("TLS: the certificate of the agent at %s failed verification "
			    "(--tls-ca-cert-files, --tls-server-name): %s", server_text(), why);
		break;
	case CURLE_SSL_CACERT_BADFILE:
		print_error("TLS: cannot load --tls-ca-cert-files: %s", why);
		break;
	case CURLE_SSL_CERTPROBLEM:
		print_error("TLS: cannot use the client certificate or key "
			    "(--tls-client-cert-file, --tls-client-key-file): %s", why);
		break;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
		print_error("TLS: the agent at %s refused the handshake%s: %s", server_text(),
			    opt.tls_cert ? "" : " (no client certificate given: --tls-client-cert-file)", why);
		break;
	default:
		print_error("request to the agent at %s failed: %s", opt.server, why);
	}
}

/* ---- a stream's connection (cli/ws.c) --------------------------------------- */

static char tls_error[1024];

/* The OpenSSL error queue's first reason (or what), and clears the queue. */
static const char *ssl_reason(const char *what)
{
	static char buf[256];
	unsigned long e = ERR_get_error();
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	else
		snprintf(buf, sizeof(buf), "%s", what);
	ERR_clear_error();
	return buf;
}

static ssize_t plain_read(struct ws_conn *c, void *buf, size_t len)
{
	return read(c->fd, buf, len);
}

static ssize_t plain_write(struct ws_conn *c, const void *buf, size_t len)
{
	return write(c->fd, buf, len);
}

static void plain_close(struct ws_conn *c)
{
	close(c->fd);
}

/* A TLS failure after the handshake (TLS 1.3: the server's refusal of a
 * client certificate comes with the first read) is kept for tls_why. */
static void tls_note_failure(struct ws_conn *c, int ret)
{
	int e = SSL_get_error(c->tls, ret);
	/* the server's alert, or (when it closed before our request was
	 * read) a reset or an end without close_notify in its place */
	const char *why = e == SSL_ERROR_SSL ? ssl_reason("error")
			  : e == SSL_ERROR_SYSCALL ? (ret == 0 || !errno ? "the connection ended"
									 : strerror(errno))
						   : NULL;
	if (why && !*tls_error)
		snprintf(tls_error, sizeof(tls_error),
			 "TLS: the agent at %s refused the handshake%s: %s", server_text(),
			 opt.tls_cert ? "" : " (no client certificate given: --tls-client-cert-file)", why);
}

static ssize_t tls_read(struct ws_conn *c, void *buf, size_t len)
{
	size_t got = 0;
	/* what one record brought, and what OpenSSL already holds decrypted */
	do {
		int n = SSL_read(c->tls, (char *)buf + got, len - got > INT32_MAX ? INT32_MAX : (int)(len - got));
		if (n <= 0) {
			tls_note_failure(c, n);
			if (got)
				break;
			if (SSL_get_error(c->tls, n) == SSL_ERROR_SYSCALL && errno == EINTR)
				errno = EINTR;
			return SSL_get_error(c->tls, n) == SSL_ERROR_ZERO_RETURN ? 0 : -1;
		}
		got += (size_t)n;
	} while (got < len && SSL_pending(c->tls) > 0);
	return (ssize_t)got;
}

static ssize_t tls_write(struct ws_conn *c, const void *buf, size_t len)
{
	int n = SSL_write(c->tls, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (n <= 0) {
		tls_note_failure(c, n);
		return -1;
	}
	return n;
}

static void tls_close(struct ws_conn *c)
{
	SSL_shutdown(c->tls);
	SSL_CTX_free(SSL_get_SSL_CTX(c->tls));
	SSL_free(c->tls);
	close(c->fd);
}

static const char *tls_why(struct ws_conn *c)
{
	return c->tls && *tls_error ? tls_error : NULL;
}

/* A connected TCP socket to ADDRESS:PORT (a timeout on connect and on the
 * handshake), or -1 after printing why. */
static int tcp_connect(void)
{
	char host[256], port[8];
	split_server(opt.server, host, sizeof(host), port, sizeof(port)); /* checked */
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG}, *res;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		print_error("cannot connect to the agent at %s: %s", opt.server, gai_strerror(rc));
		return -1;
	}
	int fd = -1, err = 0;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		struct timeval tv = {.tv_sec = REMOTE_TIMEOUT_S};
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (connect(fd, a->ai_addr, a->ai_addrlen)) {
			err = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		print_error("cannot connect to the agent at %s: %s", opt.server, strerror(err));
	return fd;
}

/* The TLS session on fd: the CA files (else the system's), the client's
 * certificate, the name or address checked; 0, or -1 after printing why. */
static int tls_start(struct ws_conn *c)
{
	char host[256], port[8];
	split_server(opt.server, host, sizeof(host), port, sizeof(port));
	const char *name = opt.tls_server_name ? opt.tls_server_name : host;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx) {
		print_error("TLS: cannot set up: %s", ssl_reason("out of memory"));
		return -1;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	for (size_t i = 0; i < opt.n_tls_ca; i++)
		if (SSL_CTX_load_verify_locations(ctx, opt.tls_ca_files[i], NULL) != 1) {
			print_error("TLS: cannot load --tls-ca-cert-files %s: %s", opt.tls_ca_files[i],
				    ssl_reason("not a PEM certificate"));
			goto fail_ctx;
		}
	if (!opt.n_tls_ca)
		SSL_CTX_set_default_verify_paths(ctx);
	if (opt.tls_cert && (SSL_CTX_use_certificate_chain_file(ctx, opt.tls_cert) != 1 ||
			     SSL_CTX_use_PrivateKey_file(ctx, opt.tls_key, SSL_FILETYPE_PEM) != 1 ||
			     SSL_CTX_check_private_key(ctx) != 1)) {
		print_error("TLS: cannot use the client certificate %s with the key %s: %s", opt.tls_cert,
			    opt.tls_key, ssl_reason("unreadable"));
		goto fail_ctx;
	}
	SSL *ssl = SSL_new(ctx);
	if (!ssl) {
		print_error("TLS: cannot set up: %s", ssl_reason("out of memory"));
		goto fail_ctx;
	}
	unsigned char addr[16];
	bool is_ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
	if (is_ip) {
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name);
	} else {
		SSL_set_tlsext_host_name(ssl, name);
		SSL_set1_host(ssl, name);
	}
	SSL_set_fd(ssl, c->fd);
	c->tls = ssl;
	int ret = SSL_connect(ssl);
	if (ret != 1) {
		long v = SSL_get_verify_result(ssl);
		if (v != X509_V_OK)
			print_error("TLS: the certificate of the agent at %s failed verification "
				    "(--tls-ca-cert-files, --tls-server-name): %s", server_text(),
				    X509_verify_cert_error_string(v));
		else {
			tls_note_failure(c, ret);
			print_error("%s", *tls_error ? tls_error : "TLS: the handshake failed");
		}
		SSL_free(ssl);
		c->tls = NULL;
		goto fail_ctx;
	}
	return 0;
fail_ctx:
	SSL_CTX_free(ctx);
	return -1;
}

int remote_follow(const char *path_and_query, int (*on_message)(const char *text, size_t len, void *ud),
		  void *ud)
{
	/* why is set on every remote connection: ws.c then leaves out its
	 * "is the module loaded?" question (a second request to the server) */
	struct ws_conn c = {.read = plain_read, .write = plain_write, .close = plain_close, .why = tls_why};
	if ((c.fd = tcp_connect()) < 0)
		return -1;
	if (opt.tls) {
		if (tls_start(&c)) {
			close(c.fd);
			return -1;
		}
		c.read = tls_read, c.write = tls_write, c.close = tls_close;
	}
	if (ws_upgrade(&c, opt.server, path_and_query)) {
		c.close(&c);
		return -1;
	}
	/* the stream may be quiet for long: no read timeout from here on */
	struct timeval tv = {0};
	setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return ws_read_conn(&c, path_and_query, on_message, ud);
}

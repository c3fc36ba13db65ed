/* modules/kvstore-etcd/tls.c - TLS for https endpoints through OpenSSL:
 * a client context (the CA bundle or the system's, an optional client
 * certificate and key), peer verification against the endpoint's name or
 * address, and non-blocking handshake, read and write for http.c. OpenSSL is
 * only initialised when an https endpoint is configured (libssl is mapped
 * anyway: libwebsockets links it into the agent). OpenSSL writes to the
 * socket with write(2), so a peer that closed would raise SIGPIPE: it is
 * blocked around each call and a pending one consumed, as libcurl does. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "etcd.h"

struct etcd_tls {
	SSL_CTX *ctx;
};

struct etcd_tls_conn {
	SSL *ssl;
};

/* OpenSSL's last error (and the verification result) as one line. */
static void tls_error(SSL *ssl, const char *what, char *why, size_t len)
{
	unsigned long code = ERR_get_error();
	char detail[200] = "";
	if (ssl && SSL_get_verify_result(ssl) != X509_V_OK)
		snprintf(detail, sizeof(detail), "certificate verification failed: %s",
			 X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
	else if (code)
		ERR_error_string_n(code, detail, sizeof(detail));
	else
		snprintf(detail, sizeof(detail), "unexpected end of the connection");
	snprintf(why, len, "%s: %s", what, detail);
	ERR_clear_error();
}

struct etcd_tls *etcd_tls_new(const char *ca_file, const char *cert_file, const char *key_file,
			      char *why, size_t len)
{
	struct etcd_tls *t = calloc(1, sizeof(*t));
	if (!t || !(t->ctx = SSL_CTX_new(TLS_client_method()))) {
		snprintf(why, len, "cannot create the TLS context");
		free(t);
		return NULL;
	}
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF /* a body up to the end of the connection */
	SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	int ok = ca_file ? SSL_CTX_load_verify_locations(t->ctx, ca_file, NULL)
			 : SSL_CTX_set_default_verify_paths(t->ctx);
	if (ok != 1) {
		tls_error(NULL, ca_file ? ca_file : "the system's CA certificates", why, len);
		goto fail;
	}
	if (cert_file && SSL_CTX_use_certificate_chain_file(t->ctx, cert_file) != 1) {
		tls_error(NULL, cert_file, why, len);
		goto fail;
	}
	if (cert_file &&
	    SSL_CTX_use_PrivateKey_file(t->ctx, key_file ? key_file : cert_file, SSL_FILETYPE_PEM) != 1) {
		tls_error(NULL, key_file ? key_file : cert_file, why, len);
		goto fail;
	}
	if (cert_file && SSL_CTX_check_private_key(t->ctx) != 1) {
		tls_error(NULL, "the client key does not match the certificate", why, len);
		goto fail;
	}
	return t;
fail:
	etcd_tls_free(t);
	return NULL;
}

void etcd_tls_free(struct etcd_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

struct etcd_tls_conn *etcd_tls_conn_new(struct etcd_tls *t, int fd, const char *host)
{
	struct etcd_tls_conn *c = calloc(1, sizeof(*c));
	if (!c || !(c->ssl = SSL_new(t->ctx))) {
		free(c);
		return NULL;
	}
	unsigned char addr[16];
	bool is_ip = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
	int ok = SSL_set_fd(c->ssl, fd);
	if (is_ip)
		ok = ok && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host);
	else
		ok = ok && SSL_set_tlsext_host_name(c->ssl, host) && SSL_set1_host(c->ssl, host);
	if (!ok) {
		etcd_tls_conn_free(c);
		return NULL;
	}
	SSL_set_connect_state(c->ssl);
	return c;
}

void etcd_tls_conn_free(struct etcd_tls_conn *c)
{
	if (!c)
		return;
	SSL_free(c->ssl);
	free(c);
}

/* SIGPIPE blocked on this thread for one OpenSSL call (the signal from a
 * socket write is sent to the writing thread). */
struct nopipe {
	sigset_t old;
	bool was_pending;
};

static void nopipe_begin(struct nopipe *np)
{
	sigset_t pipe, pending;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	np->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &np->old);
}

static void nopipe_end(struct nopipe *np)
{
	sigset_t pipe, pending;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	if (!np->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &np->old, NULL);
}

/* After a failed call: wait, the end, or an error. */
static int tls_result(struct etcd_tls_conn *c, int rc, const char *what, char *why, size_t len)
{
	switch (SSL_get_error(c->ssl, rc)) {
	case SSL_ERROR_WANT_READ:
		return ETCD_TLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return ETCD_TLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		tls_error(c->ssl, what, why, len);
		return ETCD_TLS_ERROR;
	}
}

int etcd_tls_handshake(struct etcd_tls_conn *c, char *why, size_t len)
{
	struct nopipe np;
	ERR_clear_error();
	nopipe_begin(&np);
	int rc = SSL_do_handshake(c->ssl);
	nopipe_end(&np);
	if (rc == 1)
		return 0;
	rc = tls_result(c, rc, "TLS handshake", why, len);
	if (rc == 0) { /* closed during the handshake */
		snprintf(why, len, "TLS handshake: the server closed the connection");
		return ETCD_TLS_ERROR;
	}
	return rc;
}

long etcd_tls_read(struct etcd_tls_conn *c, void *buf, size_t n, char *why, size_t len)
{
	size_t got = 0;
	struct nopipe np;
	ERR_clear_error();
	nopipe_begin(&np);
	int rc = SSL_read_ex(c->ssl, buf, n, &got);
	nopipe_end(&np);
	if (rc == 1)
		return (long)got;
	return tls_result(c, rc, "TLS read", why, len);
}

long etcd_tls_write(struct etcd_tls_conn *c, const void *buf, size_t n, char *why, size_t len)
{
	size_t put = 0;
	struct nopipe np;
	ERR_clear_error();
	nopipe_begin(&np);
	int rc = SSL_write_ex(c->ssl, buf, n, &put);
	nopipe_end(&np);
	if (rc == 1)
		return (long)put;
	rc = tls_result(c, rc, "TLS write", why, len);
	return rc == 0 ? ETCD_TLS_ERROR : rc;
}

bool etcd_tls_pending(struct etcd_tls_conn *c)
{
	return SSL_pending(c->ssl) > 0;
}

/* modules/common/http_tls.c - TLS for the https endpoints of the modules'
 * HTTP client through OpenSSL (see http_tls.h): a client context (the CA
 * bundle, a file or PEM text, or the system's; an optional client
 * certificate and key, files or PEM text), peer verification against the
 * endpoint's name or address, and non-blocking handshake, read and write for
 * http_client.c. OpenSSL is only initialised when an https endpoint is
 * configured (libssl is mapped anyway: libwebsockets links it into the
 * agent). OpenSSL writes to the
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
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "http_tls.h"

struct mod_http_tls {
	SSL_CTX *ctx;
};

struct mod_http_tls_conn {
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

/* Every certificate of a PEM text into the context's trust store. */
static int load_ca_pem(SSL_CTX *ctx, const char *pem, size_t n)
{
	BIO *bio = BIO_new_mem_buf(pem, (int)n);
	X509_STORE *store = SSL_CTX_get_cert_store(ctx);
	int count = 0;
	X509 *x;
	while (bio && (x = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
		if (X509_STORE_add_cert(store, x) == 1)
			count++;
		X509_free(x);
	}
	BIO_free(bio);
	if (!count)
		return 0;
	ERR_clear_error(); /* the end of the text */
	return 1;
}

/* The client certificate of a PEM text, with the chain after it. */
static int load_cert_pem(SSL_CTX *ctx, const char *pem, size_t n)
{
	BIO *bio = BIO_new_mem_buf(pem, (int)n);
	X509 *x = bio ? PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL) : NULL;
	int ok = x && SSL_CTX_use_certificate(ctx, x) == 1;
	X509_free(x);
	while (ok && (x = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
		if (SSL_CTX_add0_chain_cert(ctx, x) != 1) {
			X509_free(x);
			ok = 0;
		}
	}
	BIO_free(bio);
	if (ok)
		ERR_clear_error();
	return ok;
}

static int load_key_pem(SSL_CTX *ctx, const char *pem, size_t n)
{
	BIO *bio = BIO_new_mem_buf(pem, (int)n);
	EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
	int ok = key && SSL_CTX_use_PrivateKey(ctx, key) == 1;
	EVP_PKEY_free(key);
	BIO_free(bio);
	return ok;
}

struct mod_http_tls *mod_http_tls_new(const struct mod_http_tls_config *cfg, char *why, size_t len)
{
	struct mod_http_tls *t = calloc(1, sizeof(*t));
	if (!t || !(t->ctx = SSL_CTX_new(TLS_client_method()))) {
		snprintf(why, len, "cannot create the TLS context");
		free(t);
		return NULL;
	}
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->ctx, cfg->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF /* a body up to the end of the connection */
	SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	int ok = cfg->ca_pem	? load_ca_pem(t->ctx, cfg->ca_pem, cfg->ca_pem_len)
		 : cfg->ca_file ? SSL_CTX_load_verify_locations(t->ctx, cfg->ca_file, NULL)
				: SSL_CTX_set_default_verify_paths(t->ctx);
	if (ok != 1 && !cfg->insecure) {
		tls_error(NULL,
			  cfg->ca_pem	 ? "the CA certificates given"
			  : cfg->ca_file ? cfg->ca_file
					 : "the system's CA certificates",
			  why, len);
		goto fail;
	}
	ERR_clear_error();
	bool has_cert = cfg->cert_pem || cfg->cert_file;
	const char *cert_name = cfg->cert_pem ? "the client certificate given" : cfg->cert_file;
	if (cfg->cert_pem ? !load_cert_pem(t->ctx, cfg->cert_pem, cfg->cert_pem_len)
	    : cfg->cert_file ? SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert_file) != 1
			     : false) {
		tls_error(NULL, cert_name, why, len);
		goto fail;
	}
	if (has_cert) {
		/* the key: its own text or file, else in the certificate's file */
		const char *key_name = cfg->key_pem    ? "the client key given"
				       : cfg->key_file ? cfg->key_file
						       : cert_name;
		if (cfg->key_pem ? !load_key_pem(t->ctx, cfg->key_pem, cfg->key_pem_len)
		    : cfg->key_file || cfg->cert_file
			? SSL_CTX_use_PrivateKey_file(t->ctx, cfg->key_file ? cfg->key_file : cfg->cert_file,
						      SSL_FILETYPE_PEM) != 1
			: !load_key_pem(t->ctx, cfg->cert_pem, cfg->cert_pem_len)) {
			tls_error(NULL, key_name, why, len);
			goto fail;
		}
		if (SSL_CTX_check_private_key(t->ctx) != 1) {
			tls_error(NULL, "the client key does not match the certificate", why, len);
			goto fail;
		}
	}
	return t;
fail:
	mod_http_tls_free(t);
	return NULL;
}

void mod_http_tls_free(struct mod_http_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

struct mod_http_tls_conn *mod_http_tls_conn_new(struct mod_http_tls *t, int fd, const char *host)
{
	struct mod_http_tls_conn *c = calloc(1, sizeof(*c));
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
		mod_http_tls_conn_free(c);
		return NULL;
	}
	SSL_set_connect_state(c->ssl);
	return c;
}

void mod_http_tls_conn_free(struct mod_http_tls_conn *c)
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
static int tls_result(struct mod_http_tls_conn *c, int rc, const char *what, char *why, size_t len)
{
	switch (SSL_get_error(c->ssl, rc)) {
	case SSL_ERROR_WANT_READ:
		return MOD_HTTP_TLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return MOD_HTTP_TLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		tls_error(c->ssl, what, why, len);
		return MOD_HTTP_TLS_ERROR;
	}
}

int mod_http_tls_handshake(struct mod_http_tls_conn *c, char *why, size_t len)
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
		return MOD_HTTP_TLS_ERROR;
	}
	return rc;
}

long mod_http_tls_read(struct mod_http_tls_conn *c, void *buf, size_t n, char *why, size_t len)
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

long mod_http_tls_write(struct mod_http_tls_conn *c, const void *buf, size_t n, char *why, size_t len)
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
	return rc == 0 ? MOD_HTTP_TLS_ERROR : rc;
}

bool mod_http_tls_pending(struct mod_http_tls_conn *c)
{
	return SSL_pending(c->ssl) > 0;
}

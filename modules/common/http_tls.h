/* modules/common/http_tls.h - TLS for the modules' HTTP client
 * (http_client.c) through OpenSSL: a client context (a CA bundle given as a
 * file or PEM text, else the system's; an optional client certificate and
 * key, files or PEM text; or no verification at all), peer verification
 * against the endpoint's name or address, and non-blocking handshake, read
 * and write. Internal to the modules, not part of the SDK. */
#ifndef FIBRIL_MODULES_HTTP_TLS_H
#define FIBRIL_MODULES_HTTP_TLS_H

#include <stdbool.h>
#include <stddef.h>

/* Where the trust and the client's identity come from: a file path or PEM
 * text (text wins when both are given); all NULL: the system's CAs and no
 * client certificate. */
struct mod_http_tls_config {
	const char *ca_file, *cert_file, *key_file;
	const char *ca_pem, *cert_pem, *key_pem;
	size_t ca_pem_len, cert_pem_len, key_pem_len;
	bool insecure; /* the server's certificate is not checked */
};

struct mod_http_tls;
struct mod_http_tls_conn;

/* The context. NULL with why set. */
struct mod_http_tls *mod_http_tls_new(const struct mod_http_tls_config *cfg, char *why, size_t len);
void mod_http_tls_free(struct mod_http_tls *t);
/* A client session on fd checking host (a name or an address). */
struct mod_http_tls_conn *mod_http_tls_conn_new(struct mod_http_tls *t, int fd, const char *host);
void mod_http_tls_conn_free(struct mod_http_tls_conn *c);
/* The handshake and I/O: >= 0 done (bytes for read/write; 0 from read is
 * the end), MOD_HTTP_TLS_WANT_READ / _WANT_WRITE to wait, or
 * MOD_HTTP_TLS_ERROR with why set. */
#define MOD_HTTP_TLS_WANT_READ (-2)
#define MOD_HTTP_TLS_WANT_WRITE (-3)
#define MOD_HTTP_TLS_ERROR (-1)
int mod_http_tls_handshake(struct mod_http_tls_conn *c, char *why, size_t len);
long mod_http_tls_read(struct mod_http_tls_conn *c, void *buf, size_t n, char *why, size_t len);
long mod_http_tls_write(struct mod_http_tls_conn *c, const void *buf, size_t n, char *why, size_t len);
/* Decrypted bytes wait in OpenSSL's buffer. */
bool mod_http_tls_pending(struct mod_http_tls_conn *c);

#endif

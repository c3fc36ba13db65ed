/* modules/common/b64.h - base64 for the modules (etcd's JSON gateway
 * carries keys and values in it, kubeconfigs carry certificates in it).
 * Internal to the modules, not part of the SDK. */
#ifndef FIBRIL_MODULES_B64_H
#define FIBRIL_MODULES_B64_H

#include <stddef.h>

/* The standard alphabet with '=' padding; malloc'd, NUL-terminated. */
char *mod_b64_encode(const void *data, size_t len);
/* Decode into a malloc'ed, NUL-terminated buffer. Both the standard and
 * the URL-safe alphabet are read; '=' padding and white space (line breaks
 * of PEM-like text) are skipped. 0, -EINVAL on any other byte, -ENOMEM. */
int mod_b64_decode(const char *in, char **out, size_t *out_len);
/* The same into out, which holds n / 4 * 3 + 3 bytes at least (the
 * decoded bytes and a NUL); in is n bytes, not NUL-terminated. */
int mod_b64_decode_into(const char *in, size_t n, char *out, size_t *out_len);

#endif

/* modules/common/b64.c - base64 encoding and decoding (see b64.h), shared
 * by kvstore-etcd (keys and values on the wire) and k8s (kubeconfig
 * *-data fields). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *mod_b64_encode(const void *data, size_t len)
{
	const unsigned char *in = data;
	char *out = malloc(4 * ((len + 2) / 3) + 1);
	if (!out)
		return NULL;
	char *p = out;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < len)
			v |= in[i + 2];
		*p++ = b64_alphabet[(v >> 18) & 63];
		*p++ = b64_alphabet[(v >> 12) & 63];
		*p++ = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
		*p++ = i + 2 < len ? b64_alphabet[v & 63] : '=';
	}
	*p = '\0';
	return out;
}

static int b64_value(int ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+' || ch == '-')
		return 62;
	if (ch == '/' || ch == '_')
		return 63;
	return -1;
}

int mod_b64_decode_into(const char *in, size_t n, char *out, size_t *out_len)
{
	size_t len = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		int ch = (unsigned char)in[i];
		if (ch == '=' || ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t')
			continue;
		int v = b64_value(ch);
		if (v < 0)
			return -EINVAL;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[len++] = (char)((acc >> bits) & 0xff);
		}
	}
	out[len] = '\0';
	*out_len = len;
	return 0;
}

int mod_b64_decode(const char *in, char **out, size_t *out_len)
{
	size_t n = strlen(in);
	char *buf = malloc(n / 4 * 3 + 4);
	if (!buf)
		return -ENOMEM;
	int rc = mod_b64_decode_into(in, n, buf, out_len);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	return 0;
}

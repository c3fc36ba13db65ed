/* tests/fuzz/fuzz_kubeconfig.c - fuzz target: the kubeconfig YAML the k8s
 * module reads (k8s_kubeconfig_load: current-context, the named context,
 * cluster and user, server, CA and client certificate data in base64, token
 * and files relative to the kubeconfig), and the modules' base64 decoder on the
 * whole input. Input: the kubeconfig text (read from a memfd). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "k8s_int.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	struct k8s_conn c;
	char why[512];
	char *decoded = NULL;
	size_t len = 0;

	memset(&c, 0, sizeof(c));
	k8s_kubeconfig_load(fuzz_memfile((const char *)data, size), &c, why, sizeof(why));
	k8s_conn_free(&c);
	if (mod_b64_decode(text, &decoded, &len) == 0 && decoded[len] != '\0')
		abort(); /* decoded text is NUL-terminated */
	free(decoded);
	free(text);
	return 0;
}

/* modules/k8s/k8s_int.h - internals shared by the files of the k8s module:
 * the connection settings read from a kubeconfig or the in-cluster service
 * account (kubeconfig.c). */
#ifndef FIBRIL_K8S_INT_H
#define FIBRIL_K8S_INT_H

#include <stdbool.h>
#include <stddef.h>

struct k8s_conn {
	char *server;          /* https://host:port, no trailing slash */
	char *token;           /* bearer token, or NULL */
	char *token_file;      /* re-read when its mtime changes */
	char *ca_file;         /* CA bundle path, or NULL */
	char *ca_data;         /* decoded PEM */
	size_t ca_len;
	char *cert_file, *key_file;
	char *cert_data, *key_data;
	size_t cert_len, key_len;
	bool insecure;
};

/* Fill c from the kubeconfig at path (its current-context). On error a
 * negative errno and a message in why. */
int k8s_kubeconfig_load(const char *path, struct k8s_conn *c, char *why, size_t why_len);
/* In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account dir. */
int k8s_incluster_load(const char *sa_dir, struct k8s_conn *c, char *why, size_t why_len);
void k8s_conn_free(struct k8s_conn *c);

#endif

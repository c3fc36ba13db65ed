/* modules/k8s/k8s_int.h - internals shared by the files of the k8s module:
 * the connection settings read from a kubeconfig or the in-cluster service
 * account (kubeconfig.c). */
#ifndef FIBRIL_K8S_INT_H
#define FIBRIL_K8S_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Kinds of watch lines that are dropped (logged and counted, the cache is
 * left alone). */
enum k8s_bad_line {
	K8S_BAD_MALFORMED,     /* not a JSON object, or no type / object */
	K8S_BAD_TRUNCATED,     /* the stream ended in the middle of a line */
	K8S_BAD_NO_NAME,       /* ADDED/MODIFIED/DELETED of an object without a name */
	K8S_BAD_UNKNOWN_TYPE,  /* a type other than ADDED MODIFIED DELETED BOOKMARK ERROR */
	K8S_BAD_TRAILING_DATA, /* a valid event followed by more text on its line */
	K8S_BAD_NKINDS
};

/* Per resource: how its watch is doing (informer.c), shown by k8s.c. */
struct fibril_timer;
struct k8s_watch_state {
	struct fibril_timer *idle_timer; /* no byte within watch-idle-timeout: stalled */
	bool stalled;                    /* restarted after a stall, nothing heard since */
	uint64_t stalls;
	uint64_t bad_lines[K8S_BAD_NKINDS];
	unsigned relist_streak;   /* relists forced (410) less than 2 min apart */
	uint64_t last_relist_ms;  /* when the last one was forced */
	char last_error[512];     /* the last error, kept after recovery */
};
/* Fill c from the kubeconfig at path (its current-context). On error a
 * negative errno and a message in why. */
int k8s_kubeconfig_load(const char *path, struct k8s_conn *c, char *why, size_t why_len);
/* In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account dir. */
int k8s_incluster_load(const char *sa_dir, struct k8s_conn *c, char *why, size_t why_len);
void k8s_conn_free(struct k8s_conn *c);

#endif

/* cli/cmd_k8s.c - `fibril k8s status`: the k8s module's informers. */
#include "cli.h"

int cmd_k8s(int argc, char **argv)
{
	return usage_error("k8s: not built yet");
}

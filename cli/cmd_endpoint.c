/* cli/cmd_endpoint.c - `fibril endpoint list|get` and `fibril identity
 * list|get`: the endpoint module's /v1/endpoint and /v1/identity. */
#include "cli.h"

int cmd_endpoint(int argc, char **argv)
{
	return usage_error("endpoint: not built yet");
}

int cmd_identity(int argc, char **argv)
{
	return usage_error("identity: not built yet");
}

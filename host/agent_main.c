/* host/agent_main.c - fibril-agent: the daemon's entry point. The agent's
 * logic lives in libfibril (fibril_agent_main) so the host runtime's
 * internals stay local to the library. */
int fibril_agent_main(int argc, char **argv);

int main(int argc, char **argv)
{
	return fibril_agent_main(argc, argv);
}

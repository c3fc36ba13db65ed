/* host/agent.c - placeholder */

/* host/graph.c - placeholder */

/* host/bus.c - placeholder */

/* host/loop.c - placeholder */

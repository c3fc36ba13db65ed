/* host/lifecycle.c - placeholder */

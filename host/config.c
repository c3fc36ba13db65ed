/* host/config.c - placeholder */

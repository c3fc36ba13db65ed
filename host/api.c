/* host/api.c - placeholder */

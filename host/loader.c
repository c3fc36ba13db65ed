/* host/loader.c - placeholder */

/* host/routes.c - placeholder */

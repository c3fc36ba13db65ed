/* host/service.c - placeholder */

/* host/health.c - placeholder */

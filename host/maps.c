/* host/maps.c - placeholder */

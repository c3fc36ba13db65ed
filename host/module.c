/* host/module.c - placeholder */

/* host/ipalloc.c - placeholder */
#include "internal.h"

/* host/handles.c - generation-checked handles for what a module can release
 * (timers, fd watches, signal watches, bus subscriptions). A module holds an
 * opaque value (slot index + generation), never a pointer into host memory,
 * so cancelling or unsubscribing a handle that was already released - by the
 * module itself, twice, after a one-shot timer fired, or by the host when it
 * released the module - finds a stale generation and does nothing instead of
 * reading freed memory. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

struct handle_slot {
	void *obj;         /* NULL: free */
	uint32_t gen;      /* bumped on every release */
	uint32_t next_free; /* index + 1 of the next free slot, 0: none */
	enum handle_type type;
};

static pthread_mutex_t g_handle_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle_slot *g_slots;
static uint32_t g_nslots, g_cap, g_free_head;

#if UINTPTR_MAX > 0xffffffffu
#define GEN_SHIFT 32
#define INDEX_MASK 0xffffffffu
#define GEN_MASK 0xffffffffu
#else
#define GEN_SHIFT 20
#define INDEX_MASK 0xfffffu
#define GEN_MASK 0xfffu
#endif

static void *encode(uint32_t index, uint32_t gen)
{
	return (void *)(((uintptr_t)(gen & GEN_MASK) << GEN_SHIFT) | (uintptr_t)(index + 1));
}

void *handle_new(enum handle_type type, void *obj)
{
	pthread_mutex_lock(&g_handle_lock);
	uint32_t i;
	if (g_free_head) {
		i = g_free_head - 1;
		g_free_head = g_slots[i].next_free;
	} else {
		if (g_nslots == g_cap) {
			uint32_t cap = g_cap ? g_cap * 2 : 64;
			struct handle_slot *grown = realloc(g_slots, cap * sizeof(*grown));
			if (!grown || cap > INDEX_MASK)
				abort();
			g_slots = grown;
			g_cap = cap;
		}
		i = g_nslots++;
		g_slots[i].gen = 1;
	}
	g_slots[i].obj = obj;
	g_slots[i].type = type;
	g_slots[i].next_free = 0;
	void *h = encode(i, g_slots[i].gen);
	pthread_mutex_unlock(&g_handle_lock);
	return h;
}

/* Caller holds the lock. The slot of a live handle of this type, or NULL. */
static struct handle_slot *slot_of(const void *h, enum handle_type type)
{
	uintptr_t v = (uintptr_t)h;
	uintptr_t index = (v & INDEX_MASK);
	uint32_t gen = (uint32_t)((v >> GEN_SHIFT) & GEN_MASK);
	if (!index || index > g_nslots)
		return NULL;
	struct handle_slot *s = &g_slots[index - 1];
	if (!s->obj || s->type != type || (s->gen & GEN_MASK) != gen)
		return NULL;
	return s;
}

void *handle_get(const void *h, enum handle_type type)
{
	pthread_mutex_lock(&g_handle_lock);
	struct handle_slot *s = slot_of(h, type);
	void *obj = s ? s->obj : NULL;
	pthread_mutex_unlock(&g_handle_lock);
	return obj;
}

void handle_drop(const void *h, enum handle_type type)
{
	pthread_mutex_lock(&g_handle_lock);
	struct handle_slot *s = slot_of(h, type);
	if (s) {
		s->obj = NULL;
		s->gen = (s->gen + 1) & GEN_MASK;
		if (!s->gen)
			s->gen = 1;
		s->next_free = g_free_head;
		g_free_head = (uint32_t)(s - g_slots) + 1;
	}
	pthread_mutex_unlock(&g_handle_lock);
}

unsigned handle_live_count(void)
{
	unsigned n = 0;
	pthread_mutex_lock(&g_handle_lock);
	for (uint32_t i = 0; i < g_nslots; i++)
		n += g_slots[i].obj != NULL;
	pthread_mutex_unlock(&g_handle_lock);
	return n;
}

void handles_fini(void)
{
	pthread_mutex_lock(&g_handle_lock);
	free(g_slots);
	g_slots = NULL;
	g_nslots = g_cap = g_free_head = 0;
	pthread_mutex_unlock(&g_handle_lock);
}

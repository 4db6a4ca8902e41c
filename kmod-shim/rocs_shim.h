/* SPDX-License-Identifier: GPL-2.0 */
/* Internal interfaces between the parts of rocs_shim.ko. */
#ifndef ROCS_SHIM_INTERNAL_H
#define ROCS_SHIM_INTERNAL_H

#include <linux/list.h>
#include <linux/mm.h>
#include <linux/types.h>

#include "include/uapi/rocs_shim.h"

/*
 * Frames of one NUMA node sorted by colour (one pool per node, so that a page changes
 * colour without changing node). The stash keeps at most per_colour_limit frames of each colour
 * so that a request for a colour is usually served without touching the page allocator;
 * the frames that do not fit are given back at once. Only the frames a Restore (or an
 * ORDINARY migration) frees and takes back (rocs_pool_reclaim) may go over their colour's
 * limit, never over @limit in total. All fields are protected by the module's mutex.
 */
struct rocs_pool {
	int nid;			/* the node all frames come from */
	unsigned int colours;		/* power of two */
	unsigned long limit;		/* most frames held in total */
	unsigned long held;		/* frames held now */
	u64 allocated;			/* frames taken from the page allocator */
	u64 released;			/* stash frames given back unused */
	unsigned long count[ROCS_SHIM_MAX_COLOURS];
	unsigned long limit_of[ROCS_SHIM_MAX_COLOURS];	/* most frames held per colour */
	struct list_head frames[ROCS_SHIM_MAX_COLOURS];
};

/* The colour of a frame: the low bits of its frame number, @colours a power of two. */
static inline unsigned int rocs_colour(unsigned int colours, struct page *page)
{
	return page_to_pfn(page) & (colours - 1);
}

static inline unsigned int rocs_colour_of(const struct rocs_pool *pool, struct page *page)
{
	return rocs_colour(pool->colours, page);
}

void rocs_pool_init(struct rocs_pool *pool, int nid, unsigned int colours, unsigned long limit,
		    const unsigned long *pollute);
bool rocs_pool_fill(struct rocs_pool *pool, const unsigned long *wanted,
		    unsigned long max_blocks);
void rocs_pool_drain(struct rocs_pool *pool);
unsigned long rocs_pool_reclaim(struct rocs_pool *pool, const unsigned long *pollute,
				unsigned long freed);
struct page *rocs_pool_take(struct rocs_pool *pool, const unsigned long *wanted,
			    unsigned int *cursor);

#endif

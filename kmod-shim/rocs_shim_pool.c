// SPDX-License-Identifier: GPL-2.0
/*
 * rocs_shim: frames of a wanted colour.
 *
 * The page allocator knows nothing of colours, so frames of a colour are found by
 * allocating and sorting. A naturally aligned block of 2^k frames with 2^k == colours
 * holds exactly one frame of every colour, so one block always yields a frame of any
 * wanted colour; the rest of the block goes to the per-colour stash (bounded) or back to
 * the allocator.
 */
#include <linux/gfp.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/mmzone.h>

#include "rocs_shim.h"

/* Stash frames are held by the module, not by a process: keep them out of movable
 * pageblocks (and CMA), and never retry hard or warn: a short pool is a per-page ENOMEM.
 * Frames come from the pool's node only. */
#define ROCS_GFP (GFP_HIGHUSER | __GFP_NOWARN | __GFP_NORETRY | __GFP_THISNODE)
/* Blocks only from what is free now: no direct compaction or reclaim for them (kswapd may
 * still be woken). Without a block, single frames do. */
#define ROCS_GFP_BLOCK (ROCS_GFP & ~__GFP_DIRECT_RECLAIM)

/* Bounded work per frame asked for; beyond it the request gets ENOMEM. */
#define ROCS_BLOCK_TRIES 4

/*
 * Frames of node @nid. A node has about this many / colours frames of each colour; the
 * stash keeps at most a quarter of them, which also bounds the work of filling it (one
 * block of colours frames per stashed frame of the scarcest colour).
 */
static unsigned long rocs_node_frames(int nid)
{
#ifdef CONFIG_NUMA
	return node_present_pages(nid);
#else
	return totalram_pages();
#endif
}

/*
 * An empty stash for @colours colours. Half of @limit goes to the pollute colours and half
 * to the others: pollute frames are the scarce ones (finding one costs colours/npollute
 * allocations), and Restore needs ordinary frames at the same rate as Pollute needs them.
 */
void rocs_pool_init(struct rocs_pool *pool, int nid, unsigned int colours, unsigned long limit,
		    const unsigned long *pollute)
{
	unsigned int npollute = bitmap_weight(pollute, colours);
	unsigned int c;

	pool->nid = nid;
	pool->colours = colours;
	pool->limit = limit;
	pool->held = 0;
	for (c = 0; c < ROCS_SHIM_MAX_COLOURS; c++) {
		pool->count[c] = 0;
		pool->limit_of[c] = 0;
		INIT_LIST_HEAD(&pool->frames[c]);
	}
	for (c = 0; c < colours; c++)
		pool->limit_of[c] = min(test_bit(c, pollute) ? (limit / 2) / npollute
							    : (limit - limit / 2) / (colours - npollute),
					rocs_node_frames(nid) / colours / 4);
}

/* Give every stashed frame back to the page allocator. */
void rocs_pool_drain(struct rocs_pool *pool)
{
	struct page *page, *next;
	unsigned int c;

	for (c = 0; c < ROCS_SHIM_MAX_COLOURS; c++) {
		list_for_each_entry_safe(page, next, &pool->frames[c], lru) {
			list_del(&page->lru);
			__free_page(page);
			pool->released++;
		}
		pool->count[c] = 0;
	}
	pool->held = 0;
}

static void rocs_pool_keep(struct rocs_pool *pool, struct page *page)
{
	unsigned int c = rocs_colour_of(pool, page);

	list_add(&page->lru, &pool->frames[c]);
	pool->count[c]++;
	pool->held++;
}

/*
 * Keep a frame we own (refcount 1, not on any list) if its colour has room, else free it.
 * The total check matters after a reclaim has put a colour over its share.
 */
static void rocs_pool_put(struct rocs_pool *pool, struct page *page)
{
	unsigned int c = rocs_colour_of(pool, page);

	if (pool->count[c] < pool->limit_of[c] && pool->held < pool->limit) {
		rocs_pool_keep(pool, page);
	} else {
		__free_page(page);
		pool->released++;
	}
}

static struct page *rocs_pool_pop(struct rocs_pool *pool, unsigned int c)
{
	struct page *page = list_first_entry(&pool->frames[c], struct page, lru);

	list_del_init(&page->lru);
	pool->count[c]--;
	pool->held--;
	return page;
}

/*
 * A frame of one of the colours set in @wanted (a bitmap of pool->colours bits), or NULL
 * when none could be found within bounded work. Stashed frames are handed out round robin
 * over the wanted colours (@cursor keeps the place) so that a range spreads over all of
 * them. The caller owns the frame (refcount 1).
 */
struct page *rocs_pool_take(struct rocs_pool *pool, const unsigned long *wanted,
			    unsigned int *cursor)
{
	unsigned int order = ilog2(pool->colours);
	unsigned int i, c, tries;
	struct page *block, *got;

	for (i = 0; i < pool->colours; i++) {
		c = (*cursor + i) & (pool->colours - 1);
		if (test_bit(c, wanted) && pool->count[c]) {
			*cursor = c + 1;
			return rocs_pool_pop(pool, c);
		}
	}

	for (tries = 0; tries < ROCS_BLOCK_TRIES; tries++) {
		block = alloc_pages_node(pool->nid, ROCS_GFP_BLOCK, order);
		if (!block)
			break;
		pool->allocated += 1UL << order;
		if (order)
			split_page(block, order);
		got = NULL;
		for (i = 0; i < (1U << order); i++) {
			struct page *frame = block + i;

			if (!got && test_bit(rocs_colour_of(pool, frame), wanted))
				got = frame;
			else
				rocs_pool_put(pool, frame);
		}
		if (got)
			return got;
	}

	/* No block of that order: single frames, a bounded number of them. */
	for (tries = 0; tries < ROCS_BLOCK_TRIES * pool->colours; tries++) {
		struct page *frame = alloc_pages_node(pool->nid, ROCS_GFP, 0);

		if (!frame)
			return NULL;
		pool->allocated++;
		if (test_bit(rocs_colour_of(pool, frame), wanted))
			return frame;
		rocs_pool_put(pool, frame);
	}
	return NULL;
}

/*
 * Fill the stash of every colour set in @wanted towards its limit, with at most
 * @max_blocks blocks from the page allocator. Each block brings one frame of every colour,
 * so filling takes one block per missing frame of the emptiest wanted colour. True when
 * frames are still missing and the allocator was still giving.
 */
bool rocs_pool_fill(struct rocs_pool *pool, const unsigned long *wanted,
		    unsigned long max_blocks)
{
	unsigned int order = ilog2(pool->colours);
	unsigned long missing = 0, blocks;
	unsigned int c, i;

	for_each_set_bit(c, wanted, pool->colours)
		if (pool->count[c] < pool->limit_of[c])
			missing = max(missing, pool->limit_of[c] - pool->count[c]);
	for (blocks = 0; blocks < missing; blocks++) {
		struct page *block;

		if (blocks == max_blocks)
			return true;
		block = alloc_pages_node(pool->nid, ROCS_GFP_BLOCK, order);
		if (!block)
			return false;
		pool->allocated += 1UL << order;
		if (order)
			split_page(block, order);
		for (i = 0; i < (1U << order); i++)
			rocs_pool_put(pool, block + i);
		cond_resched();
	}
	return false;
}

/* Frames a reclaim sweep takes beyond those it expects, and the run of frames of other
 * colours after which it stops: frees by others may come between ours. */
#define ROCS_RECLAIM_SLACK 16

/* A frame the stash may keep from a sweep: not one that must stay movable. */
static bool rocs_reclaimable(struct page *frame)
{
	return page_zonenum(frame) != ZONE_MOVABLE;
}

/*
 * Take back into the stash the @freed frames of the colours in @pollute that
 * migrate_vma_finalize has just freed on this node, so that they do not become the next
 * ordinary pages of the target (or of anyone) on this CPU.
 *
 * Why this way: the kernel frees a migrated page's old frame itself (it goes back through
 * the LRU, which may still look at it, so holding a reference across finalize to keep it
 * would not be safe), into this CPU's per-cpu free list of its pageblock's migratetype.
 * Those lists hand out the frame freed last first, so the first order-0 frames allocated
 * here are the ones just freed. Sound because it only allocates and frees frames through
 * the page allocator and owns what it keeps (refcount 1); whether the allocator hands out
 * exactly those frames decides only how well it works, never correctness.
 *
 * A sweep takes frames from the unmovable list (where frames the stash handed out go back
 * when their pageblock is unmovable), then, when some are still missing, from the movable
 * one (their pageblock was movable: the list the target's own page faults take from).
 * Frames of pollute colours are kept while the node's stash holds fewer than pool_limit
 * frames, even above their colour's share (they were the target's pages a moment ago);
 * frames of other colours are held until the sweep ends, then freed. It stops after
 * @freed + 2 * ROCS_RECLAIM_SLACK frames, or after ROCS_RECLAIM_SLACK frames in a row of
 * other colours. Never reclaims or compacts, never fails: returns the frames kept.
 */
unsigned long rocs_pool_reclaim(struct rocs_pool *pool, const unsigned long *pollute,
				unsigned long freed)
{
	static const gfp_t lists[] = {
		ROCS_GFP_BLOCK,
#ifndef CONFIG_CMA
		/* With CMA, a movable allocation may return a CMA frame, and telling one takes
		 * symbols 6.1 does not export: no movable sweep there. */
		ROCS_GFP_BLOCK | __GFP_MOVABLE,
#endif
	};
	unsigned long budget = freed + 2 * ROCS_RECLAIM_SLACK, kept = 0;
	struct page *frame, *next;
	LIST_HEAD(others);
	unsigned int i, run;

	for (i = 0; i < ARRAY_SIZE(lists) && kept < freed; i++) {
		for (run = 0; budget && run < ROCS_RECLAIM_SLACK && pool->held < pool->limit;
		     budget--) {
			frame = alloc_pages_node(pool->nid, lists[i], 0);
			if (!frame)
				break;
			pool->allocated++;
			if (test_bit(rocs_colour_of(pool, frame), pollute) && rocs_reclaimable(frame)) {
				rocs_pool_keep(pool, frame);
				kept++;
				run = 0;
			} else {
				/* Not freed yet: the allocator would hand it straight back. */
				list_add(&frame->lru, &others);
				run++;
			}
		}
	}
	list_for_each_entry_safe(frame, next, &others, lru) {
		list_del(&frame->lru);
		__free_page(frame);
		pool->released++;
	}
	return kept;
}

/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * rocs_shim: the ABI of /dev/rocs_shim, the colour-aware page migration device of rocs.
 *
 * Every struct has a fixed size and layout on every architecture: fields are __u64, __s32
 * or __u32 in pairs, user pointers travel as __u64, and padding is explicit and must be
 * zero (the module rejects non-zero reserved fields with EINVAL, so they can gain a
 * meaning later). The Rust client mirrors these structs and a test compares sizes and
 * offsets with this header.
 */
#ifndef _UAPI_ROCS_SHIM_H
#define _UAPI_ROCS_SHIM_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Bumped on every incompatible change of a struct or an ioctl. */
#define ROCS_SHIM_ABI_VERSION 2

#define ROCS_SHIM_DEVICE "/dev/rocs_shim"

/* Colours are the cache-set bits of a physical address just above the page offset. */
#define ROCS_SHIM_MAX_COLOURS 1024
#define ROCS_SHIM_MASK_WORDS (ROCS_SHIM_MAX_COLOURS / 64)

/* Most pages one MIGRATE or QUERY accepts; larger counts get EINVAL. */
#define ROCS_SHIM_MAX_PAGES (1U << 16)

/* Most frames the module may keep in its per-colour stash of one NUMA node
 * (CONFIGURE.pool_limit). */
#define ROCS_SHIM_MAX_POOL_LIMIT (1ULL << 20)

/* rocs_shim_pages.placement */
#define ROCS_SHIM_POLLUTE 1 /* onto frames of the pollute colours */
#define ROCS_SHIM_RESTORE 2 /* back onto the colour the page had before Pollute moved
			     * it, else onto any other colour */
#define ROCS_SHIM_ORDINARY 3 /* onto the ordinary colour rocs_shim_pages.colour, else onto
			      * any other ordinary colour; pages already on an ordinary colour
			      * stay */

/*
 * Why a page did not move; index into rocs_shim_stats.failures. The per-page status of
 * MIGRATE carries the matching negative errno.
 */
#define ROCS_SHIM_FAIL_UNMAPPED 0    /* -EFAULT: no mapping at that address */
#define ROCS_SHIM_FAIL_NOT_PRESENT 1 /* -ENOENT: never touched, zero page */
#define ROCS_SHIM_FAIL_SHARED 2      /* -EACCES: MAP_SHARED memory (anonymous or file) */
#define ROCS_SHIM_FAIL_UNSUPPORTED 3 /* -EOPNOTSUPP: file-backed, hugetlbfs, IO/PFN maps */
#define ROCS_SHIM_FAIL_BUSY 4        /* -EBUSY: the kernel would not isolate or move it
				      * (pinned, locked, swapped out, THP split failed) */
#define ROCS_SHIM_FAIL_NOMEM 5       /* -ENOMEM: no free frame of a wanted colour */
#define ROCS_SHIM_FAIL_EXITED 6      /* -ESRCH: the target exited during the call */
#define ROCS_SHIM_FAIL_NR 8

/* INFO: what the module is and how it is configured. */
struct rocs_shim_info {
	__u32 abi_version;    /* ROCS_SHIM_ABI_VERSION of the loaded module */
	__u32 page_shift;     /* log2 of the page size */
	__u32 colours;        /* colours in use (a power of two) */
	__u32 max_colours;    /* ROCS_SHIM_MAX_COLOURS */
	__u64 max_pages;      /* ROCS_SHIM_MAX_PAGES */
	__u64 pool_limit;     /* most frames the stash may hold, per NUMA node */
	__u64 pool_frames;    /* frames the stash holds now, all nodes */
	__u64 pollute_mask[ROCS_SHIM_MASK_WORDS]; /* bit c set: colour c is a pollute colour */
};

/* rocs_shim_config.flags: fill the pollute colours' share of the stash, and top it up
 * after each MIGRATE to Pollute, in the background (INFO.pool_frames shows progress), so
 * that MIGRATE rarely pays for finding frames of those colours. */
#define ROCS_SHIM_CONFIG_PREFILL 1U

/*
 * CONFIGURE: the colour geometry (from the LLC), the pollute colours, the stash bound.
 * A page moves to a frame of its own NUMA node; each node has its own stash of at most
 * pool_limit frames, half of it shared by the pollute colours, half by the others, and
 * never more than a quarter of the node's frames of any colour; the pollute frames a
 * Restore or an ORDINARY migration frees are taken back even above that, within
 * pool_limit.
 */
struct rocs_shim_config {
	__u32 colours;   /* power of two, 2..ROCS_SHIM_MAX_COLOURS */
	__u32 flags;     /* ROCS_SHIM_CONFIG_*; other bits must be 0 */
	__u64 pool_limit; /* 0..ROCS_SHIM_MAX_POOL_LIMIT frames per node */
	/* Non-empty, only colours < colours, and not every colour (Restore needs one). */
	__u64 pollute_mask[ROCS_SHIM_MASK_WORDS];
};

/* MIGRATE and QUERY: a list of page addresses of one process, and a status per page. */
struct rocs_shim_pages {
	__u32 pid;       /* target, in the caller's pid namespace; 0 = the caller */
	__u32 placement; /* MIGRATE: ROCS_SHIM_POLLUTE, _RESTORE or _ORDINARY; QUERY: 0 */
	__u64 count;     /* 1..ROCS_SHIM_MAX_PAGES */
	__u64 addrs;     /* user pointer to __u64[count], page-aligned virtual addresses */
	__u64 status;    /* user pointer to __s32[count]: colour now (>= 0) or -errno */
	__u32 colour;    /* MIGRATE to ROCS_SHIM_ORDINARY: the colour (an ordinary one,
			  * < colours); else 0 */
	__u32 flags;     /* must be 0 */
	__u64 moved;     /* out: pages that changed frame in this call */
};

/* STATS: counters since load (or since the last CONFIGURE for the stash). */
struct rocs_shim_stats {
	__u64 migrated_pollute;   /* pages moved onto pollute colours */
	__u64 migrated_restore;   /* pages moved off pollute colours */
	__u64 already_placed;     /* pages that were already on a wanted colour */
	__u64 failures[ROCS_SHIM_FAIL_NR]; /* pages that did not move, by reason */
	__u64 frames_allocated;   /* frames taken from the page allocator (by Restore's
				   * reclaim sweep too: see kmod-shim/README.md) */
	__u64 frames_released;    /* frames taken and given back to the page allocator */
	__u64 pool_frames;        /* frames the stash holds now (all nodes) */
	__u32 colours;            /* entries of held_by_colour in use */
	__u32 reserved;           /* 0 */
	__u64 held_by_colour[ROCS_SHIM_MAX_COLOURS]; /* stash frames per colour, all nodes */
};

#define ROCS_SHIM_IOC_MAGIC 0xD3

#define ROCS_SHIM_IOC_INFO _IOR(ROCS_SHIM_IOC_MAGIC, 0x00, struct rocs_shim_info)
#define ROCS_SHIM_IOC_CONFIGURE _IOW(ROCS_SHIM_IOC_MAGIC, 0x01, struct rocs_shim_config)
#define ROCS_SHIM_IOC_MIGRATE _IOWR(ROCS_SHIM_IOC_MAGIC, 0x02, struct rocs_shim_pages)
#define ROCS_SHIM_IOC_QUERY _IOWR(ROCS_SHIM_IOC_MAGIC, 0x03, struct rocs_shim_pages)
#define ROCS_SHIM_IOC_STATS _IOR(ROCS_SHIM_IOC_MAGIC, 0x04, struct rocs_shim_stats)

#endif /* _UAPI_ROCS_SHIM_H */

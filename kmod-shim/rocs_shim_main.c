// SPDX-License-Identifier: GPL-2.0
/*
 * rocs_shim: moves pages of a running process onto frames of chosen cache colours.
 *
 * rocs (the daemon) confines the pages that pollute the last-level cache to the frames of
 * a few reserved colours, the pollute buffer. This module does the moving, through the
 * device /dev/rocs_shim (see include/uapi/rocs_shim.h for the ABI).
 *
 * Mechanism: only exported symbols. A range of the target's address space is isolated and
 * unmapped by migrate_vma_setup(MIGRATE_VMA_SELECT_SYSTEM), which leaves migration entries
 * in the page tables; the module copies each page into a frame of a wanted colour, and
 * migrate_vma_pages + migrate_vma_finalize install the new frames. A target thread that
 * touches a page in between waits on its migration entry, so no write is lost.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/highmem.h>
#include <linux/migrate.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mmap_lock.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/sched/coredump.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "rocs_shim.h"

/* Pages handed to one migrate_vma_setup; bounds the time a range stays unmapped. */
#define ROCS_BATCH 512

static unsigned int colours = 32;
module_param(colours, uint, 0444);
MODULE_PARM_DESC(colours, "cache colours (LLC sets per slice * line size / page size), a power of two; CONFIGURE overrides");

static unsigned long pool_limit = 16384;
module_param(pool_limit, ulong, 0444);
MODULE_PARM_DESC(pool_limit, "most frames kept in the per-colour stash of each NUMA node; CONFIGURE overrides");

/* Everything below is protected by rocs_mutex; ioctls run one at a time. */
static DEFINE_MUTEX(rocs_mutex);
static struct rocs_pool *rocs_pools;	/* one per possible node, nr_node_ids */
static unsigned int rocs_ncolours;
static unsigned long rocs_pool_limit;	/* per node */
/* CONFIGURE asked for PREFILL: keep the pollute colours' stash topped up in the background. */
static bool rocs_keep_filled;
static DECLARE_BITMAP(rocs_pollute, ROCS_SHIM_MAX_COLOURS);
static DECLARE_BITMAP(rocs_ordinary, ROCS_SHIM_MAX_COLOURS);
/*
 * Homes: the colour each confined page had before Pollute moved it, keyed by the pfn of
 * the pollute frame it moved to, as xa_mk_value(colour). A Restore of the page off that
 * frame takes a frame of that colour again, so that confining and restoring leaves the
 * target's layout as it was. Changed only under rocs_mutex; the xarray's own spinlock is
 * taken inside xa_store and xa_erase, never around anything of ours.
 *
 * An entry outlives its page when the page leaves the frame without a Restore (or an
 * ORDINARY migration, which forgets the home like a Restore): its process frees it while
 * confined (munmap, exit), or the kernel moves it (compaction, NUMA balancing). The frame
 * goes back to the kernel and its entry stays until the shim confines a page onto that
 * pfn again (xa_store overwrites it), a Restore or an ORDINARY migration moves a page off
 * it, or CONFIGURE changes the colour count (then all are forgotten). A Restore of a page
 * that landed on such a frame by chance goes to that stale home, which is harmless: a
 * home is always a colour that was ordinary when it was written (Pollute moves only pages
 * off the pollute colours), and a home that a later CONFIGURE made a pollute colour is
 * ignored. At most one entry per pollute frame of the machine: in xarray nodes of 64
 * slots, at worst about 9 bytes per frame of memory.
 */
static DEFINE_XARRAY(rocs_homes);

static struct {
	u64 migrated_pollute;
	u64 migrated_restore;
	u64 already_placed;
	u64 failures[ROCS_SHIM_FAIL_NR];
} rocs_stats;

static const int rocs_fail_errno[ROCS_SHIM_FAIL_NR] = {
	[ROCS_SHIM_FAIL_UNMAPPED] = EFAULT,
	[ROCS_SHIM_FAIL_NOT_PRESENT] = ENOENT,
	[ROCS_SHIM_FAIL_SHARED] = EACCES,
	[ROCS_SHIM_FAIL_UNSUPPORTED] = EOPNOTSUPP,
	[ROCS_SHIM_FAIL_BUSY] = EBUSY,
	[ROCS_SHIM_FAIL_NOMEM] = ENOMEM,
	[ROCS_SHIM_FAIL_EXITED] = ESRCH,
};

static s32 rocs_fail(unsigned int reason)
{
	rocs_stats.failures[reason]++;
	return -rocs_fail_errno[reason];
}

/*
 * Pollute colours are the mask; ordinary colours are the other colours in use. Every
 * node's stash starts empty (the caller gave back the old one).
 */
static void rocs_set_colours(unsigned int ncolours, unsigned long limit,
			     const unsigned long *pollute)
{
	int nid;

	rocs_ncolours = ncolours;
	rocs_pool_limit = limit;
	bitmap_copy(rocs_pollute, pollute, ROCS_SHIM_MAX_COLOURS);
	bitmap_zero(rocs_ordinary, ROCS_SHIM_MAX_COLOURS);
	bitmap_complement(rocs_ordinary, rocs_pollute, ncolours);
	for (nid = 0; nid < nr_node_ids; nid++)
		rocs_pool_init(&rocs_pools[nid], nid, ncolours, limit, pollute);
}

static void rocs_drain_all(void)
{
	int nid;

	for (nid = 0; nid < nr_node_ids; nid++)
		rocs_pool_drain(&rocs_pools[nid]);
}

/* Blocks allocated per hold of the mutex when refilling in the background. */
#define ROCS_REFILL_BLOCKS 64

/*
 * Top up the pollute colours' stash of every node after MIGRATE to Pollute took from it,
 * in small steps so that ioctls are not held up for long.
 */
static void rocs_refill(struct work_struct *work)
{
	bool more = true;
	int nid;

	while (more) {
		more = false;
		mutex_lock(&rocs_mutex);
		if (rocs_keep_filled)
			for_each_node_state(nid, N_MEMORY)
				more |= rocs_pool_fill(&rocs_pools[nid], rocs_pollute,
						       ROCS_REFILL_BLOCKS);
		mutex_unlock(&rocs_mutex);
		cond_resched();
	}
}
static DECLARE_WORK(rocs_refill_work, rocs_refill);

static unsigned long rocs_frames_held(void)
{
	unsigned long held = 0;
	int nid;

	for (nid = 0; nid < nr_node_ids; nid++)
		held += rocs_pools[nid].held;
	return held;
}

/*
 * The access check move_pages(2) makes (ptrace_may_access with
 * PTRACE_MODE_READ_REALCREDS), rebuilt from what 6.1 exports to modules: the caller's real
 * uid and gid must match every uid and gid of the target, or the caller must have
 * CAP_SYS_PTRACE in the target's user namespace; and a target that is not dumpable needs
 * CAP_SYS_PTRACE in its mm's user namespace. The LSM hook of ptrace_may_access
 * (security_ptrace_access_check) is not exported and cannot be called from a module.
 */
static int rocs_may_access(struct task_struct *task, struct mm_struct *mm)
{
	const struct cred *cred = current_cred(), *tcred;
	bool allowed;

	if (same_thread_group(task, current))
		return 0;
	rcu_read_lock();
	tcred = __task_cred(task);
	allowed = (uid_eq(cred->uid, tcred->euid) && uid_eq(cred->uid, tcred->suid) &&
		   uid_eq(cred->uid, tcred->uid) && gid_eq(cred->gid, tcred->egid) &&
		   gid_eq(cred->gid, tcred->sgid) && gid_eq(cred->gid, tcred->gid)) ||
		  ns_capable(tcred->user_ns, CAP_SYS_PTRACE);
	rcu_read_unlock();
	if (!allowed)
		return -EPERM;
	if (get_dumpable(mm) != SUID_DUMP_USER && !ns_capable(mm->user_ns, CAP_SYS_PTRACE))
		return -EPERM;
	return 0;
}

/* The target's mm, after the access check; an ERR_PTR otherwise. */
static struct mm_struct *rocs_target_mm(u32 pid)
{
	struct task_struct *task;
	struct mm_struct *mm;
	int err;

	if (pid == 0) {
		task = current;
		get_task_struct(task);
	} else {
		struct pid *p;

		if (pid > PID_MAX_LIMIT)
			return ERR_PTR(-ESRCH);
		p = find_get_pid(pid);
		if (!p)
			return ERR_PTR(-ESRCH);
		task = get_pid_task(p, PIDTYPE_PID);
		put_pid(p);
		if (!task)
			return ERR_PTR(-ESRCH);
	}
	mm = get_task_mm(task);
	if (!mm) {
		/* A kernel thread, or a task that has already released its memory. */
		put_task_struct(task);
		return ERR_PTR(-ESRCH);
	}
	err = rocs_may_access(task, mm);
	put_task_struct(task);
	if (err) {
		mmput(mm);
		return ERR_PTR(err);
	}
	return mm;
}

/* Why the pages of @vma cannot move, as a ROCS_SHIM_FAIL_* reason, or -1 if they can. */
static int rocs_vma_unsuitable(struct vm_area_struct *vma)
{
	if (vma->vm_flags & VM_SHARED)
		return ROCS_SHIM_FAIL_SHARED;
	if (!vma_is_anonymous(vma) || (vma->vm_flags & VM_SPECIAL) ||
	    is_vm_hugetlb_page(vma) || vma_is_dax(vma))
		return ROCS_SHIM_FAIL_UNSUPPORTED;
	return -1;
}

/* One requested page: its address and where its status goes. */
struct rocs_entry {
	u64 addr;
	u32 index;
	u32 pad;
};

static int rocs_entry_cmp(const void *a, const void *b)
{
	const struct rocs_entry *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	return x->index < y->index ? -1 : (x->index > y->index);
}

struct rocs_call {
	struct mm_struct *mm;
	bool migrate;
	const unsigned long *wanted;	/* colours a page may end on */
	/* Pollute, else off the pollute colours (Restore or ORDINARY: alike but for the frame). */
	bool to_pollute;
	u32 placement;
	/* ORDINARY: the one colour asked for, tried before any other ordinary colour. */
	DECLARE_BITMAP(chosen, ROCS_SHIM_MAX_COLOURS);
	unsigned int cursor;
	u64 moved;
	/* Restore: pages put on any ordinary colour, with no home remembered or no frame of it. */
	u64 homeless;
	u64 home_full;
	/* ORDINARY: pages put on another ordinary colour, no frame of the chosen one found. */
	u64 chosen_full;
	/* Off the pollute colours: the node of each page that left a pollute frame in this
	 * run, else -1. */
	int freed_nid[ROCS_BATCH];
	/* Whether each page moved in this run, and if so its old frame and its new one. */
	bool page_moved[ROCS_BATCH];
	unsigned long old_pfn[ROCS_BATCH];
	unsigned long new_pfn[ROCS_BATCH];
	unsigned long src[ROCS_BATCH];
	unsigned long dst[ROCS_BATCH];
	s32 result[ROCS_BATCH];
};

/*
 * After a run off the pollute colours (Restore or ORDINARY): take the pollute frames it
 * freed back into their node's stash (rocs_pool_reclaim says how and why), node by node.
 */
static void rocs_reclaim_run(struct rocs_call *call, unsigned int npages)
{
	unsigned int k, j;

	for (k = 0; k < npages; k++) {
		int nid = call->freed_nid[k];
		unsigned long freed = 0, kept;

		if (nid < 0)
			continue;
		for (j = k; j < npages; j++) {
			if (call->freed_nid[j] == nid) {
				call->freed_nid[j] = -1;
				freed++;
			}
		}
		kept = rocs_pool_reclaim(&rocs_pools[nid], rocs_pollute, freed);
		/* STATS has no field for it (its layout is kept); dynamic debug shows it. */
		pr_debug("rocs_shim: node %d: a migration off the pollute colours freed %lu pollute frames, %lu taken back\n",
			 nid, freed, kept);
	}
}

/*
 * Restore: a frame of the colour @page had before Pollute moved it onto the frame it sits
 * on now, from @pool; NULL when no home is remembered for that frame, the home is not an
 * ordinary colour now, or the pool found no frame of it within its bounded tries.
 */
static struct page *rocs_take_home(struct rocs_call *call, struct rocs_pool *pool,
				   struct page *page)
{
	DECLARE_BITMAP(home_only, ROCS_SHIM_MAX_COLOURS);
	void *entry = xa_load(&rocs_homes, page_to_pfn(page));
	unsigned int cursor = 0;
	unsigned long home;
	struct page *frame;

	if (!xa_is_value(entry)) {
		call->homeless++;
		return NULL;
	}
	home = xa_to_value(entry);
	if (!test_bit(home, rocs_ordinary)) {
		call->homeless++;
		return NULL;
	}
	bitmap_zero(home_only, ROCS_SHIM_MAX_COLOURS);
	set_bit(home, home_only);
	frame = rocs_pool_take(pool, home_only, &cursor);
	if (!frame)
		call->home_full++;
	return frame;
}

/*
 * ORDINARY: a frame of the colour the caller chose, from @pool; NULL when the pool found
 * none within its bounded tries (the page then goes to any ordinary colour, as a Restore
 * does when its home has no frame).
 */
static struct page *rocs_take_chosen(struct rocs_call *call, struct rocs_pool *pool)
{
	unsigned int cursor = 0;
	struct page *frame = rocs_pool_take(pool, call->chosen, &cursor);

	if (!frame)
		call->chosen_full++;
	return frame;
}

/*
 * After a run: remember the home colour of each page Pollute moved, forget the home of
 * each page Restore or ORDINARY moved (its old frame is no page's home any more). After
 * migrate_vma_finalize, so that xa_store may allocate (and sleep) with no page of the run
 * locked. A page may already have left its new frame again (its process freed it): its
 * entry is then stale from the start, which is harmless (see rocs_homes).
 */
static void rocs_note_homes(struct rocs_call *call, unsigned int npages)
{
	unsigned int k;
	int err;

	for (k = 0; k < npages; k++) {
		if (!call->page_moved[k])
			continue;
		if (!call->to_pollute) {
			xa_erase(&rocs_homes, call->old_pfn[k]);
			continue;
		}
		err = xa_err(xa_store(&rocs_homes, call->new_pfn[k],
				      xa_mk_value(call->old_pfn[k] & (rocs_ncolours - 1)),
				      GFP_KERNEL));
		if (err)
			/* Its Restore will take any ordinary colour. */
			pr_debug("rocs_shim: no memory to remember a confined page's colour\n");
	}
}

/* Move the pages of [start, start + npages) in @vma; result[k] for page k. */
static void rocs_migrate_run(struct rocs_call *call, struct vm_area_struct *vma,
			     unsigned long start, unsigned int npages)
{
	struct migrate_vma args = {
		.vma = vma,
		.src = call->src,
		.dst = call->dst,
		.start = start,
		.end = start + ((unsigned long)npages << PAGE_SHIFT),
		.flags = MIGRATE_VMA_SELECT_SYSTEM,
	};
	unsigned int k;

	memset(call->dst, 0, sizeof(call->dst[0]) * npages);
	if (migrate_vma_setup(&args)) {
		for (k = 0; k < npages; k++)
			call->result[k] = rocs_fail(ROCS_SHIM_FAIL_BUSY);
		return;
	}

	for (k = 0; k < npages; k++) {
		unsigned long src = call->src[k];
		struct page *page = migrate_pfn_to_page(src);
		struct rocs_pool *pool;
		struct page *frame;
		unsigned int colour;

		call->dst[k] = 0;
		if (!(src & MIGRATE_PFN_MIGRATE)) {
			/* Not collected or not unmapped: a swap or migration entry, a locked or
			 * pinned page, or a huge page the kernel could not split. */
			call->result[k] = rocs_fail(ROCS_SHIM_FAIL_BUSY);
			continue;
		}
		if (!page) {
			/* A hole or the zero page; move_pages(2) says ENOENT there too. */
			call->result[k] = rocs_fail(ROCS_SHIM_FAIL_NOT_PRESENT);
			continue;
		}
		if (PageKsm(page)) {
			call->result[k] = rocs_fail(ROCS_SHIM_FAIL_UNSUPPORTED);
			continue;
		}
		colour = rocs_colour(rocs_ncolours, page);
		if (test_bit(colour, call->wanted)) {
			rocs_stats.already_placed++;
			call->result[k] = colour;
			continue;
		}
		/* A frame on the page's own node: the colour changes, the NUMA placement not.
		 * A Restore goes home if it can, an ORDINARY migration to the chosen colour;
		 * else (and Pollute always) to any wanted colour. */
		pool = &rocs_pools[page_to_nid(page)];
		frame = NULL;
		if (call->placement == ROCS_SHIM_RESTORE)
			frame = rocs_take_home(call, pool, page);
		else if (call->placement == ROCS_SHIM_ORDINARY)
			frame = rocs_take_chosen(call, pool);
		if (!frame)
			frame = rocs_pool_take(pool, call->wanted, &call->cursor);
		if (!frame) {
			call->result[k] = rocs_fail(ROCS_SHIM_FAIL_NOMEM);
			continue;
		}
		/* The source is unmapped and locked now: its contents are stable. */
		lock_page(frame);
		copy_highpage(frame, page);
		call->dst[k] = migrate_pfn(page_to_pfn(frame));
		if (src & MIGRATE_PFN_WRITE)
			call->dst[k] |= MIGRATE_PFN_WRITE;
	}

	migrate_vma_pages(&args);

	for (k = 0; k < npages; k++) {
		struct page *frame = migrate_pfn_to_page(call->dst[k]);

		call->freed_nid[k] = -1;
		call->page_moved[k] = false;
		if (!frame)
			continue;
		if (call->src[k] & MIGRATE_PFN_MIGRATE) {
			call->result[k] = rocs_colour(rocs_ncolours, frame);
			call->moved++;
			call->page_moved[k] = true;
			call->old_pfn[k] = page_to_pfn(migrate_pfn_to_page(call->src[k]));
			call->new_pfn[k] = page_to_pfn(frame);
			if (call->to_pollute) {
				rocs_stats.migrated_pollute++;
			} else {
				/* Restore or ORDINARY: off the pollute colours either way. */
				rocs_stats.migrated_restore++;
				/* Its old frame, of a pollute colour, is freed by finalize. */
				call->freed_nid[k] = page_to_nid(migrate_pfn_to_page(call->src[k]));
			}
		} else {
			/* migrate_vma_finalize gives the unused frame back to the allocator. */
			call->result[k] = rocs_fail(ROCS_SHIM_FAIL_BUSY);
		}
	}

	migrate_vma_finalize(&args);
	rocs_note_homes(call, npages);
	if (!call->to_pollute)
		rocs_reclaim_run(call, npages);
}

/* The page mapped at @addr of @mm, with a reference, without faulting it in. */
static long rocs_gup_one(struct mm_struct *mm, unsigned long addr, struct page **page)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 5, 0)
	return get_user_pages_remote(mm, addr, 1, FOLL_NOFAULT, page, NULL);
#else
	return get_user_pages_remote(mm, addr, 1, FOLL_NOFAULT, page, NULL, NULL);
#endif
}

/* The colour of each page of [start, start + npages) in @vma now, without faulting. */
static void rocs_query_run(struct rocs_call *call, struct vm_area_struct *vma,
			   unsigned long start, unsigned int npages)
{
	unsigned int k;

	for (k = 0; k < npages; k++) {
		struct page *page;
		long got;

		got = rocs_gup_one(call->mm, start + ((unsigned long)k << PAGE_SHIFT), &page);
		if (got != 1) {
			call->result[k] = -ENOENT;
			continue;
		}
		call->result[k] = is_zero_pfn(page_to_pfn(page)) ?
					  -ENOENT : (s32)rocs_colour(rocs_ncolours, page);
		put_page(page);
	}
}

/*
 * Walk the requested pages in address order, in runs of consecutive pages of one mapping
 * (at most ROCS_BATCH), and write each page's status. Called with the mmap lock unlocked;
 * takes it for reading, and drops it between runs when others need the CPU.
 */
static int rocs_walk(struct rocs_call *call, struct rocs_entry *entries, u64 count,
		     s32 *status)
{
	u64 i = 0, j;

	mmap_read_lock(call->mm);
	while (i < count) {
		unsigned long start = entries[i].addr;
		struct vm_area_struct *vma;
		unsigned int npages;
		int reason;

		vma = find_vma(call->mm, start);
		if (!vma || start < vma->vm_start) {
			status[entries[i].index] =
				call->migrate ? rocs_fail(ROCS_SHIM_FAIL_UNMAPPED) : -EFAULT;
			i++;
			continue;
		}
		reason = rocs_vma_unsuitable(vma);
		if (reason >= 0 && call->migrate) {
			status[entries[i].index] = rocs_fail(reason);
			i++;
			continue;
		}

		/* Extend the run over duplicates and the next page, within the mapping. */
		npages = 1;
		for (j = i + 1; j < count; j++) {
			u64 addr = entries[j].addr;
			u64 next = start + ((u64)npages << PAGE_SHIFT);

			if (addr == next - PAGE_SIZE)
				continue;
			if (addr != next || addr >= vma->vm_end || npages == ROCS_BATCH)
				break;
			npages++;
		}

		if (call->migrate)
			rocs_migrate_run(call, vma, start, npages);
		else
			rocs_query_run(call, vma, start, npages);
		for (; i < j; i++)
			status[entries[i].index] =
				call->result[(entries[i].addr - start) >> PAGE_SHIFT];

		/* Let the target map and unmap (and others run) between runs. */
		if (need_resched() || mmap_lock_is_contended(call->mm) ||
		    fatal_signal_pending(current)) {
			mmap_read_unlock(call->mm);
			if (fatal_signal_pending(current))
				return -EINTR;
			cond_resched();
			mmap_read_lock(call->mm);
		}
		/* Only our reference is left: the target has exited, stop moving its pages. */
		if (atomic_read(&call->mm->mm_users) <= 1) {
			for (; i < count; i++)
				status[entries[i].index] =
					call->migrate ? rocs_fail(ROCS_SHIM_FAIL_EXITED) : -ESRCH;
		}
	}
	mmap_read_unlock(call->mm);
	return 0;
}

static long rocs_ioctl_pages(void __user *argp, bool migrate)
{
	struct rocs_shim_pages req;
	struct rocs_entry *entries = NULL;
	struct rocs_call *call = NULL;
	u64 __user *uaddrs;
	s32 __user *ustatus;
	s32 *status = NULL;
	u64 i;
	long err;

	if (copy_from_user(&req, argp, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.count == 0 || req.count > ROCS_SHIM_MAX_PAGES)
		return -EINVAL;
	if (migrate ? (req.placement != ROCS_SHIM_POLLUTE && req.placement != ROCS_SHIM_RESTORE &&
		       req.placement != ROCS_SHIM_ORDINARY) : req.placement != 0)
		return -EINVAL;
	/* A colour only with ORDINARY, and then one of the ordinary colours in use (under
	 * rocs_mutex: no CONFIGURE changes them during the call). */
	if (req.placement == ROCS_SHIM_ORDINARY ?
		    req.colour >= rocs_ncolours || !test_bit(req.colour, rocs_ordinary) :
		    req.colour != 0)
		return -EINVAL;
	uaddrs = u64_to_user_ptr(req.addrs);
	ustatus = u64_to_user_ptr(req.status);

	entries = kvmalloc_array(req.count, sizeof(*entries), GFP_KERNEL);
	status = kvmalloc_array(req.count, sizeof(*status), GFP_KERNEL);
	call = kvzalloc(sizeof(*call), GFP_KERNEL);
	err = -ENOMEM;
	if (!entries || !status || !call)
		goto out;

	err = -EFAULT;
	for (i = 0; i < req.count; i++) {
		if (get_user(entries[i].addr, uaddrs + i))
			goto out;
		entries[i].index = i;
		entries[i].pad = 0;
	}
	err = -EINVAL;
	for (i = 0; i < req.count; i++)
		if (entries[i].addr & ~PAGE_MASK)
			goto out;
	/* Fail on an unwritable status array before anything has moved. */
	err = -EFAULT;
	if (clear_user(ustatus, req.count * sizeof(*status)))
		goto out;

	call->mm = rocs_target_mm(req.pid);
	if (IS_ERR(call->mm)) {
		err = PTR_ERR(call->mm);
		goto out;
	}
	call->migrate = migrate;
	call->placement = req.placement;
	call->to_pollute = req.placement == ROCS_SHIM_POLLUTE;
	call->wanted = call->to_pollute ? rocs_pollute : rocs_ordinary;
	if (req.placement == ROCS_SHIM_ORDINARY)
		__set_bit(req.colour, call->chosen);	/* call is zeroed */

	sort(entries, req.count, sizeof(*entries), rocs_entry_cmp, NULL);

	err = rocs_walk(call, entries, req.count, status);
	mmput(call->mm);
	/* STATS has no fields for these (its layout is kept); dynamic debug shows them. */
	if (call->homeless || call->home_full)
		pr_debug("rocs_shim: Restore: %llu pages with no ordinary home remembered, %llu with no frame of their home colour; put on other ordinary colours\n",
			 call->homeless, call->home_full);
	if (call->chosen_full)
		pr_debug("rocs_shim: ORDINARY: %llu pages with no frame of colour %u; put on other ordinary colours\n",
			 call->chosen_full, req.colour);
	if (migrate && call->to_pollute && rocs_keep_filled)
		queue_work(system_unbound_wq, &rocs_refill_work);
	if (err)
		goto out;

	err = -EFAULT;
	if (copy_to_user(ustatus, status, req.count * sizeof(*status)))
		goto out;
	req.moved = call->moved;
	if (copy_to_user(argp, &req, sizeof(req)))
		goto out;
	err = 0;
out:
	kvfree(call);
	kvfree(status);
	kvfree(entries);
	return err;
}

static long rocs_ioctl_info(void __user *argp)
{
	struct rocs_shim_info info = {
		.abi_version = ROCS_SHIM_ABI_VERSION,
		.page_shift = PAGE_SHIFT,
		.colours = rocs_ncolours,
		.max_colours = ROCS_SHIM_MAX_COLOURS,
		.max_pages = ROCS_SHIM_MAX_PAGES,
		.pool_limit = rocs_pool_limit,
		.pool_frames = rocs_frames_held(),
	};

	bitmap_to_arr64(info.pollute_mask, rocs_pollute, ROCS_SHIM_MAX_COLOURS);
	return copy_to_user(argp, &info, sizeof(info)) ? -EFAULT : 0;
}

static long rocs_ioctl_configure(void __user *argp)
{
	struct rocs_shim_config cfg;
	DECLARE_BITMAP(mask, ROCS_SHIM_MAX_COLOURS);

	if (copy_from_user(&cfg, argp, sizeof(cfg)))
		return -EFAULT;
	if ((cfg.flags & ~ROCS_SHIM_CONFIG_PREFILL) || cfg.colours < 2 || cfg.colours > ROCS_SHIM_MAX_COLOURS ||
	    !is_power_of_2(cfg.colours) || cfg.pool_limit > ROCS_SHIM_MAX_POOL_LIMIT)
		return -EINVAL;
	bitmap_from_arr64(mask, cfg.pollute_mask, ROCS_SHIM_MAX_COLOURS);
	/* Non-empty, inside the colours in use, and leaving an ordinary colour for Restore. */
	if (bitmap_empty(mask, cfg.colours) ||
	    find_next_bit(mask, ROCS_SHIM_MAX_COLOURS, cfg.colours) < ROCS_SHIM_MAX_COLOURS ||
	    bitmap_full(mask, cfg.colours))
		return -EINVAL;

	/* The stash is sorted by the old geometry: give it back and start again. The homes
	 * stay while the colour count does (a home that is a pollute colour now is ignored). */
	rocs_drain_all();
	if (cfg.colours != rocs_ncolours)
		xa_destroy(&rocs_homes);
	rocs_set_colours(cfg.colours, cfg.pool_limit, mask);
	/* Filling takes a while (colours / pollute colours frames per stashed pollute frame):
	 * it runs in the background, a little at a time; INFO.pool_frames shows progress. */
	rocs_keep_filled = cfg.flags & ROCS_SHIM_CONFIG_PREFILL;
	if (rocs_keep_filled)
		queue_work(system_unbound_wq, &rocs_refill_work);
	return 0;
}

static long rocs_ioctl_stats(void __user *argp)
{
	struct rocs_shim_stats *st;
	unsigned int c;
	int nid;
	long err;

	st = kzalloc(sizeof(*st), GFP_KERNEL);
	if (!st)
		return -ENOMEM;
	st->migrated_pollute = rocs_stats.migrated_pollute;
	st->migrated_restore = rocs_stats.migrated_restore;
	st->already_placed = rocs_stats.already_placed;
	memcpy(st->failures, rocs_stats.failures, sizeof(st->failures));
	st->colours = rocs_ncolours;
	for (nid = 0; nid < nr_node_ids; nid++) {
		const struct rocs_pool *pool = &rocs_pools[nid];

		st->frames_allocated += pool->allocated;
		st->frames_released += pool->released;
		st->pool_frames += pool->held;
		for (c = 0; c < rocs_ncolours; c++)
			st->held_by_colour[c] += pool->count[c];
	}
	err = copy_to_user(argp, st, sizeof(*st)) ? -EFAULT : 0;
	kfree(st);
	return err;
}

static long rocs_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *argp = (void __user *)arg;
	long err;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;

	switch (cmd) {
	case ROCS_SHIM_IOC_INFO:
	case ROCS_SHIM_IOC_CONFIGURE:
	case ROCS_SHIM_IOC_MIGRATE:
	case ROCS_SHIM_IOC_QUERY:
	case ROCS_SHIM_IOC_STATS:
		break;
	default:
		return -ENOTTY;
	}

	if (mutex_lock_interruptible(&rocs_mutex))
		return -EINTR;
	switch (cmd) {
	case ROCS_SHIM_IOC_INFO:
		err = rocs_ioctl_info(argp);
		break;
	case ROCS_SHIM_IOC_CONFIGURE:
		err = rocs_ioctl_configure(argp);
		break;
	case ROCS_SHIM_IOC_MIGRATE:
		err = rocs_ioctl_pages(argp, true);
		break;
	case ROCS_SHIM_IOC_QUERY:
		err = rocs_ioctl_pages(argp, false);
		break;
	default:
		err = rocs_ioctl_stats(argp);
		break;
	}
	mutex_unlock(&rocs_mutex);
	return err;
}

static const struct file_operations rocs_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = rocs_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice rocs_dev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "rocs_shim",
	.fops = &rocs_fops,
	.mode = 0600,
};

static int __init rocs_init(void)
{
	DECLARE_BITMAP(mask, ROCS_SHIM_MAX_COLOURS);
	int err;

	if (colours < 2 || colours > ROCS_SHIM_MAX_COLOURS || !is_power_of_2(colours)) {
		pr_err("rocs_shim: colours=%u: need a power of two from 2 to %u\n", colours,
		       ROCS_SHIM_MAX_COLOURS);
		return -EINVAL;
	}
	if (pool_limit > ROCS_SHIM_MAX_POOL_LIMIT) {
		pr_err("rocs_shim: pool_limit=%lu: at most %llu\n", pool_limit,
		       ROCS_SHIM_MAX_POOL_LIMIT);
		return -EINVAL;
	}
	/* Until the daemon configures it, the pollute buffer is colour 0. */
	bitmap_zero(mask, ROCS_SHIM_MAX_COLOURS);
	set_bit(0, mask);
	rocs_pools = kvcalloc(nr_node_ids, sizeof(*rocs_pools), GFP_KERNEL);
	if (!rocs_pools)
		return -ENOMEM;
	rocs_set_colours(colours, pool_limit, mask);

	err = misc_register(&rocs_dev);
	if (err) {
		kvfree(rocs_pools);
		return err;
	}
	pr_info("rocs_shim: ABI %u, %u colours, stash of at most %lu frames\n",
		ROCS_SHIM_ABI_VERSION, colours, pool_limit);
	return 0;
}

static void __exit rocs_exit(void)
{
	misc_deregister(&rocs_dev);
	/* No ioctl can queue the refill any more; wait for one that runs. */
	cancel_work_sync(&rocs_refill_work);
	mutex_lock(&rocs_mutex);
	rocs_drain_all();
	xa_destroy(&rocs_homes);
	mutex_unlock(&rocs_mutex);
	kvfree(rocs_pools);
}

module_init(rocs_init);
module_exit(rocs_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("rocs");
MODULE_DESCRIPTION("rocs: colour-aware page migration for the pollute buffer");
MODULE_VERSION("2");

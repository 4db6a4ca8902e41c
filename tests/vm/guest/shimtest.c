// SPDX-License-Identifier: GPL-2.0
/*
 * The guest half of tests/vm/run.sh: loads rocs_shim.ko, drives /dev/rocs_shim and checks
 * what it did independently (PFNs from /proc/PID/pagemap, node placement from
 * move_pages(2), /proc/meminfo, the taint flags). One line per test on stdout:
 * "ok - NAME" or "not ok - NAME: why"; lines starting with "# " are information.
 *
 *   shimtest /rocs_shim.ko [test...]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>

#include "rocs_shim.h"

#define PAGE 4096UL
#define COLOURS 16
#define POLLUTE_MASK 0x3ULL /* colours 0 and 1 */
#define POOL_LIMIT 8192

static int shim = -1;
static const char *module_path;
static char failure[512];

/* Record the first failure of the current test; the test returns right after. */
static void fail(const char *fmt, ...)
{
	va_list ap;

	if (failure[0])
		return;
	va_start(ap, fmt);
	vsnprintf(failure, sizeof(failure), fmt, ap);
	va_end(ap);
}

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			char _m[384];                                       \
			snprintf(_m, sizeof(_m), __VA_ARGS__);              \
			fail("line %d: %s (%s)", __LINE__, _m, #cond);      \
			return;                                             \
		}                                                           \
	} while (0)

/* ---- the device ------------------------------------------------------------------------ */

static int shim_configure(unsigned int colours, uint64_t mask0, uint64_t pool_limit)
{
	struct rocs_shim_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.colours = colours;
	cfg.pool_limit = pool_limit;
	cfg.pollute_mask[0] = mask0;
	return ioctl(shim, ROCS_SHIM_IOC_CONFIGURE, &cfg) ? -errno : 0;
}

/* MIGRATE (placement != 0) or QUERY (placement == 0), @colour for ROCS_SHIM_ORDINARY; 0 or
 * -errno of the ioctl. */
static int shim_pages_to(int fd, pid_t pid, const uint64_t *addrs, uint64_t n,
			 unsigned int placement, uint32_t colour, int32_t *status, uint64_t *moved)
{
	struct rocs_shim_pages req;
	int rc;

	memset(&req, 0, sizeof(req));
	req.pid = pid;
	req.placement = placement;
	req.colour = colour;
	req.count = n;
	req.addrs = (uintptr_t)addrs;
	req.status = (uintptr_t)status;
	rc = ioctl(fd, placement ? ROCS_SHIM_IOC_MIGRATE : ROCS_SHIM_IOC_QUERY, &req);
	if (moved)
		*moved = req.moved;
	return rc ? -errno : 0;
}

static int shim_pages(int fd, pid_t pid, const uint64_t *addrs, uint64_t n, unsigned int placement,
		      int32_t *status, uint64_t *moved)
{
	return shim_pages_to(fd, pid, addrs, n, placement, 0, status, moved);
}

static int shim_stats(struct rocs_shim_stats *st)
{
	return ioctl(shim, ROCS_SHIM_IOC_STATS, st) ? -errno : 0;
}

/* ---- independent views of memory --------------------------------------------------------- */

/* The PFN behind @addr of @pid from /proc/PID/pagemap, or -1 when not present. */
static int64_t pagemap_pfn(pid_t pid, uint64_t addr)
{
	char path[64];
	uint64_t entry;
	int fd;
	ssize_t got;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", pid ? pid : getpid());
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	got = pread(fd, &entry, sizeof(entry), (addr / PAGE) * sizeof(entry));
	close(fd);
	if (got != sizeof(entry) || !(entry & (1ULL << 63)))
		return -1;
	return entry & ((1ULL << 55) - 1);
}

/* Every one of the @n pages at @base is behind one and the same frame (KSM merged them). */
static int ksm_merged(const char *base, size_t n)
{
	int64_t first = pagemap_pfn(0, (uintptr_t)base);
	size_t i;

	for (i = 1; i < n; i++)
		if (first < 0 || pagemap_pfn(0, (uintptr_t)base + i * PAGE) != first)
			return 0;
	return first >= 0;
}

static int pfn_colour(int64_t pfn)
{
	return pfn < 0 ? -1 : (int)(pfn & (COLOURS - 1));
}

static bool is_pollute(int colour)
{
	return colour >= 0 && colour < 64 && (POLLUTE_MASK >> colour) & 1;
}

/* A "Key:   value kB" line of a /proc file, in kB; -1 when missing. */
static long proc_kb(const char *path, const char *key)
{
	char line[256];
	size_t klen = strlen(key);
	long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			v = strtol(line + klen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* The page flags of a frame from /proc/kpageflags; 0 when unknown. */
#define KPF_MLOCKED_BIT 33
static uint64_t kpageflags(int64_t pfn)
{
	uint64_t flags = 0;
	int fd = open("/proc/kpageflags", O_RDONLY);

	if (fd < 0 || pfn < 0 || pread(fd, &flags, 8, pfn * 8) != 8)
		flags = 0;
	if (fd >= 0)
		close(fd);
	return flags;
}

/*
 * Free frames in kB, counting the per-cpu free lists too: MemFree leaves those out, and
 * this kernel lets them hold tens of MiB, so a module's freed frames may not show in
 * MemFree at all. Sums "pages free" and every pageset "count:" of /proc/zoneinfo.
 */
static long free_kb_with_pcp(void)
{
	char line[256];
	long pages = 0, v;
	FILE *f = fopen("/proc/zoneinfo", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, " pages free %ld", &v) == 1 || sscanf(line, " count: %ld", &v) == 1)
			pages += v;
	}
	fclose(f);
	return pages * (PAGE / 1024);
}

static long read_long(const char *path)
{
	char buf[64] = "";
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return strtol(buf, NULL, 10);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Anonymous private pages, each filled with a pattern naming the page and the seed. */
static uint64_t *anon_pages(size_t n, uint64_t seed)
{
	uint64_t *p = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0);
	size_t i;

	if (p == MAP_FAILED)
		return NULL;
	for (i = 0; i < n * PAGE / 8; i++)
		p[i] = seed ^ (i * 0x9E3779B97F4A7C15ULL);
	return p;
}

/* Index of the first word of @p that lost its pattern, or -1. */
static long pattern_broken(const uint64_t *p, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n * PAGE / 8; i++)
		if (p[i] != (seed ^ (i * 0x9E3779B97F4A7C15ULL)))
			return (long)i;
	return -1;
}

static uint64_t *addrs_of(const void *base, size_t n)
{
	uint64_t *a = malloc(n * sizeof(*a));
	size_t i;

	for (i = 0; a && i < n; i++)
		a[i] = (uintptr_t)base + i * PAGE;
	return a;
}

/* Every page of the range is on a wanted colour by status and by pagemap. */
static void check_placed(pid_t pid, const uint64_t *addrs, const int32_t *status, size_t n,
			 bool pollute)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int64_t pfn = pagemap_pfn(pid, addrs[i]);

		CHECK(status[i] >= 0, "page %zu: status %d", i, status[i]);
		CHECK(is_pollute(status[i]) == pollute, "page %zu: status colour %d", i, status[i]);
		CHECK(pfn >= 0, "page %zu not present in pagemap", i);
		CHECK(pfn_colour(pfn) == status[i], "page %zu: pagemap colour %d, status %d", i,
		      pfn_colour(pfn), status[i]);
	}
}

/* ---- tests --------------------------------------------------------------------------- */

static void test_info(void)
{
	struct rocs_shim_info info;
	struct stat st;

	CHECK(stat(ROCS_SHIM_DEVICE, &st) == 0, "stat: %s", strerror(errno));
	CHECK((st.st_mode & 0777) == 0600, "mode %o", st.st_mode & 0777);
	CHECK(S_ISCHR(st.st_mode), "not a character device");
	CHECK(ioctl(shim, ROCS_SHIM_IOC_INFO, &info) == 0, "INFO: %s", strerror(errno));
	CHECK(info.abi_version == ROCS_SHIM_ABI_VERSION, "abi %u", info.abi_version);
	CHECK(info.page_shift == 12, "page_shift %u", info.page_shift);
	/* Loaded with colours=64 pool_limit=4096 (module parameters). */
	CHECK(info.colours == 64 && info.pool_limit == 4096, "colours %u pool_limit %llu",
	      info.colours, (unsigned long long)info.pool_limit);
	CHECK(info.pollute_mask[0] == 1, "default pollute mask %llx",
	      (unsigned long long)info.pollute_mask[0]);
	CHECK(info.max_pages == ROCS_SHIM_MAX_PAGES, "max_pages");
	CHECK(shim_configure(COLOURS, POLLUTE_MASK, POOL_LIMIT) == 0, "CONFIGURE");
	CHECK(ioctl(shim, ROCS_SHIM_IOC_INFO, &info) == 0, "INFO");
	CHECK(info.colours == COLOURS && info.pool_limit == POOL_LIMIT &&
		      info.pollute_mask[0] == POLLUTE_MASK && info.pollute_mask[1] == 0,
	      "after CONFIGURE: colours %u limit %llu mask %llx", info.colours,
	      (unsigned long long)info.pool_limit, (unsigned long long)info.pollute_mask[0]);
}

static uint64_t *g_region;
#define REGION_PAGES 512
#define REGION_SEED 0x5eed0001ULL

static void test_pollute(void)
{
	int32_t status[REGION_PAGES];
	uint64_t *addrs, moved = 0;
	struct rocs_shim_stats before, after;
	size_t i, already = 0;

	g_region = anon_pages(REGION_PAGES, REGION_SEED);
	CHECK(g_region, "mmap");
	addrs = addrs_of(g_region, REGION_PAGES);
	for (i = 0; i < REGION_PAGES; i++)
		already += is_pollute(pfn_colour(pagemap_pfn(0, addrs[i])));
	CHECK(shim_stats(&before) == 0, "STATS");
	CHECK(shim_pages(shim, 0, addrs, REGION_PAGES, ROCS_SHIM_POLLUTE, status, &moved) == 0,
	      "MIGRATE: %s", strerror(errno));
	check_placed(0, addrs, status, REGION_PAGES, true);
	if (failure[0])
		return;
	CHECK(moved == REGION_PAGES - already, "moved %llu, expected %zu",
	      (unsigned long long)moved, REGION_PAGES - already);
	CHECK(pattern_broken(g_region, REGION_PAGES, REGION_SEED) < 0, "data changed");
	CHECK(shim_stats(&after) == 0, "STATS");
	CHECK(after.migrated_pollute - before.migrated_pollute == moved, "stats pollute %llu",
	      (unsigned long long)(after.migrated_pollute - before.migrated_pollute));
	/* Both pollute colours are used (round robin), not just one. */
	{
		size_t on0 = 0;

		for (i = 0; i < REGION_PAGES; i++)
			on0 += status[i] == 0;
		CHECK(on0 > REGION_PAGES / 4 && on0 < REGION_PAGES * 3 / 4,
		      "%zu of %d pages on colour 0", on0, REGION_PAGES);
	}
	free(addrs);
}

static void test_restore(void)
{
	int32_t status[REGION_PAGES];
	uint64_t *addrs, moved = 0;

	CHECK(g_region, "needs the pollute test's region");
	addrs = addrs_of(g_region, REGION_PAGES);
	CHECK(shim_pages(shim, 0, addrs, REGION_PAGES, ROCS_SHIM_RESTORE, status, &moved) == 0,
	      "MIGRATE: %s", strerror(errno));
	check_placed(0, addrs, status, REGION_PAGES, false);
	if (failure[0])
		return;
	CHECK(moved == REGION_PAGES, "moved %llu", (unsigned long long)moved);
	CHECK(pattern_broken(g_region, REGION_PAGES, REGION_SEED) < 0, "data changed");
	free(addrs);
}

/*
 * A Restore puts each page back on the colour it had before Pollute moved it, so that a
 * search that confines pages and gives up leaves the target's layout as it found it.
 * HOME_PAGES pages that start on ordinary colours are confined and restored: every one
 * must go home (the stash, or a block of COLOURS frames, which holds a frame of every
 * colour, always has a frame of it in this guest's free memory). They are picked out of
 * a larger region because a page on a pollute colour stays there under Pollute, so has no
 * other colour to go back to; and new pages may well start there: an earlier test's
 * Restore frees pollute frames that the stash, when full, leaves to the next allocations
 * (seen: all of 64 new pages after the restore test).
 * Then a CONFIGURE that keeps the colour count but makes one of the homes a pollute
 * colour while the pages are confined: the pages of that home go to ordinary colours
 * instead, the others home.
 */
#define HOME_PAGES 64
#define HOME_REGION 1024
#define HOME_SEED 0x5eed0006ULL

static void test_home_inner(uint64_t *region, const uint64_t *region_addrs);

static void test_home(void)
{
	uint64_t *region = anon_pages(HOME_REGION, HOME_SEED);
	uint64_t *region_addrs = addrs_of(region, HOME_REGION);

	CHECK(region && region_addrs, "mmap, malloc");
	test_home_inner(region, region_addrs);
	munmap(region, HOME_REGION * PAGE);
	free(region_addrs);
	/* The configuration the other tests expect. */
	CHECK(shim_configure(COLOURS, POLLUTE_MASK, POOL_LIMIT) == 0, "CONFIGURE");
}

static void test_home_inner(uint64_t *region, const uint64_t *region_addrs)
{
	static int32_t region_colour[HOME_REGION];
	uint64_t addrs[HOME_PAGES], mask;
	int32_t home[HOME_PAGES], status[HOME_PAGES];
	size_t i, n = 0, away = 0;

	CHECK(shim_pages(shim, 0, region_addrs, HOME_REGION, 0, region_colour, NULL) == 0,
	      "QUERY: %s", strerror(errno));
	for (i = 0; i < HOME_REGION && n < HOME_PAGES; i++) {
		CHECK(region_colour[i] >= 0, "page %zu: QUERY %d", i, region_colour[i]);
		if (!is_pollute(region_colour[i])) {
			addrs[n] = region_addrs[i];
			home[n++] = region_colour[i];
		}
	}
	CHECK(n == HOME_PAGES, "only %zu of %d pages on ordinary colours", n, HOME_REGION);

	CHECK(shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, NULL) == 0,
	      "MIGRATE to Pollute: %s", strerror(errno));
	check_placed(0, addrs, status, n, true);
	if (failure[0])
		return;
	CHECK(shim_pages(shim, 0, addrs, n, ROCS_SHIM_RESTORE, status, NULL) == 0,
	      "MIGRATE to Restore: %s", strerror(errno));
	check_placed(0, addrs, status, n, false);
	if (failure[0])
		return;
	for (i = 0; i < n; i++)
		away += status[i] != home[i];
	CHECK(away == 0, "%zu of %zu restored pages not on their old colour", away, n);
	CHECK(pattern_broken(region, HOME_REGION, HOME_SEED) < 0, "data changed");

	/* The home of the first page becomes a pollute colour while the pages are confined. */
	CHECK(shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, NULL) == 0,
	      "MIGRATE to Pollute: %s", strerror(errno));
	check_placed(0, addrs, status, n, true);
	if (failure[0])
		return;
	mask = POLLUTE_MASK | 1ULL << home[0];
	CHECK(shim_configure(COLOURS, mask, POOL_LIMIT) == 0, "CONFIGURE");
	CHECK(shim_pages(shim, 0, addrs, n, ROCS_SHIM_RESTORE, status, NULL) == 0,
	      "MIGRATE to Restore: %s", strerror(errno));
	for (i = 0; i < n; i++) {
		int colour = pfn_colour(pagemap_pfn(0, addrs[i]));

		CHECK(status[i] >= 0 && colour == status[i], "page %zu: status %d, pagemap colour %d",
		      i, status[i], colour);
		CHECK(!((mask >> status[i]) & 1), "page %zu (home %d) restored onto pollute colour "
		      "%d (mask %#llx)", i, home[i], status[i], (unsigned long long)mask);
		CHECK(home[i] == home[0] || status[i] == home[i],
		      "page %zu: restored onto colour %d, home %d", i, status[i], home[i]);
	}
	CHECK(pattern_broken(region, HOME_REGION, HOME_SEED) < 0, "data changed");
}

/* Frames the stash holds of the pollute colours, all nodes; -1 when STATS fails. */
static long pollute_held(void)
{
	struct rocs_shim_stats st;
	long held = 0;
	unsigned int c;

	if (shim_stats(&st))
		return -1;
	for (c = 0; c < st.colours && c < 64; c++)
		if (is_pollute(c))
			held += st.held_by_colour[c];
	return held;
}

/*
 * A Restore frees the pollute-colour frames its pages leave, and Linux hands out the
 * frames freed last first (the per-cpu free lists, one per pageblock migratetype): without
 * the shim taking them back they become the next pages allocated on that CPU. Confine
 * RECLAIM_PAGES pages of this process, restore them, touch as many new pages: the stash
 * must have taken the freed frames back, and the new pages may be on the pollute colours
 * only by chance (about 2 of 16), not most of them. The stash is PREFILLed and full, as
 * rocsd keeps it, and caller and target share one CPU (they share its free lists).
 *
 * In this freshly booted guest the stash's frames come from unmovable pageblocks, so the
 * freed frames go to the unmovable list (the kernel's own next page tables and slabs)
 * and the target's faults, which take from the movable one, miss them even without the
 * reclaim: what fails without it here is the stash check (seen: 8186 pollute frames held
 * before the Restore and after). Frames the stash took from movable pageblocks (where
 * unmovable allocations fall back when memory is fragmented) go to the movable list,
 * and there the target's next faults get them.
 *
 * The ordinary test runs the same check for an ORDINARY migration (reclaim_pinned).
 */
#define RECLAIM_PAGES 1024
#define RECLAIM_SEED 0x5eed0005ULL

static int raw_config(uint32_t colours, uint32_t flags, uint64_t limit, uint64_t m0, uint64_t m1);
static void stash_settle(void);
static void reclaim_inner(unsigned int placement, uint32_t colour, size_t n);

/* The reclaim check for @n pages moved off the pollute colours by @placement (@colour for
 * ORDINARY), pinned to CPU 0. */
static void reclaim_pinned(unsigned int placement, uint32_t colour, size_t n)
{
	cpu_set_t cpu0, old_cpus;

	CHECK(sched_getaffinity(0, sizeof(old_cpus), &old_cpus) == 0, "sched_getaffinity");
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	CHECK(sched_setaffinity(0, sizeof(cpu0), &cpu0) == 0, "sched_setaffinity: %s",
	      strerror(errno));
	reclaim_inner(placement, colour, n);
	sched_setaffinity(0, sizeof(old_cpus), &old_cpus);
	/* The configuration the other tests expect. */
	CHECK(shim_configure(COLOURS, POLLUTE_MASK, POOL_LIMIT) == 0, "CONFIGURE");
}

static void test_reclaim(void)
{
	reclaim_pinned(ROCS_SHIM_RESTORE, 0, RECLAIM_PAGES);
}

static void reclaim_inner(unsigned int placement, uint32_t colour, size_t n)
{
	static int32_t status[RECLAIM_PAGES];
	const char *how = placement == ROCS_SHIM_RESTORE ? "Restore" : "ORDINARY migration";
	uint64_t *region, *fresh, *addrs, *fresh_addrs, moved = 0;
	long held_before, held_after;
	size_t i, on_pollute = 0;

	CHECK(n <= RECLAIM_PAGES, "%zu pages", n);
	CHECK(raw_config(COLOURS, ROCS_SHIM_CONFIG_PREFILL, POOL_LIMIT, POLLUTE_MASK, 0) == 0,
	      "CONFIGURE");
	stash_settle();
	region = anon_pages(n, RECLAIM_SEED);
	CHECK(region, "mmap");
	addrs = addrs_of(region, n);
	CHECK(addrs, "malloc");
	CHECK(shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, &moved) == 0,
	      "MIGRATE to Pollute: %s", strerror(errno));
	check_placed(0, addrs, status, n, true);
	if (failure[0])
		return;
	/* The refill after Pollute has topped the stash up again. */
	stash_settle();
	held_before = pollute_held();
	CHECK(shim_pages_to(shim, 0, addrs, n, placement, colour, status, &moved) == 0,
	      "MIGRATE off the pollute colours (%s): %s", how, strerror(errno));
	CHECK(moved == n, "moved %llu of %zu off the pollute colours", (unsigned long long)moved,
	      n);
	check_placed(0, addrs, status, n, false);
	if (failure[0])
		return;

	/* New pages of the same process, right after the move. */
	fresh = anon_pages(n, RECLAIM_SEED + 1);
	CHECK(fresh, "mmap");
	fresh_addrs = addrs_of(fresh, n);
	CHECK(fresh_addrs, "malloc");
	CHECK(shim_pages(shim, 0, fresh_addrs, n, 0, status, NULL) == 0,
	      "QUERY: %s", strerror(errno));
	held_after = pollute_held();
	for (i = 0; i < n; i++) {
		CHECK(status[i] >= 0, "new page %zu: status %d", i, status[i]);
		on_pollute += is_pollute(status[i]);
	}
	printf("# reclaim: %zu of %zu new pages on pollute colours (by chance: %zu); the stash "
	       "held %ld pollute frames before the %s, %ld after\n",
	       on_pollute, n, n * 2 / COLOURS, held_before, how, held_after);
	/* Twice what chance gives: the frames the move freed did not go to them. */
	CHECK(on_pollute < n * 2 * 2 / COLOURS,
	      "%zu of %zu new pages on pollute colours", on_pollute, n);
	/* Those frames went back to the stash instead (a few per CPU are freed later, from
	 * the kernel's LRU batches). */
	CHECK(held_after - held_before >= (long)(n * 3 / 4),
	      "the stash held %ld pollute frames before the %s, %ld after", held_before, how,
	      held_after);
	CHECK(pattern_broken(region, n, RECLAIM_SEED) < 0, "data changed");
	munmap(region, n * PAGE);
	munmap(fresh, n * PAGE);
	free(addrs);
	free(fresh_addrs);
}

/*
 * ORDINARY: a page the allocator put on a pollute colour has no home to go back to; rocsd
 * sends it to the ordinary colour where its program has room. ORD_PAGES pages that start
 * on ordinary colours other than ORD_COLOUR are confined, then moved with ORDINARY onto
 * ORD_COLOUR in one call with ORD_STAY pages left on other ordinary colours: the confined
 * ones land on ORD_COLOUR, not on their old colour (the stash, or a block of COLOURS
 * frames, always has a frame of it in this guest's free memory), the others stay where
 * they are; asked again with another colour, none moves. Confined and restored again,
 * each page comes back to ORD_COLOUR, the colour it had before that Pollute, not to the
 * one it had before the first. A colour that is not an ordinary one, and a colour with
 * another placement or with QUERY, are refused for the whole call and move nothing.
 * Last, the reclaim test's check for an ORDINARY migration: the pollute frames it frees
 * go to the stash, as a Restore's do (few pages: only the frames of ORD_COLOUR leave the
 * full stash to make room for them).
 */
#define ORD_COLOUR 7
#define ORD_PAGES 64
#define ORD_STAY 16
#define ORD_REGION 1024
#define ORD_SEED 0x5eed0007ULL
#define ORD_RECLAIM_PAGES 128

static int raw_pages(unsigned long cmd, uint32_t pid, uint32_t placement, uint64_t count,
		     uint64_t addrs, uint64_t status, uint32_t colour, uint32_t flags);
static void test_ordinary_inner(uint64_t *region, const uint64_t *region_addrs);

static void test_ordinary(void)
{
	uint64_t *region = anon_pages(ORD_REGION, ORD_SEED);
	uint64_t *region_addrs = addrs_of(region, ORD_REGION);

	CHECK(region && region_addrs, "mmap, malloc");
	test_ordinary_inner(region, region_addrs);
	munmap(region, ORD_REGION * PAGE);
	free(region_addrs);
	if (failure[0])
		return;
	reclaim_pinned(ROCS_SHIM_ORDINARY, ORD_COLOUR, ORD_RECLAIM_PAGES);
}

static void test_ordinary_inner(uint64_t *region, const uint64_t *region_addrs)
{
	enum { N = ORD_PAGES + ORD_STAY };
	static int32_t region_colour[ORD_REGION];
	static const struct {
		unsigned long cmd;
		uint32_t placement, colour, flags;
		const char *what;
	} refused[] = {
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_ORDINARY, 0, 0, "ORDINARY to pollute colour 0" },
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_ORDINARY, 1, 0, "ORDINARY to pollute colour 1" },
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_ORDINARY, COLOURS, 0, "ORDINARY to colour 16 of 16" },
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_ORDINARY, ROCS_SHIM_MAX_COLOURS, 0,
		  "ORDINARY to colour MAX_COLOURS" },
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_ORDINARY, 0xffffffffu, 0, "ORDINARY to colour ~0" },
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_ORDINARY, ORD_COLOUR, 1, "ORDINARY with flags 1" },
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_POLLUTE, ORD_COLOUR, 0, "POLLUTE with a colour" },
		{ ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_RESTORE, ORD_COLOUR, 0, "RESTORE with a colour" },
		{ ROCS_SHIM_IOC_QUERY, 0, ORD_COLOUR, 0, "QUERY with a colour" },
	};
	uint64_t addrs[N], moved = 0;
	int32_t was[N], status[N], confined[ORD_PAGES];
	struct rocs_shim_stats before, after;
	size_t i, n = 0, stay = 0;
	int rc;

	/* ORD_PAGES pages to confine, then ORD_STAY to leave, all on other ordinary colours. */
	CHECK(shim_pages(shim, 0, region_addrs, ORD_REGION, 0, region_colour, NULL) == 0,
	      "QUERY: %s", strerror(errno));
	for (i = 0; i < ORD_REGION && n + stay < N; i++) {
		CHECK(region_colour[i] >= 0, "page %zu: QUERY %d", i, region_colour[i]);
		if (is_pollute(region_colour[i]) || region_colour[i] == ORD_COLOUR)
			continue;
		if (n < ORD_PAGES) {
			addrs[n] = region_addrs[i];
			was[n++] = region_colour[i];
		} else {
			addrs[ORD_PAGES + stay] = region_addrs[i];
			was[ORD_PAGES + stay++] = region_colour[i];
		}
	}
	CHECK(n + stay == N, "only %zu of %d pages on ordinary colours other than %d", n + stay,
	      ORD_REGION, ORD_COLOUR);
	CHECK(shim_pages(shim, 0, addrs, ORD_PAGES, ROCS_SHIM_POLLUTE, confined, NULL) == 0,
	      "MIGRATE to Pollute: %s", strerror(errno));
	check_placed(0, addrs, confined, ORD_PAGES, true);
	if (failure[0])
		return;

	/* Refused before anything moves: every page is where it was. */
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		rc = raw_pages(refused[i].cmd, 0, refused[i].placement, N, (uintptr_t)addrs,
			       (uintptr_t)status, refused[i].colour, refused[i].flags);
		CHECK(rc == EINVAL, "%s: %d", refused[i].what, rc);
	}
	for (i = 0; i < N; i++) {
		int colour = pfn_colour(pagemap_pfn(0, addrs[i]));

		CHECK(colour == (i < ORD_PAGES ? confined[i] : was[i]),
		      "page %zu moved to colour %d by a refused call", i, colour);
	}

	CHECK(shim_stats(&before) == 0, "STATS");
	CHECK(shim_pages_to(shim, 0, addrs, N, ROCS_SHIM_ORDINARY, ORD_COLOUR, status, &moved) == 0,
	      "MIGRATE to ORDINARY %d: %s", ORD_COLOUR, strerror(errno));
	CHECK(shim_stats(&after) == 0, "STATS");
	for (i = 0; i < N; i++) {
		int want = i < ORD_PAGES ? ORD_COLOUR : was[i];
		int colour = pfn_colour(pagemap_pfn(0, addrs[i]));

		CHECK(status[i] == want && colour == want,
		      "page %zu (old colour %d): status %d, pagemap colour %d, expected %d", i,
		      was[i], status[i], colour, want);
	}
	CHECK(moved == ORD_PAGES, "moved %llu, expected %d", (unsigned long long)moved, ORD_PAGES);
	CHECK(after.migrated_restore - before.migrated_restore == ORD_PAGES &&
		      after.migrated_pollute == before.migrated_pollute &&
		      after.already_placed - before.already_placed == ORD_STAY,
	      "stats: restore +%llu, pollute +%llu, already placed +%llu",
	      (unsigned long long)(after.migrated_restore - before.migrated_restore),
	      (unsigned long long)(after.migrated_pollute - before.migrated_pollute),
	      (unsigned long long)(after.already_placed - before.already_placed));
	CHECK(shim_pages(shim, 0, addrs, N, 0, status, NULL) == 0, "QUERY: %s", strerror(errno));
	for (i = 0; i < N; i++)
		CHECK(status[i] == (i < ORD_PAGES ? ORD_COLOUR : was[i]), "page %zu: QUERY %d", i,
		      status[i]);
	CHECK(pattern_broken(region, ORD_REGION, ORD_SEED) < 0, "data changed");

	/* On an ordinary colour already: another colour asked for, none moves. */
	CHECK(shim_pages_to(shim, 0, addrs, N, ROCS_SHIM_ORDINARY, ORD_COLOUR + 1, status,
			    &moved) == 0, "MIGRATE to ORDINARY %d: %s", ORD_COLOUR + 1,
	      strerror(errno));
	CHECK(moved == 0, "moved %llu pages already on ordinary colours", (unsigned long long)moved);
	for (i = 0; i < N; i++)
		CHECK(status[i] == (i < ORD_PAGES ? ORD_COLOUR : was[i]), "page %zu: status %d", i,
		      status[i]);

	/* Confined again and restored: back to ORD_COLOUR, not to their first colour. */
	CHECK(shim_pages(shim, 0, addrs, ORD_PAGES, ROCS_SHIM_POLLUTE, status, NULL) == 0,
	      "MIGRATE to Pollute: %s", strerror(errno));
	check_placed(0, addrs, status, ORD_PAGES, true);
	if (failure[0])
		return;
	CHECK(shim_pages(shim, 0, addrs, ORD_PAGES, ROCS_SHIM_RESTORE, status, NULL) == 0,
	      "MIGRATE to Restore: %s", strerror(errno));
	check_placed(0, addrs, status, ORD_PAGES, false);
	if (failure[0])
		return;
	for (i = 0; i < ORD_PAGES; i++)
		CHECK(status[i] == ORD_COLOUR, "page %zu restored onto %d, not %d (its colour "
		      "before it was confined again)", i, status[i], ORD_COLOUR);
	CHECK(pattern_broken(region, ORD_REGION, ORD_SEED) < 0, "data changed");
}

/*
 * Automatic NUMA balancing migrates pages on its own, and move_pages(2) reports a page it
 * finds under migration as absent (ENOENT). Off while the tests compare node placement.
 */
static long numa_balancing(long value)
{
	long old = read_long("/proc/sys/kernel/numa_balancing");
	FILE *f = fopen("/proc/sys/kernel/numa_balancing", "w");

	if (f) {
		fprintf(f, "%ld\n", value);
		fclose(f);
	}
	return old;
}

static void test_numa_inner(void);

/* A page changes colour, never node: each node has its own frames. */
static void test_numa(void)
{
	long was = numa_balancing(0);

	test_numa_inner();
	numa_balancing(was);
}

static void test_numa_inner(void)
{
	enum { N = 256 };
	static void *pages[N];
	static int nodes[N], where[N];
	int32_t status[N];
	uint64_t *p = anon_pages(N, 0x2a), *addrs = addrs_of(p, N);
	int i, pass;

	CHECK(p && addrs, "setup");
	CHECK(access("/sys/devices/system/node/node1", F_OK) == 0, "the guest has one NUMA node");
	for (i = 0; i < N; i++) {
		pages[i] = p + i * (PAGE / 8);
		nodes[i] = i % 2;
	}
	CHECK(syscall(SYS_move_pages, 0, N, pages, nodes, where, 2) == 0, "move_pages: %s",
	      strerror(errno));
	/* Pollute, Restore, Pollute, ORDINARY onto colour 7. */
	for (pass = 0; pass < 4; pass++) {
		unsigned int to = pass == 3 ? ROCS_SHIM_ORDINARY
			: pass % 2 ? ROCS_SHIM_RESTORE : ROCS_SHIM_POLLUTE;

		CHECK(shim_pages_to(shim, 0, addrs, N, to, to == ROCS_SHIM_ORDINARY ? 7 : 0, status,
				    NULL) == 0, "MIGRATE");
		check_placed(0, addrs, status, N, to == ROCS_SHIM_POLLUTE);
		if (failure[0])
			return;
		for (i = 0; to == ROCS_SHIM_ORDINARY && i < N; i++)
			CHECK(status[i] == 7, "page %d: ORDINARY to colour 7 put it on %d", i,
			      status[i]);
		/* move_pages with no target nodes reports where each page is. */
		CHECK(syscall(SYS_move_pages, 0, N, pages, NULL, where, 0) == 0, "move_pages query");
		for (i = 0; i < N; i++)
			CHECK(where[i] == i % 2, "pass %d page %d: on node %d, was on %d", pass, i,
			      where[i], i % 2);
	}
	CHECK(pattern_broken(p, N, 0x2a) < 0, "data changed");
	munmap(p, N * PAGE);
	free(addrs);
}

/* Addresses out of order, repeated, and across two mappings in one call. */
static void test_order(void)
{
	uint64_t *a = mmap(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *b = (char *)a + 4 * PAGE;
	uint64_t addrs[8];
	int32_t status[8];
	size_t i;

	CHECK(a != MAP_FAILED, "mmap");
	for (i = 0; i < 4 * PAGE / 8; i++)
		a[i] = 0xa ^ (i * 0x9E3779B97F4A7C15ULL);
	/* Other protections on the second half: two VMAs, side by side. */
	CHECK(mprotect(b, 4 * PAGE, PROT_READ) == 0, "mprotect");
	for (i = 0; i < 4; i++)
		(void)((volatile char *)b)[i * PAGE]; /* a read fault maps the zero page */
	addrs[0] = (uintptr_t)a + 2 * PAGE;
	addrs[1] = (uintptr_t)a;
	addrs[2] = (uintptr_t)a + 2 * PAGE;
	addrs[3] = (uintptr_t)a + 3 * PAGE;
	addrs[4] = (uintptr_t)b + PAGE;
	addrs[5] = (uintptr_t)a + 1 * PAGE;
	addrs[6] = (uintptr_t)a + 3 * PAGE;
	addrs[7] = (uintptr_t)a;
	CHECK(shim_pages(shim, 0, addrs, 8, ROCS_SHIM_POLLUTE, status, NULL) == 0, "MIGRATE");
	for (i = 0; i < 8; i++) {
		if (i == 4) {
			CHECK(status[i] == -ENOENT, "zero page in the second mapping: %d", status[i]);
			continue;
		}
		CHECK(is_pollute(status[i]), "entry %zu: %d", i, status[i]);
		CHECK(status[i] == pfn_colour(pagemap_pfn(0, addrs[i])), "entry %zu: status %d, pagemap %d",
		      i, status[i], pfn_colour(pagemap_pfn(0, addrs[i])));
	}
	CHECK(status[0] == status[2] && status[1] == status[7] && status[3] == status[6],
	      "repeated addresses got different answers");
	CHECK(pattern_broken(a, 4, 0xa) < 0, "data changed");
	munmap(a, 8 * PAGE);
}

static void test_query(void)
{
	int32_t status[4];
	uint64_t addrs[4];
	char *untouched = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *gone = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(g_region && untouched != MAP_FAILED && gone != MAP_FAILED, "setup");
	munmap(gone, PAGE);
	addrs[0] = (uintptr_t)g_region;
	addrs[1] = (uintptr_t)g_region + 7 * PAGE;
	addrs[2] = (uintptr_t)untouched;
	addrs[3] = (uintptr_t)gone;
	CHECK(shim_pages(shim, 0, addrs, 4, 0, status, NULL) == 0, "QUERY: %s", strerror(errno));
	CHECK(status[0] == pfn_colour(pagemap_pfn(0, addrs[0])), "colour %d", status[0]);
	CHECK(status[1] == pfn_colour(pagemap_pfn(0, addrs[1])), "colour %d", status[1]);
	CHECK(status[2] == -ENOENT, "untouched page: %d", status[2]);
	CHECK(status[3] == -EFAULT, "unmapped page: %d", status[3]);
	/* QUERY did not fault the untouched page in. */
	CHECK(pagemap_pfn(0, addrs[2]) < 0, "QUERY populated a page");
	munmap(untouched, PAGE);
}

/*
 * A writer (a thread of this process, or another process: the daemon's case) writes a
 * sequence over the pages while they move back and forth. Every write first reads the
 * slot and checks it still holds the value written one round earlier; at the end every
 * slot must hold the last value written to it.
 */
#define WRITER_PAGES 64
#define WRITER_SLOTS (WRITER_PAGES * PAGE / 8)
#define WRITER_MIGRATIONS 10000

/* Lives in a MAP_SHARED page, so a writer process can report back. */
struct writer {
	volatile uint64_t *slot;	/* in the writer's address space */
	atomic_int ready;
	atomic_int stop;
	uint64_t last;		/* last sequence number written */
	uint64_t mismatches;	/* reads that did not see the previous round's value */
	uint64_t first_bad;
	uint64_t wrong_slots;	/* slots not holding their last value at the end */
	uint64_t first_wrong;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t s, i;

	atomic_store(&w->ready, 1);
	for (s = 1; !atomic_load_explicit(&w->stop, memory_order_relaxed); s++) {
		uint64_t expect;

		i = s % WRITER_SLOTS;
		expect = s >= WRITER_SLOTS ? s - WRITER_SLOTS : 0;
		if (w->slot[i] != expect && !w->mismatches++)
			w->first_bad = s;
		w->slot[i] = s;
	}
	w->last = s - 1;
	for (i = 0; i < WRITER_SLOTS; i++) {
		uint64_t expect = w->last >= i ? i + ((w->last - i) / WRITER_SLOTS) * WRITER_SLOTS : 0;

		if (w->slot[i] != expect && !w->wrong_slots++)
			w->first_wrong = i;
	}
	return NULL;
}

static void writer_run(bool other_process)
{
	struct writer *w = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pthread_t thread;
	pid_t pid = 0;
	int32_t status[WRITER_PAGES];
	uint64_t *addrs, total = 0, busy = 0, rounds = 0, i, bad = 0;
	void *buf;
	double t0;
	int rc = 0, st = 0;

	CHECK(w != MAP_FAILED, "mmap");
	if (other_process) {
		pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			buf = mmap(NULL, WRITER_PAGES * PAGE, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
			if (buf == MAP_FAILED)
				_exit(1);
			w->slot = buf;
			writer_main(w);
			_exit(0);
		}
	} else {
		buf = mmap(NULL, WRITER_PAGES * PAGE, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		CHECK(buf != MAP_FAILED, "mmap");
		w->slot = buf;
		CHECK(pthread_create(&thread, NULL, writer_main, w) == 0, "pthread_create");
	}
	for (i = 0; i < 1000 && !atomic_load(&w->ready); i++)
		usleep(10000);
	addrs = addrs_of((const void *)w->slot, WRITER_PAGES);
	t0 = now();
	while (atomic_load(&w->ready) && total < WRITER_MIGRATIONS) {
		uint64_t moved = 0;

		rc = shim_pages(shim, pid, addrs, WRITER_PAGES,
				rounds % 2 ? ROCS_SHIM_RESTORE : ROCS_SHIM_POLLUTE, status, &moved);
		if (rc)
			break;
		for (i = 0; i < WRITER_PAGES; i++) {
			if (status[i] == -EBUSY)
				busy++;
			else if (status[i] < 0 || is_pollute(status[i]) != !(rounds % 2))
				bad++;
		}
		total += moved;
		rounds++;
	}
	atomic_store(&w->stop, 1);
	if (other_process)
		waitpid(pid, &st, 0);
	else
		pthread_join(thread, NULL);
	free(addrs);
	printf("# writer (%s): %llu page migrations in %llu calls, %.2fs, %llu writes, %llu busy\n",
	       other_process ? "another process" : "a thread", (unsigned long long)total,
	       (unsigned long long)rounds, now() - t0, (unsigned long long)w->last,
	       (unsigned long long)busy);
	CHECK(rc == 0, "MIGRATE round %llu: %s", (unsigned long long)rounds, strerror(-rc));
	CHECK(!other_process || (WIFEXITED(st) && WEXITSTATUS(st) == 0), "the writer died");
	CHECK(total >= WRITER_MIGRATIONS, "only %llu migrations", (unsigned long long)total);
	CHECK(bad == 0, "%llu statuses neither a wanted colour nor EBUSY", (unsigned long long)bad);
	CHECK(w->mismatches == 0, "%llu writes lost (first at sequence %llu)",
	      (unsigned long long)w->mismatches, (unsigned long long)w->first_bad);
	CHECK(w->wrong_slots == 0, "%llu slots lost their last value (first: slot %llu)",
	      (unsigned long long)w->wrong_slots, (unsigned long long)w->first_wrong);
	CHECK(w->last > 2 * WRITER_SLOTS, "the writer wrote only %llu values",
	      (unsigned long long)w->last);
	if (!other_process)
		munmap((void *)w->slot, WRITER_PAGES * PAGE);
	munmap(w, PAGE);
}

static void test_writer(void)
{
	writer_run(false);
}

static void test_writer_process(void)
{
	writer_run(true);
}

/* The target exits, or unmaps the range, while MIGRATE works on it. */
#define VICTIM_PAGES 4096

static void test_target_vanishes(void)
{
	static const int delays_us[] = { 0, 2000, 10000, 40000 };
	volatile uint64_t *shared = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
					 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int32_t *status = malloc(VICTIM_PAGES * sizeof(*status));
	unsigned int run;

	CHECK(shared != MAP_FAILED && status, "setup");
	for (run = 0; run < 2 * (sizeof(delays_us) / sizeof(delays_us[0])); run++) {
		bool unmap = run & 1;
		int delay = delays_us[run / 2];
		int ready[2];
		pid_t child;
		uint64_t *addrs, moved = 0;
		char c;
		int rc, st;
		size_t i, ok = 0, gone = 0;

		CHECK(pipe(ready) == 0, "pipe");
		shared[0] = 0;
		child = fork();
		CHECK(child >= 0, "fork");
		if (child == 0) {
			uint64_t *p = anon_pages(VICTIM_PAGES, 7);

			shared[0] = (uintptr_t)p;
			if (write(ready[1], "r", 1) != 1)
				_exit(2);
			usleep(delay);
			if (unmap) {
				munmap(p, VICTIM_PAGES * PAGE);
				pause();
			}
			_exit(0);
		}
		close(ready[1]);
		CHECK(read(ready[0], &c, 1) == 1 && shared[0], "child not ready");
		close(ready[0]);
		addrs = addrs_of((void *)(uintptr_t)shared[0], VICTIM_PAGES);
		rc = shim_pages(shim, child, addrs, VICTIM_PAGES, ROCS_SHIM_POLLUTE, status, &moved);
		kill(child, SIGKILL);
		waitpid(child, &st, 0);
		free(addrs);
		CHECK(rc == 0 || rc == -ESRCH, "run %u: MIGRATE: %s", run, strerror(-rc));
		if (rc)
			continue;
		for (i = 0; i < VICTIM_PAGES; i++) {
			if (is_pollute(status[i]))
				ok++;
			else if (status[i] == -EFAULT || status[i] == -ENOENT || status[i] == -EBUSY ||
				 status[i] == -ESRCH)
				gone++;
			else
				CHECK(0, "run %u page %zu: status %d", run, i, status[i]);
		}
		CHECK(ok >= moved, "run %u: %zu on pollute colours, moved %llu", run,
		      ok, (unsigned long long)moved);
		printf("# vanish: %s after %d us: %zu moved, %zu not\n", unmap ? "unmap" : "exit",
		       delay, ok, gone);
	}
	munmap((void *)shared, PAGE);
	free(status);
}

static void test_thp(void)
{
	const size_t huge = 2UL << 20, n = 2 * huge / PAGE;
	char *raw = mmap(NULL, 3 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *p, *addrs;
	int32_t *status = malloc(n * sizeof(*status));
	long thp_before, thp_after;
	uint64_t moved = 0;
	size_t i;

	CHECK(raw != MAP_FAILED && status, "mmap");
	p = (uint64_t *)(((uintptr_t)raw + huge - 1) & ~(huge - 1));
	CHECK(madvise(p, 2 * huge, MADV_HUGEPAGE) == 0, "madvise: %s", strerror(errno));
	for (i = 0; i < 2 * huge / 8; i++)
		p[i] = 0x7a9ULL ^ (i * 0x9E3779B97F4A7C15ULL);
	thp_before = proc_kb("/proc/self/smaps_rollup", "AnonHugePages");
	CHECK(thp_before >= 4096, "the range is not THP-backed (AnonHugePages %ld kB)", thp_before);
	addrs = addrs_of(p, n);
	/* The first huge page whole, and only half of the second. */
	CHECK(shim_pages(shim, 0, addrs, n * 3 / 4, ROCS_SHIM_POLLUTE, status, &moved) == 0,
	      "MIGRATE: %s", strerror(errno));
	check_placed(0, addrs, status, n * 3 / 4, true);
	if (failure[0])
		return;
	thp_after = proc_kb("/proc/self/smaps_rollup", "AnonHugePages");
	CHECK(thp_after == thp_before - 4096, "AnonHugePages %ld kB -> %ld kB: not split",
	      thp_before, thp_after);
	for (i = 0; i < 2 * huge / 8; i++)
		CHECK(p[i] == (0x7a9ULL ^ (i * 0x9E3779B97F4A7C15ULL)), "word %zu changed", i);
	/* The untouched quarter is still where it was and still readable. */
	printf("# thp: %llu pages of 2 huge pages moved; AnonHugePages %ld -> %ld kB\n",
	       (unsigned long long)moved, thp_before, thp_after);
	munmap(raw, 3 * huge);
	free(addrs);
	free(status);
}

static void expect_all(const char *what, void *base, size_t n, int want)
{
	uint64_t *addrs = addrs_of(base, n);
	int32_t status[16];
	int64_t pfn_before = pagemap_pfn(0, (uintptr_t)base);
	size_t i;
	int rc;

	rc = shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, NULL);
	free(addrs);
	CHECK(rc == 0, "%s: MIGRATE: %s", what, strerror(-rc));
	for (i = 0; i < n; i++)
		CHECK(status[i] == want, "%s page %zu: status %d, expected %d", what, i, status[i],
		      want);
	CHECK(pagemap_pfn(0, (uintptr_t)base) == pfn_before, "%s: the page moved", what);
}

static void test_kinds(void)
{
	const size_t n = 8;
	char path[] = "/tmp/shimtest.XXXXXX";
	int fd = mkstemp(path);
	char *shared_anon, *file_priv, *file_shared, *untouched, *locked;
	long lck_before, lck_after;
	uint64_t *addrs;
	int32_t status[8];
	size_t i;
	int rc;

	CHECK(fd >= 0 && ftruncate(fd, n * PAGE) == 0, "temp file");
	shared_anon = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	file_priv = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	file_shared = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	untouched = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(shared_anon != MAP_FAILED && file_priv != MAP_FAILED && file_shared != MAP_FAILED &&
		      untouched != MAP_FAILED, "mmap");
	memset(shared_anon, 1, n * PAGE);
	memset(file_shared, 2, n * PAGE);
	/* Half the private file pages read (page cache), half written (private copies). */
	for (i = 0; i < n; i++) {
		if (i % 2)
			file_priv[i * PAGE] = 3;
		else
			(void)*(volatile char *)&file_priv[i * PAGE];
	}

	/* MAP_SHARED, anonymous or file: the pages belong to others too. */
	expect_all("shared anonymous", shared_anon, n, -EACCES);
	expect_all("shared file", file_shared, n, -EACCES);
	/* File-backed private mappings are left alone, copied-on-write pages included. */
	expect_all("private file", file_priv, n, -EOPNOTSUPP);
	/* Never touched: nothing to move, like move_pages(2). */
	expect_all("untouched", untouched, n, -ENOENT);
	if (failure[0])
		return;

	/* mlocked private anonymous pages move, and stay locked. */
	locked = (char *)anon_pages(n, 0x10c);
	CHECK(locked && mlock(locked, n * PAGE) == 0, "mlock: %s", strerror(errno));
	lck_before = proc_kb("/proc/self/status", "VmLck");
	addrs = addrs_of(locked, n);
	rc = shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, NULL);
	CHECK(rc == 0, "mlocked: MIGRATE: %s", strerror(-rc));
	check_placed(0, addrs, status, n, true);
	if (failure[0])
		return;
	lck_after = proc_kb("/proc/self/status", "VmLck");
	CHECK(lck_after == lck_before && lck_after >= (long)(n * PAGE / 1024),
	      "VmLck %ld -> %ld kB", lck_before, lck_after);
	CHECK(pattern_broken((uint64_t *)locked, n, 0x10c) < 0, "mlocked data changed");
	/* The new frames are mlocked themselves (not only the mapping): /proc/kpageflags. */
	for (i = 0; i < n; i++) {
		uint64_t flags = kpageflags(pagemap_pfn(0, addrs[i]));

		CHECK(flags & (1ULL << KPF_MLOCKED_BIT), "page %zu: new frame not mlocked (%#llx)", i,
		      (unsigned long long)flags);
	}
	munlock(locked, n * PAGE);
	free(addrs);

	/* Private anonymous pages shared copy-on-write with a child after fork(): the move
	 * happens for both, and both keep their view. */
	{
		uint64_t *cow = anon_pages(n, 0xc0);
		int go[2], st;
		pid_t child;

		CHECK(cow && pipe(go) == 0, "setup");
		child = fork();
		CHECK(child >= 0, "fork");
		if (child == 0) {
			char c;

			close(go[1]);
			if (read(go[0], &c, 1) != 1)
				_exit(3);
			_exit(pattern_broken(cow, n, 0xc0) < 0 ? 0 : 1);
		}
		close(go[0]);
		addrs = addrs_of(cow, n);
		rc = shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, NULL);
		if (write(go[1], "g", 1) != 1)
			rc = -EPIPE;
		close(go[1]);
		waitpid(child, &st, 0);
		CHECK(rc == 0, "cow: MIGRATE: %s", strerror(-rc));
		check_placed(0, addrs, status, n, true);
		if (failure[0])
			return;
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's copy changed");
		CHECK(pattern_broken(cow, n, 0xc0) < 0, "the parent's copy changed");
		free(addrs);
		munmap(cow, n * PAGE);
	}
	munmap(shared_anon, n * PAGE);
	munmap(file_priv, n * PAGE);
	munmap(file_shared, n * PAGE);
	munmap(untouched, n * PAGE);
	close(fd);
	unlink(path);
}

static void write_file(const char *path, const char *value)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(value, f);
		fclose(f);
	}
}

/* hugetlbfs pages and KSM-merged pages stay where they are, each with its own error. */
static void test_special(void)
{
	const size_t huge = 2UL << 20, n = 8;
	int32_t status[8];
	uint64_t *addrs;
	char *h, *k;
	size_t i;
	int rc;

	/* hugetlbfs: reserve one huge page for this. */
	write_file("/proc/sys/vm/nr_hugepages", "1");
	h = mmap(NULL, huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	CHECK(h != MAP_FAILED, "MAP_HUGETLB (nr_hugepages %ld): %s",
	      read_long("/proc/sys/vm/nr_hugepages"), strerror(errno));
	memset(h, 5, huge);
	addrs = addrs_of(h, n);
	rc = shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, NULL);
	free(addrs);
	CHECK(rc == 0, "hugetlb: MIGRATE: %s", strerror(-rc));
	for (i = 0; i < n; i++)
		CHECK(status[i] == -EOPNOTSUPP, "hugetlb page %zu: %d", i, status[i]);
	munmap(h, huge);
	write_file("/proc/sys/vm/nr_hugepages", "0");

	/* KSM: identical pages merged into one shared frame. */
	k = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(k != MAP_FAILED, "mmap");
	memset(k, 0x5a, n * PAGE);
	CHECK(madvise(k, n * PAGE, MADV_MERGEABLE) == 0, "MADV_MERGEABLE: %s", strerror(errno));
	write_file("/sys/kernel/mm/ksm/pages_to_scan", "5000");
	write_file("/sys/kernel/mm/ksm/sleep_millisecs", "10");
	write_file("/sys/kernel/mm/ksm/run", "1");
	for (i = 0; i < 500 && !ksm_merged(k, n); i++)
		usleep(20000);
	{
		/* Stop ksmd (keeping the merged pages) before MIGRATE: while it still merges
		 * or scans it holds the shared page's lock, and the first address would then
		 * be busy (EBUSY) rather than refused for what it is. */
		write_file("/sys/kernel/mm/ksm/run", "0");
		CHECK(ksm_merged(k, n), "ksmd did not merge the pages in 10 s");
		addrs = addrs_of(k, n);
		rc = shim_pages(shim, 0, addrs, n, ROCS_SHIM_POLLUTE, status, NULL);
		free(addrs);
		write_file("/sys/kernel/mm/ksm/run", "2"); /* unmerge everything */
		CHECK(rc == 0, "KSM: MIGRATE: %s", strerror(-rc));
		/* The same frame behind several addresses of one batch: the first gets
		 * EOPNOTSUPP, the kernel cannot lock it again for the others (EBUSY). */
		for (i = 0; i < n; i++)
			CHECK(status[i] == -EOPNOTSUPP || status[i] == -EBUSY, "KSM page %zu: %d", i,
			      status[i]);
		CHECK(status[0] == -EOPNOTSUPP, "first KSM page: %d", status[0]);
		for (i = 0; i < n * PAGE; i++)
			CHECK(k[i] == 0x5a, "KSM data changed at %zu", i);
		{
			size_t busy = 0;

			for (i = 0; i < n; i++)
				busy += status[i] == -EBUSY;
			printf("# special: hugetlb pages EOPNOTSUPP; one KSM frame behind %zu pages, "
			       "not moved: %zu EOPNOTSUPP, %zu EBUSY\n", n, n - busy, busy);
		}
	}
	munmap(k, n * PAGE);
}

static int raw_pages(unsigned long cmd, uint32_t pid, uint32_t placement, uint64_t count,
		     uint64_t addrs, uint64_t status, uint32_t colour, uint32_t flags)
{
	struct rocs_shim_pages req = { .pid = pid, .placement = placement, .count = count,
				       .addrs = addrs, .status = status, .colour = colour,
				       .flags = flags };

	return ioctl(shim, cmd, &req) ? errno : 0;
}

static int raw_config(uint32_t colours, uint32_t flags, uint64_t limit, uint64_t m0, uint64_t m1)
{
	struct rocs_shim_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.colours = colours;
	cfg.flags = flags;
	cfg.pool_limit = limit;
	cfg.pollute_mask[0] = m0;
	cfg.pollute_mask[1] = m1;
	return ioctl(shim, ROCS_SHIM_IOC_CONFIGURE, &cfg) ? errno : 0;
}

static void test_bad_arguments(void)
{
	uint64_t *page = anon_pages(1, 1);
	uint64_t a = (uintptr_t)page, unaligned = a + 8;
	int32_t st[1];
	const uint64_t kaddr = 0xffff888000000000ULL;
	unsigned long M = ROCS_SHIM_IOC_MIGRATE, Q = ROCS_SHIM_IOC_QUERY;
	uint64_t A = (uintptr_t)&a, S = (uintptr_t)st;
	int rc;

	CHECK(page, "mmap");
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 0, A, S, 0, 0);
	CHECK(rc == EINVAL, "count 0: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, ROCS_SHIM_MAX_PAGES + 1, A, S, 0, 0);
	CHECK(rc == EINVAL, "count max+1: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, UINT64_MAX, A, S, 0, 0);
	CHECK(rc == EINVAL, "count 2^64-1: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1ULL << 61, A, S, 0, 0);
	CHECK(rc == EINVAL, "count 2^61 (overflows a byte size): %d", rc);
	rc = raw_pages(M, 0, 0, 1, A, S, 0, 0);
	CHECK(rc == EINVAL, "placement 0: %d", rc);
	rc = raw_pages(M, 0, 4, 1, A, S, 0, 0);
	CHECK(rc == EINVAL, "placement 4: %d", rc);
	rc = raw_pages(M, 0, 0xffffffffu, 1, A, S, 0, 0);
	CHECK(rc == EINVAL, "placement ~0: %d", rc);
	rc = raw_pages(Q, 0, ROCS_SHIM_POLLUTE, 1, A, S, 0, 0);
	CHECK(rc == EINVAL, "QUERY with a placement: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1, A, S, 0, 1);
	CHECK(rc == EINVAL, "flags 1: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1, A, S, 0, 1U << 31);
	CHECK(rc == EINVAL, "flags bit 31: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1, (uintptr_t)&unaligned, S, 0, 0);
	CHECK(rc == EINVAL, "unaligned address: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1, 0, S, 0, 0);
	CHECK(rc == EFAULT, "addrs NULL: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1, kaddr, S, 0, 0);
	CHECK(rc == EFAULT, "addrs kernel pointer: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1, A, 0, 0, 0);
	CHECK(rc == EFAULT, "status NULL: %d", rc);
	rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 1, A, kaddr, 0, 0);
	CHECK(rc == EFAULT, "status kernel pointer: %d", rc);
	{
		/* Arrays that run off the end of a mapping into a hole. */
		char *edge = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uint64_t two[2] = { a, a };

		CHECK(edge != MAP_FAILED && munmap(edge + PAGE, PAGE) == 0, "mmap");
		memcpy(edge + PAGE - 8, &a, 8);
		rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 2, (uintptr_t)edge + PAGE - 8, S, 0, 0);
		CHECK(rc == EFAULT, "addrs run off the mapping: %d", rc);
		rc = raw_pages(M, 0, ROCS_SHIM_POLLUTE, 2, (uintptr_t)two,
			       (uintptr_t)edge + PAGE - 4, 0, 0);
		CHECK(rc == EFAULT, "status runs off the mapping: %d", rc);
		munmap(edge, PAGE);
	}
	rc = raw_pages(M, 0x7ffffff0, ROCS_SHIM_POLLUTE, 1, A, S, 0, 0);
	CHECK(rc == ESRCH, "no such pid: %d", rc);
	rc = raw_pages(M, 0xffffffffu, ROCS_SHIM_POLLUTE, 1, A, S, 0, 0);
	CHECK(rc == ESRCH, "pid ~0: %d", rc);
	rc = raw_pages(M, 2, ROCS_SHIM_POLLUTE, 1, A, S, 0, 0);
	CHECK(rc == ESRCH, "a kernel thread (kthreadd): %d", rc);
	rc = ioctl(shim, ROCS_SHIM_IOC_MIGRATE, (void *)8) ? errno : 0;
	CHECK(rc == EFAULT, "argument pointer 8: %d", rc);
	rc = ioctl(shim, ROCS_SHIM_IOC_INFO, (void *)kaddr) ? errno : 0;
	CHECK(rc == EFAULT, "INFO to a kernel pointer: %d", rc);
	rc = ioctl(shim, ROCS_SHIM_IOC_STATS, NULL) ? errno : 0;
	CHECK(rc == EFAULT, "STATS to NULL: %d", rc);
	rc = ioctl(shim, _IO(ROCS_SHIM_IOC_MAGIC, 0x42)) ? errno : 0;
	CHECK(rc == ENOTTY, "unknown ioctl: %d", rc);

	/* Colour masks and geometry. */
	CHECK((rc = raw_config(16, 0, 64, 0, 0)) == EINVAL, "empty mask: %d", rc);
	CHECK((rc = raw_config(16, 0, 64, 1ULL << 16, 0)) == EINVAL, "mask beyond colours: %d", rc);
	CHECK((rc = raw_config(16, 0, 64, 1, 1)) == EINVAL, "mask bit 64 with 16 colours: %d", rc);
	CHECK((rc = raw_config(16, 0, 64, 0xffff, 0)) == EINVAL, "every colour polluted: %d", rc);
	CHECK((rc = raw_config(12, 0, 64, 1, 0)) == EINVAL, "12 colours: %d", rc);
	CHECK((rc = raw_config(0, 0, 64, 1, 0)) == EINVAL, "0 colours: %d", rc);
	CHECK((rc = raw_config(1, 0, 64, 1, 0)) == EINVAL, "1 colour: %d", rc);
	CHECK((rc = raw_config(2048, 0, 64, 1, 0)) == EINVAL, "2048 colours: %d", rc);
	CHECK((rc = raw_config(16, 2, 64, 1, 0)) == EINVAL, "unknown flag: %d", rc);
	CHECK((rc = raw_config(16, 0, ROCS_SHIM_MAX_POOL_LIMIT + 1, 1, 0)) == EINVAL,
	      "pool limit too large: %d", rc);
	CHECK((rc = raw_config(128, 0, 64, 0, 1ULL << 63)) == 0, "colour 127 of 128: %d", rc);
	/* A failed CONFIGURE changed nothing; put the suite's configuration back. */
	CHECK(shim_configure(COLOURS, POLLUTE_MASK, POOL_LIMIT) == 0, "CONFIGURE");
	munmap(page, PAGE);
}

/* The capability sets of this process without CAP_SYS_PTRACE. */
static int drop_cap_sys_ptrace(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data))
		return -errno;
	data[0].effective &= ~(1u << CAP_SYS_PTRACE);
	data[0].permitted &= ~(1u << CAP_SYS_PTRACE);
	data[0].inheritable &= ~(1u << CAP_SYS_PTRACE);
	return syscall(SYS_capset, &hdr, data) ? -errno : 0;
}

/* Runs @fn in a child process; its exit status is the number of the failed check, 0 = all ok. */
static int in_child(int (*fn)(void *), void *arg)
{
	int st;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(arg));
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return 255;
	return WEXITSTATUS(st);
}

static int as_nobody(void *arg)
{
	struct rocs_shim_info info;
	int fd;

	(void)arg;
	if (setgid(65534) || setuid(65534))
		return 10;
	/* The device is 0600 root: not even opened. */
	fd = open(ROCS_SHIM_DEVICE, O_RDWR);
	if (fd >= 0 || errno != EACCES)
		return 11;
	/* With a descriptor root opened, every ioctl still wants CAP_SYS_ADMIN. */
	if (ioctl(shim, ROCS_SHIM_IOC_INFO, &info) == 0 || errno != EPERM)
		return 12;
	if (ioctl(shim, ROCS_SHIM_IOC_STATS, &info) == 0 || errno != EPERM)
		return 13;
	if (shim_configure(COLOURS, 1, 0) != -EPERM)
		return 14;
	return 0;
}

struct victim {
	pid_t pid;
	uint64_t addr;
};

static int without_ptrace(void *arg)
{
	const struct victim *v = arg;
	pid_t victim = v->pid;
	uint64_t *mine = anon_pages(1, 3), a = (uintptr_t)mine;
	uint64_t victim_addr = v->addr;
	int32_t st;

	if (drop_cap_sys_ptrace())
		return 20;
	/* Root without CAP_SYS_PTRACE may not move another user's pages... */
	if (shim_pages(shim, victim, &victim_addr, 1, ROCS_SHIM_POLLUTE, &st, NULL) != -EPERM)
		return 21;
	if (shim_pages(shim, victim, &victim_addr, 1, 0, &st, NULL) != -EPERM)
		return 22;
	/* ...but its own. */
	if (shim_pages(shim, 0, &a, 1, ROCS_SHIM_POLLUTE, &st, NULL) != 0 || st < 0)
		return 23;
	if (shim_pages(shim, getpid(), &a, 1, ROCS_SHIM_RESTORE, &st, NULL) != 0 || st < 0)
		return 24;
	return 0;
}

static void test_permissions(void)
{
	volatile uint64_t *shared = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
					 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int ready[2], rc;
	pid_t victim;
	char c;
	int32_t st;
	uint64_t addr;
	struct victim target;

	CHECK(shared != MAP_FAILED && pipe(ready) == 0, "setup");
	rc = in_child(as_nobody, NULL);
	CHECK(rc == 0, "unprivileged caller: check %d failed", rc);

	/* A process of another user, with one touched page. */
	victim = fork();
	CHECK(victim >= 0, "fork");
	if (victim == 0) {
		uint64_t *p = anon_pages(1, 9);

		if (setgid(65534) || setuid(65534))
			_exit(1);
		shared[0] = (uintptr_t)p;
		if (write(ready[1], "r", 1) != 1)
			_exit(2);
		pause();
		_exit(0);
	}
	CHECK(read(ready[0], &c, 1) == 1, "victim not ready");
	addr = shared[0];
	target.pid = victim;
	target.addr = addr;
	rc = in_child(without_ptrace, &target);
	/* Full root (CAP_SYS_PTRACE) may. */
	{
		int rc2 = shim_pages(shim, victim, &addr, 1, ROCS_SHIM_POLLUTE, &st, NULL);

		kill(victim, SIGKILL);
		waitpid(victim, NULL, 0);
		CHECK(rc == 0, "root without CAP_SYS_PTRACE: check %d failed", rc);
		CHECK(rc2 == 0 && is_pollute(st), "root on another user's process: %d, status %d", rc2,
		      st);
	}
	close(ready[0]);
	close(ready[1]);
	munmap((void *)shared, PAGE);
}

static uint64_t rng_state = 0x243F6A8885A308D3ULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Alongside the fuzzing: valid reconfigurations (with and without the background fill)
 * and migrations of this thread's own pages (Pollute, Restore, ORDINARY onto the lowest
 * ordinary colour), so the paths meet under the module's lock. */
struct churn {
	atomic_int stop;
	unsigned long configs, migrations, errors;
	uint64_t *mem;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	uint64_t state = 0x9e3779b97f4a7c15ULL, addrs[32];
	int32_t status[32];
	unsigned int i;

	for (i = 0; i < 32; i++)
		addrs[i] = (uintptr_t)c->mem + i * PAGE;
	while (!atomic_load(&c->stop) && c->configs < 16) {
		unsigned int colours, k, ordinary;
		uint64_t mask;

		state ^= state << 13;
		state ^= state >> 7;
		state ^= state << 17;
		colours = 2u << (state % 4);	/* 2..16 */
		mask = (state >> 8) & ((colours == 64 ? 0 : 1ULL << colours) - 1);
		if (!mask)
			mask = 1;
		if (mask == (colours == 64 ? ~0ULL : (1ULL << colours) - 1))
			mask &= ~1ULL;
		if (raw_config(colours, (state >> 40) & 1, (state >> 41) % 256, mask, 0))
			c->errors++;
		c->configs++;
		for (ordinary = 0; (mask >> ordinary) & 1; ordinary++)
			;
		for (k = 0; k < 6; k++) {
			unsigned int to = k % 2 ? (k == 5 ? ROCS_SHIM_ORDINARY : ROCS_SHIM_RESTORE)
						: ROCS_SHIM_POLLUTE;

			if (shim_pages_to(shim, 0, addrs, 32, to,
					  to == ROCS_SHIM_ORDINARY ? ordinary : 0, status, NULL))
				c->errors++;
			c->migrations++;
		}
	}
	return NULL;
}

static void test_fuzz(void)
{
	static const unsigned long cmds[] = { ROCS_SHIM_IOC_INFO, ROCS_SHIM_IOC_CONFIGURE,
					      ROCS_SHIM_IOC_MIGRATE, ROCS_SHIM_IOC_QUERY,
					      ROCS_SHIM_IOC_STATS };
	static union {
		struct rocs_shim_stats stats;
		uint64_t words[sizeof(struct rocs_shim_stats) / 8];
	} buf;
	uint64_t *mem = anon_pages(64, 77);
	int32_t status[64];
	uint64_t addrs[64];
	unsigned long i, calls = 0, errors[5] = { 0 };
	const int known[] = { EINVAL, EFAULT, ENOTTY, ESRCH, ENOMEM };

	struct churn churn = { 0 };
	pthread_t churner;

	CHECK(mem, "mmap");
	churn.mem = anon_pages(32, 0xc4);
	CHECK(churn.mem, "mmap");
	CHECK(pthread_create(&churner, NULL, churn_main, &churn) == 0, "pthread_create");
	for (i = 0; i < 20000; i++) {
		unsigned long cmd;
		size_t w;
		int rc, k;

		switch (rnd() % 4) {
		case 0: /* any number at all */
			cmd = (uint32_t)rnd();
			break;
		case 1: /* our magic, any number, size and direction */
			cmd = _IOC(rnd() % 4, ROCS_SHIM_IOC_MAGIC, rnd() % 256, rnd() % 0x3fff);
			break;
		default: /* a real command with random contents */
			cmd = cmds[rnd() % 5];
			break;
		}
		for (w = 0; w < sizeof(buf.words) / 8; w++)
			buf.words[w] = rnd();
		if (cmd == ROCS_SHIM_IOC_MIGRATE || cmd == ROCS_SHIM_IOC_QUERY) {
			struct rocs_shim_pages *req = (void *)&buf;

			/* Half the time, plausible pointers so the deeper paths run too. */
			if (rnd() % 2) {
				req->count = 1 + rnd() % 64;
				for (w = 0; w < 64; w++)
					addrs[w] = rnd() % 3 ? (uintptr_t)mem + (rnd() % 64) * PAGE
							      : rnd() & ~(PAGE - 1);
				/* ...and now and then a wild pointer among them. */
				req->addrs = rnd() % 8 ? (uintptr_t)addrs : rnd();
				req->status = rnd() % 8 ? (uintptr_t)status : rnd();
				req->pid = rnd() % 8 ? 0 : (uint32_t)rnd();
				req->flags = rnd() % 8 ? 0 : (uint32_t)rnd();
				req->placement = rnd() % 5;
				/* Mostly a colour ORDINARY accepts or one it does not, now and
				 * then a wild one. */
				req->colour = rnd() % 8 ? rnd() % COLOURS : (uint32_t)rnd();
			}
		}
		rc = ioctl(shim, cmd, &buf) ? errno : 0;
		calls++;
		if (rc == 0)
			continue;
		for (k = 0; k < 5; k++)
			if (rc == known[k])
				errors[k]++;
		for (k = 0; k < 5 && rc != known[k]; k++)
			;
		CHECK(k < 5, "ioctl %#lx: unexpected errno %d", cmd, rc);
	}
	atomic_store(&churn.stop, 1);
	pthread_join(churner, NULL);
	printf("# fuzz: alongside, %lu reconfigurations and %lu migrations, %lu failed\n",
	       churn.configs, churn.migrations, churn.errors);
	CHECK(churn.errors == 0, "%lu valid CONFIGURE/MIGRATE calls failed", churn.errors);
	CHECK(churn.configs > 10, "only %lu reconfigurations ran alongside", churn.configs);
	CHECK(pattern_broken(churn.mem, 32, 0xc4) < 0, "migrations alongside changed data");
	munmap(churn.mem, 32 * PAGE);
	CHECK(pattern_broken(mem, 64, 77) < 0, "fuzzed migrations changed data");
	printf("# fuzz: %lu ioctls: EINVAL %lu EFAULT %lu ENOTTY %lu ESRCH %lu ENOMEM %lu\n", calls,
	       errors[0], errors[1], errors[2], errors[3], errors[4]);
	CHECK(shim_configure(COLOURS, POLLUTE_MASK, POOL_LIMIT) == 0, "CONFIGURE");
	munmap(mem, 64 * PAGE);
}

/* MIGRATE against the kernel's move_pages(2) between the guest's two NUMA nodes. */
#define BENCH_PAGES 4096

static long move_to_node(void **pages, int node, int *status)
{
	static int nodes[BENCH_PAGES];
	int i;

	for (i = 0; i < BENCH_PAGES; i++)
		nodes[i] = node;
	return syscall(SYS_move_pages, 0, BENCH_PAGES, pages, nodes, status, 2 /* MPOL_MF_MOVE */);
}

/* Wait until the stash has not changed for 200 ms (the background fill is done), at most
 * 20 s. */
static void stash_settle(void)
{
	struct rocs_shim_info info;
	uint64_t last = UINT64_MAX;
	int i, same = 0;

	for (i = 0; i < 400 && same < 4; i++) {
		if (ioctl(shim, ROCS_SHIM_IOC_INFO, &info))
			return;
		same = info.pool_frames == last ? same + 1 : 0;
		last = info.pool_frames;
		usleep(50000);
	}
}

/*
 * rocsd's own pattern: a search moves one step of pages to the pollute buffer per window
 * (at most its page budget), and rocsd keeps the stash PREFILLed to two such steps
 * (pool_limit = 4 x the page budget: half of it for the pollute colours). DAEMON_STEPS steps
 * of DAEMON_STEP pages, a window apart, against move_pages(2) of the same batches between
 * the nodes, a window apart too; the medians of the per-step rates are compared.
 */
#define DAEMON_STEP 1024
#define DAEMON_STEPS 8
#define DAEMON_WINDOW_US 100000

static int cmp_double(const void *a, const void *b);
static double median(double *v, int n);

static void daemon_pattern(void)
{
	static void *pages[DAEMON_STEP * DAEMON_STEPS];
	static int nodes[DAEMON_STEP * DAEMON_STEPS], nstatus[DAEMON_STEP * DAEMON_STEPS];
	const size_t n = DAEMON_STEP * DAEMON_STEPS;
	uint64_t *p = anon_pages(n, 0xd0), *q = anon_pages(n, 0xd1);
	uint64_t *addrs = addrs_of(q, n), moved;
	int32_t *status = malloc(DAEMON_STEP * sizeof(*status));
	double t, r_shim[DAEMON_STEPS], r_move[DAEMON_STEPS], m_shim, m_move;
	size_t i;
	int s;

	CHECK(p && q && addrs && status, "setup");
	for (i = 0; i < n; i++) {
		pages[i] = (char *)p + i * PAGE;
		nodes[i] = 0;
	}
	CHECK(syscall(SYS_move_pages, 0, n, pages, nodes, nstatus, 2) == 0,
	      "move_pages to node 0: %s", strerror(errno));
	for (i = 0; i < n; i++)
		nodes[i] = 1;
	CHECK(raw_config(COLOURS, ROCS_SHIM_CONFIG_PREFILL, 4 * DAEMON_STEP, POLLUTE_MASK, 0) == 0,
	      "CONFIGURE with PREFILL");
	stash_settle();
	for (s = 0; s < DAEMON_STEPS; s++) {
		size_t first = (size_t)s * DAEMON_STEP;

		t = now();
		CHECK(shim_pages(shim, 0, addrs + first, DAEMON_STEP, ROCS_SHIM_POLLUTE, status,
				 &moved) == 0, "MIGRATE step %d", s);
		r_shim[s] = moved / (now() - t);
		CHECK(moved >= DAEMON_STEP / 2, "step %d moved %llu", s, (unsigned long long)moved);
		usleep(DAEMON_WINDOW_US);
		t = now();
		CHECK(syscall(SYS_move_pages, 0, DAEMON_STEP, pages + first, nodes + first,
			      nstatus + first, 2) == 0, "move_pages step %d: %s", s, strerror(errno));
		r_move[s] = DAEMON_STEP / (now() - t);
		usleep(DAEMON_WINDOW_US);
	}
	CHECK(pattern_broken(p, n, 0xd0) < 0 && pattern_broken(q, n, 0xd1) < 0, "data changed");
	m_shim = median(r_shim, DAEMON_STEPS);
	m_move = median(r_move, DAEMON_STEPS);
	printf("# throughput: rocsd's pattern (steps of %d pages to Pollute a %d ms window apart, "
	       "the stash PREFILLed to two steps): MIGRATE %.0f pages/s, move_pages(2) %.0f pages/s, "
	       "ratio %.2f (medians of %d steps)\n",
	       DAEMON_STEP, DAEMON_WINDOW_US / 1000, m_shim, m_move, m_shim / m_move, DAEMON_STEPS);
	munmap(p, n * PAGE);
	munmap(q, n * PAGE);
	free(addrs);
	free(status);
}

static void test_throughput_inner(void);

static void test_throughput(void)
{
	long was = numa_balancing(0);

	test_throughput_inner();
	numa_balancing(was);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * Rounds alternate the two, each on its own buffer of BENCH_PAGES pages, so that both see
 * the same host (a TCG guest on a shared machine runs at whatever speed the host gives
 * it); the medians of the per-round rates are compared.
 */
#define BENCH_ROUNDS 6

static void test_throughput_inner(void)
{
	static void *pages[BENCH_PAGES];
	static int nstatus[BENCH_PAGES];
	int32_t *status = malloc(BENCH_PAGES * sizeof(*status));
	uint64_t *p = anon_pages(BENCH_PAGES, 0xbe), *q = anon_pages(BENCH_PAGES, 0xbf);
	uint64_t *addrs = addrs_of(q, BENCH_PAGES), moved = 0, n_cold = 0;
	double t, t_fill, t_cold, r_move[BENCH_ROUNDS], r_shim[BENCH_ROUNDS];
	int round, i;

	CHECK(p && q && status && addrs, "setup");
	CHECK(access("/sys/devices/system/node/node1", F_OK) == 0, "the guest has one NUMA node");
	for (i = 0; i < BENCH_PAGES; i++)
		pages[i] = (char *)p + (size_t)i * PAGE;
	CHECK(move_to_node(pages, 0, nstatus) == 0, "move_pages to node 0: %s", strerror(errno));

	/* Pollute with the pollute colours' stash empty: every frame found the hard way. */
	CHECK(raw_config(COLOURS, 0, POOL_LIMIT, POLLUTE_MASK, 0) == 0, "CONFIGURE");
	t = now();
	CHECK(shim_pages(shim, 0, addrs, BENCH_PAGES, ROCS_SHIM_POLLUTE, status, &n_cold) == 0,
	      "MIGRATE");
	t_cold = now() - t;
	CHECK(n_cold >= BENCH_PAGES / 2, "cold pass moved %llu", (unsigned long long)n_cold);
	CHECK(shim_pages(shim, 0, addrs, BENCH_PAGES, ROCS_SHIM_RESTORE, status, &moved) == 0,
	      "MIGRATE");
	daemon_pattern();
	if (failure[0])
		return;

	/* The stash as the daemon keeps it: the pollute colours' share (half of POOL_LIMIT =
	 * BENCH_PAGES frames per node) filled, and topped up in the background between
	 * bursts. */
	t = now();
	CHECK(raw_config(COLOURS, ROCS_SHIM_CONFIG_PREFILL, POOL_LIMIT, POLLUTE_MASK, 0) == 0,
	      "CONFIGURE with PREFILL");
	stash_settle();
	t_fill = now() - t;
	{
		struct rocs_shim_stats st;

		CHECK(shim_stats(&st) == 0, "STATS");
		/* Both nodes' pollute shares are full: POOL_LIMIT / 2 / 2 per pollute colour and
		 * node, less a few where a quarter of a node's frames of a colour is less. */
		CHECK(st.held_by_colour[0] >= POOL_LIMIT / 2 - 8 &&
			      st.held_by_colour[1] >= POOL_LIMIT / 2 - 8,
		      "after PREFILL: %llu and %llu frames of the pollute colours",
		      (unsigned long long)st.held_by_colour[0], (unsigned long long)st.held_by_colour[1]);
	}

	for (round = 0; round < BENCH_ROUNDS; round++) {
		int node = (round + 1) % 2;
		unsigned int to = round % 2 ? ROCS_SHIM_RESTORE : ROCS_SHIM_POLLUTE;

		t = now();
		CHECK(move_to_node(pages, node, nstatus) == 0, "move_pages: %s", strerror(errno));
		r_move[round] = BENCH_PAGES / (now() - t);
		for (i = 0; i < BENCH_PAGES; i++)
			CHECK(nstatus[i] == node, "move_pages page %d: %d", i, nstatus[i]);

		stash_settle();
		t = now();
		CHECK(shim_pages(shim, 0, addrs, BENCH_PAGES, to, status, &moved) == 0, "MIGRATE");
		/* Rates count the pages that changed frame (a page already on a wanted colour
		 * stays: 1 in 8 by chance in the first round); move_pages moves every page. */
		r_shim[round] = moved / (now() - t);
		CHECK(moved >= BENCH_PAGES / 2, "round %d moved %llu", round, (unsigned long long)moved);
		for (i = 0; i < BENCH_PAGES; i++)
			CHECK(status[i] >= 0 && is_pollute(status[i]) == (to == ROCS_SHIM_POLLUTE),
			      "MIGRATE page %d: %d", i, status[i]);
	}
	CHECK(pattern_broken(p, BENCH_PAGES, 0xbe) < 0 && pattern_broken(q, BENCH_PAGES, 0xbf) < 0,
	      "data changed");
	{
		double m_shim = median(r_shim, BENCH_ROUNDS), m_move = median(r_move, BENCH_ROUNDS);

		printf("# throughput: MIGRATE %.0f pages/s (stash kept filled), move_pages(2) %.0f "
		       "pages/s between nodes, ratio %.2f (medians of %d alternating rounds of %d "
		       "pages; TCG guest, page_poison=1)\n",
		       m_shim, m_move, m_shim / m_move, BENCH_ROUNDS, BENCH_PAGES);
		printf("# throughput: MIGRATE to Pollute with the pollute stash empty %.0f pages/s, "
		       "ratio %.2f; PREFILL (2 nodes, background) took %.2fs\n",
		       n_cold / t_cold, n_cold / t_cold / m_move, t_fill);
	}
	munmap(p, BENCH_PAGES * PAGE);
	munmap(q, BENCH_PAGES * PAGE);
	free(addrs);
	free(status);
}

/* Taint bits that mean the kernel complained: W (warning), D (died), B (bad page),
 * L (soft lockup), M (machine check). */
#define TAINT_TROUBLE ((1 << 9) | (1 << 7) | (1 << 5) | (1 << 14) | (1 << 4))

static void test_unload(void)
{
	struct rocs_shim_stats st;
	long free_before, free_after, memfree_before, memfree_after, sum = 0;
	unsigned int c;

	stash_settle();
	CHECK(shim_stats(&st) == 0, "STATS");
	if (st.pool_frames < 1024) {
		/* Run on its own, after a configuration without a stash: give it one. */
		CHECK(raw_config(COLOURS, ROCS_SHIM_CONFIG_PREFILL, POOL_LIMIT, POLLUTE_MASK, 0) == 0,
		      "CONFIGURE");
		stash_settle();
		CHECK(shim_stats(&st) == 0, "STATS");
	}
	for (c = 0; c < st.colours; c++)
		sum += st.held_by_colour[c];
	CHECK(sum == (long)st.pool_frames, "held by colour %ld, pool %llu", sum,
	      (unsigned long long)st.pool_frames);
	CHECK(st.pool_frames >= 1024, "the stash holds only %llu frames",
	      (unsigned long long)st.pool_frames);
	printf("# stats: pollute %llu restore %llu already %llu; failures unmapped %llu absent %llu "
	       "shared %llu unsupported %llu busy %llu nomem %llu; frames allocated %llu released "
	       "%llu held %llu\n",
	       (unsigned long long)st.migrated_pollute, (unsigned long long)st.migrated_restore,
	       (unsigned long long)st.already_placed, (unsigned long long)st.failures[0],
	       (unsigned long long)st.failures[1], (unsigned long long)st.failures[2],
	       (unsigned long long)st.failures[3], (unsigned long long)st.failures[4],
	       (unsigned long long)st.failures[5], (unsigned long long)st.frames_allocated,
	       (unsigned long long)st.frames_released, (unsigned long long)st.pool_frames);
	close(shim);
	shim = -1;
	sync();
	memfree_before = proc_kb("/proc/meminfo", "MemFree");
	free_before = free_kb_with_pcp();
	CHECK(syscall(SYS_delete_module, "rocs_shim", O_NONBLOCK) == 0, "rmmod: %s",
	      strerror(errno));
	free_after = free_kb_with_pcp();
	memfree_after = proc_kb("/proc/meminfo", "MemFree");
	printf("# unload: the stash held %llu kB; free frames (buddy + per-cpu lists) %ld -> %ld kB "
	       "(+%ld), MemFree %ld -> %ld kB (+%ld)\n",
	       (unsigned long long)st.pool_frames * 4, free_before, free_after,
	       free_after - free_before, memfree_before, memfree_after,
	       memfree_after - memfree_before);
	/* Every stashed frame is back, give or take the module's own text and data and what
	 * the vmstat per-cpu deltas have not folded in yet (1 MiB). */
	CHECK(free_after - free_before >= (long)st.pool_frames * 4 - 1024 &&
		      free_after - free_before <= (long)st.pool_frames * 4 + 1024,
	      "free frames rose %ld kB, the stash held %llu kB", free_after - free_before,
	      (unsigned long long)st.pool_frames * 4);
	CHECK(access(ROCS_SHIM_DEVICE, F_OK) != 0, "the device is still there");
	CHECK((read_long("/proc/sys/kernel/tainted") & TAINT_TROUBLE) == 0, "kernel tainted %ld",
	      read_long("/proc/sys/kernel/tainted"));
}

/* ---- driver ---------------------------------------------------------------------------- */

static const struct {
	const char *name;
	void (*fn)(void);
} tests[] = {
	{ "info", test_info },
	{ "pollute", test_pollute },
	{ "restore", test_restore },
	{ "home", test_home },
	{ "ordinary", test_ordinary },
	{ "reclaim", test_reclaim },
	{ "numa", test_numa },
	{ "order", test_order },
	{ "query", test_query },
	{ "writer", test_writer },
	{ "writer-process", test_writer_process },
	{ "vanish", test_target_vanishes },
	{ "thp", test_thp },
	{ "kinds", test_kinds },
	{ "special", test_special },
	{ "badargs", test_bad_arguments },
	{ "permissions", test_permissions },
	{ "fuzz", test_fuzz },
	{ "throughput", test_throughput },
	{ "unload", test_unload },
};

static bool wanted(const char *name, int argc, char **argv)
{
	int i;

	if (argc <= 2)
		return true;
	for (i = 2; i < argc; i++)
		if (!strcmp(argv[i], name))
			return true;
	/* The suite needs its configuration and the region the later tests reuse. */
	return !strcmp(name, "info") || !strcmp(name, "pollute");
}

int main(int argc, char **argv)
{
	int failed = 0, fd;
	size_t t;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: shimtest MODULE.ko [test...]\n");
		return 2;
	}
	module_path = argv[1];
	/* The plan: how many result lines to expect (load, then each selected test). */
	{
		int planned = 1;

		for (t = 0; t < sizeof(tests) / sizeof(tests[0]); t++)
			planned += wanted(tests[t].name, argc, argv);
		printf("1..%d\n", planned);
	}
	fd = open(module_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || syscall(SYS_finit_module, fd, "colours=64 pool_limit=4096", 0)) {
		printf("not ok - load: %s: %s\n", module_path, strerror(errno));
		return 1;
	}
	close(fd);
	shim = open(ROCS_SHIM_DEVICE, O_RDWR | O_CLOEXEC);
	if (shim < 0) {
		printf("not ok - open: %s: %s\n", ROCS_SHIM_DEVICE, strerror(errno));
		return 1;
	}
	printf("ok - load\n");
	/* Automatic NUMA balancing moves pages onto frames of any colour, between one test's
	 * placement and the next test's check of it (seen: 49 of the pollute test's pages off
	 * the pollute colours before the restore test ran): off for the whole suite. */
	numa_balancing(0);
	for (t = 0; t < sizeof(tests) / sizeof(tests[0]); t++) {
		double t0;

		if (!wanted(tests[t].name, argc, argv))
			continue;
		if (shim < 0 && strcmp(tests[t].name, "unload")) {
			printf("not ok - %s: the device is closed\n", tests[t].name);
			failed++;
			continue;
		}
		failure[0] = 0;
		t0 = now();
		tests[t].fn();
		if (failure[0]) {
			printf("not ok - %s: %s\n", tests[t].name, failure);
			failed++;
		} else {
			printf("ok - %s (%.1fs)\n", tests[t].name, now() - t0);
		}
	}
	return failed ? 1 : 0;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * The target program of tests/vm/guest/daemon.sh, and the probes that check what rocsd did
 * to it independently of rocsd (pagemap, the shim's STATS).
 *
 *   rocstarget run [--heap PAGES] [--seconds N]
 *       Maps STREAM (at 0x100000000) and REUSE (right after it): the addresses the replay
 *       PMU's script samples. The first HOT_PAGES pages of STREAM are a private mapping of
 *       /dev/zero, which the kernel makes anonymous memory but /proc/PID/maps names
 *       "/dev/zero": a mapping a policy can name. With --heap,
 *       also grows the heap by PAGES pages. Two threads write every 8-byte slot of all of
 *       them, round after round, until SIGTERM (or N seconds), each write first checking
 *       that the slot still holds the thread's write of the round before; at the end every
 *       slot is checked against the last round its thread finished. Prints "ready" once every page has been
 *       written, and at the end "N slots checked, M lost"; exits 1 when a write was lost.
 *   rocstarget colours PID COLOURS MASK
 *       Page numbers (decimal, one a line) on stdin: prints "pages N pollute P other O
 *       absent A", each page's colour being its frame number (from /proc/PID/pagemap) mod
 *       COLOURS, pollute when bit colour of MASK (hexadecimal) is set.
 *   rocstarget stats
 *       The shim's STATS: "pool P held H allocated A released R".
 *   rocstarget as UID GID PROGRAM [ARG...]
 *       Runs PROGRAM as UID with GID as its only group.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rocs_shim.h"

#define PAGE 4096UL
#define STREAM_ADDR 0x100000000UL
#define STREAM_PAGES 256
#define REUSE_PAGES 256
#define HOT_PAGES 32
#define SLOTS_PER_PAGE (PAGE / sizeof(uint64_t))
#define ROUND_PAUSE_US 5000

struct region {
	volatile uint64_t *base;
	size_t slots;
};

static struct region regions[3];
static int nregions;
static atomic_int stop;
/* The last round each writer finished, and the writes it found lost along the way. */
static atomic_ulong finished[2];
static unsigned long lost_on_the_way[2];

/* What slot @i of region @r holds after round @round. */
static uint64_t tag(unsigned long round, int r, size_t i)
{
	return (uint64_t)round << 32 | (uint64_t)r << 28 | (i & 0xfffffff);
}

static void *writer(void *arg)
{
	int t = (int)(intptr_t)arg;
	unsigned long round;

	/* Each slot must still hold what this thread wrote there last round, while pages
	 * move under it: a write lost at any time is found the next round. */
	for (round = 1; !atomic_load(&stop); round++) {
		for (int r = 0; r < nregions; r++)
			for (size_t i = t; i < regions[r].slots; i += 2) {
				if (round > 1 && regions[r].base[i] != tag(round - 1, r, i))
					lost_on_the_way[t]++;
				regions[r].base[i] = tag(round, r, i);
			}
		atomic_store(&finished[t], round);
		/* A breath between rounds, so that rocsd and rocsctl get the guest's two CPUs
		 * too (a TCG guest has little to spare); pages still move under the writes. */
		usleep(ROUND_PAUSE_US);
	}
	return NULL;
}

/* Slots whose value is not the last one their writer wrote. */
static unsigned long lost_writes(size_t *checked)
{
	unsigned long lost = 0;

	*checked = 0;
	for (int r = 0; r < nregions; r++)
		for (size_t i = 0; i < regions[r].slots; i++) {
			(*checked)++;
			if (regions[r].base[i] != tag(atomic_load(&finished[i % 2]), r, i))
				lost++;
		}
	return lost;
}

static int run(int argc, char **argv)
{
	long heap_pages = 0, seconds = 0;
	pthread_t threads[2];
	sigset_t set;
	size_t checked;
	unsigned long lost;
	char *p, *rest;
	int sig, i, zero;

	for (i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--heap"))
			heap_pages = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atol(argv[i + 1]);
	}
	zero = open("/dev/zero", O_RDWR);
	p = mmap((void *)STREAM_ADDR, HOT_PAGES * PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_FIXED_NOREPLACE, zero, 0);
	rest = mmap(p + HOT_PAGES * PAGE, (STREAM_PAGES - HOT_PAGES + REUSE_PAGES) * PAGE,
		    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (zero < 0 || p != (char *)STREAM_ADDR || rest != p + HOT_PAGES * PAGE) {
		perror("rocstarget: mmap at 0x100000000");
		return 2;
	}
	close(zero);
	regions[nregions++] = (struct region){ (uint64_t *)p, STREAM_PAGES * SLOTS_PER_PAGE };
	regions[nregions++] = (struct region){ (uint64_t *)(p + STREAM_PAGES * PAGE),
					       REUSE_PAGES * SLOTS_PER_PAGE };
	if (heap_pages > 0) {
		char *brk_now = sbrk(0), *heap;

		/* Start on a page boundary so that every heap page is ours alone. */
		heap = sbrk((PAGE - (uintptr_t)brk_now % PAGE) % PAGE + heap_pages * PAGE);
		if (heap == (void *)-1) {
			perror("rocstarget: sbrk");
			return 2;
		}
		heap += (PAGE - (uintptr_t)brk_now % PAGE) % PAGE;
		regions[nregions++] = (struct region){ (uint64_t *)heap, heap_pages * SLOTS_PER_PAGE };
		printf("rocstarget: heap %p-%p\n", (void *)heap, (void *)(heap + heap_pages * PAGE));
	}

	/* Signals go to this thread alone, which waits for them. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	for (i = 0; i < 2; i++)
		if (pthread_create(&threads[i], NULL, writer, (void *)(intptr_t)i)) {
			fprintf(stderr, "rocstarget: pthread_create failed\n");
			return 2;
		}
	while (atomic_load(&finished[0]) < 1 || atomic_load(&finished[1]) < 1)
		usleep(10000);
	printf("rocstarget: ready\n");
	fflush(stdout);
	if (seconds > 0)
		alarm(seconds);
	sigwait(&set, &sig);
	atomic_store(&stop, 1);
	for (i = 0; i < 2; i++)
		pthread_join(threads[i], NULL);
	lost = lost_writes(&checked) + lost_on_the_way[0] + lost_on_the_way[1];
	printf("rocstarget: %zu slots checked after %lu and %lu rounds, %lu lost\n", checked,
	       atomic_load(&finished[0]), atomic_load(&finished[1]), lost);
	return lost ? 1 : 0;
}

static int colours(int argc, char **argv)
{
	unsigned long pages = 0, pollute = 0, other = 0, absent = 0, colours, mask;
	char path[64], line[64];
	uint64_t page, entry;
	int fd;

	if (argc != 5)
		return 2;
	colours = strtoul(argv[3], NULL, 0);
	mask = strtoul(argv[4], NULL, 16);
	snprintf(path, sizeof(path), "/proc/%s/pagemap", argv[2]);
	fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror(path);
		return 2;
	}
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "%" SCNu64, &page) != 1)
			continue;
		pages++;
		if (pread(fd, &entry, sizeof(entry), page * sizeof(entry)) != sizeof(entry) ||
		    !(entry & 1ULL << 63)) {
			absent++;
			continue;
		}
		/* Bits 0-54: the frame number (visible to root). */
		if (mask >> ((entry & ((1ULL << 55) - 1)) % colours) & 1)
			pollute++;
		else
			other++;
	}
	close(fd);
	printf("pages %lu pollute %lu other %lu absent %lu\n", pages, pollute, other, absent);
	return 0;
}

static int stats(void)
{
	static struct rocs_shim_stats st;
	unsigned long held = 0;
	int fd = open(ROCS_SHIM_DEVICE, O_RDWR);

	if (fd < 0 || ioctl(fd, ROCS_SHIM_IOC_STATS, &st)) {
		perror(ROCS_SHIM_DEVICE);
		return 2;
	}
	for (unsigned int c = 0; c < st.colours && c < ROCS_SHIM_MAX_COLOURS; c++)
		held += st.held_by_colour[c];
	printf("pool %llu held %lu allocated %llu released %llu\n",
	       (unsigned long long)st.pool_frames, held, (unsigned long long)st.frames_allocated,
	       (unsigned long long)st.frames_released);
	close(fd);
	return 0;
}

static int as(int argc, char **argv)
{
	gid_t gid;

	if (argc < 5)
		return 2;
	gid = (gid_t)atol(argv[3]);
	if (setgroups(1, &gid) || setgid(gid) || setuid((uid_t)atol(argv[2]))) {
		perror("rocstarget as");
		return 2;
	}
	execvp(argv[4], argv + 4);
	perror(argv[4]);
	return 127;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return run(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "colours"))
		return colours(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "stats"))
		return stats();
	if (argc >= 2 && !strcmp(argv[1], "as"))
		return as(argc, argv);
	fprintf(stderr, "usage: rocstarget run|colours|stats|as ... (see the source)\n");
	return 2;
}
